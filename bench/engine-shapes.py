#!/usr/bin/env python3
"""What the Docker engine alone charges for a run's shape: the engine calls of a cold run,
made straight on the API (in parallel where the tool makes them in parallel), with no proxy
handoff, no launcher and no output, side by side with a bare `docker run --rm --network none`.

  current   the shape `egress-sandbox run` used before passed listeners (and still uses on a
            remote engine): a per-run internal network; the proxy and the sandbox created
            and started on it at once; the proxy connected to the egress network after its
            start; then the sandbox's end, SIGTERM to the proxy, both containers and the
            network removed at once (the network retried until the proxy's endpoint is gone).
  no-net    the shape `egress-sandbox run` uses on a local engine: no per-run network, the
            proxy created on the egress network only, the sandbox with --network none, a
            host directory bind-mounted into both (through which the launcher passes the doors
            it binds on the sandbox's loopback to the proxy).
  bare      docker run --rm --network none IMAGE true: create, start, wait, remove.

Two phases: ROUNDS rounds of one run of each shape, in a new order each round, the engine
let settle between runs (medians, ratios to bare); then CLIENTS clients running one shape
back to back for SECONDS seconds (runs per second), each shape in turn.

  bench/engine-shapes.py [ROUNDS] [SECONDS] [CLIENTS]     (defaults: 15 30 8)

Needs the proxy image and the base image, both made by any earlier `egress-sandbox run`.
Every object it makes is named egress-bench-* and removed before it exits.
"""
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

ENGINE = os.environ.get("DOCKER_SOCKET", "/var/run/docker.sock")
BASE = os.environ.get("IMAGE", "egress-sandbox-base:bookworm-4")
EGRESS = "egress-sandbox-egress"
HARDENED = {"ReadonlyRootfs": True, "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"]}


class EngineConnection(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("engine")

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(ENGINE)


def api(method, path, body=None):
    connection = EngineConnection()
    payload = json.dumps(body) if body is not None else None
    connection.request(method, "/v1.41" + path, payload, {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
    return json.loads(data) if data else None


def at_once(*calls):
    """Runs the calls on threads, as the tool's concurrent requests; returns their results."""
    results = [None] * len(calls)
    errors = []

    def call(index, function):
        try:
            results[index] = function()
        except Exception as error:  # reported after the others finish
            errors.append(error)

    threads = [threading.Thread(target=call, args=pair) for pair in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def proxy_image():
    tags = [tag for image in api("GET", "/images/json") for tag in image.get("RepoTags") or []]
    proxies = sorted(tag for tag in tags if tag.startswith("egress-sandbox-proxy:"))
    if not proxies or f"{BASE}" not in tags:
        sys.exit("needs the proxy and base images: run `egress-sandbox run -- true` once first")
    return proxies[-1]


PROXY = None
PROXY_COMMAND = ["--listen", "0.0.0.0:3128", "--allow", "example.org"]


def create(name, image, command, host_config):
    body = {"Image": image, "User": "65534:65534", "Cmd": command,
            "HostConfig": dict(HARDENED, **host_config)}
    return api("POST", f"/containers/create?name={name}", body)["Id"]


def remove_network_when_free(name):
    for _ in range(200):
        try:
            return api("DELETE", f"/networks/{name}")
        except RuntimeError as error:
            if "active endpoints" not in str(error):
                raise
            time.sleep(0.05)


def shape_current(tag, index):
    network = f"egress-bench-{tag}"
    subnet = f"10.214.{index % 250}.{(index // 250) % 32 * 8}/29"
    api("POST", "/networks/create", {
        "Name": network, "Driver": "bridge", "Internal": True,
        "IPAM": {"Config": [{"Subnet": subnet}]},
        "Options": {"com.docker.network.bridge.inhibit_ipv4": "true"}})
    proxy, sandbox = at_once(
        lambda: create(f"{network}-proxy", PROXY, PROXY_COMMAND, {"NetworkMode": network}),
        lambda: create(f"{network}-sandbox", BASE, ["true"], {"NetworkMode": network}))
    at_once(lambda: api("POST", f"/containers/{proxy}/start"),
            lambda: api("POST", f"/containers/{sandbox}/start"))
    api("POST", f"/networks/{EGRESS}/connect", {"Container": proxy})
    api("POST", f"/containers/{sandbox}/wait?condition=not-running")
    api("POST", f"/containers/{proxy}/kill?signal=SIGTERM")
    at_once(lambda: api("DELETE", f"/containers/{proxy}?force=true&v=true"),
            lambda: api("DELETE", f"/containers/{sandbox}?force=true&v=true"),
            lambda: remove_network_when_free(network))


def shape_no_network(tag, index):
    name = f"egress-bench-{tag}"
    doors = tempfile.mkdtemp(prefix="egress-bench-")
    os.chmod(doors, 0o777)
    try:
        proxy, sandbox = at_once(
            lambda: create(f"{name}-proxy", PROXY, PROXY_COMMAND,
                           {"NetworkMode": EGRESS, "Binds": [f"{doors}:/run/doors"]}),
            lambda: create(f"{name}-sandbox", BASE, ["true"],
                           {"NetworkMode": "none", "Binds": [f"{doors}:/run/doors:ro"]}))
        at_once(lambda: api("POST", f"/containers/{proxy}/start"),
                lambda: api("POST", f"/containers/{sandbox}/start"))
        api("POST", f"/containers/{sandbox}/wait?condition=not-running")
        api("POST", f"/containers/{proxy}/kill?signal=SIGTERM")
        at_once(lambda: api("DELETE", f"/containers/{proxy}?force=true&v=true"),
                lambda: api("DELETE", f"/containers/{sandbox}?force=true&v=true"))
    finally:
        shutil.rmtree(doors, ignore_errors=True)


def shape_bare(tag, index):
    container = api("POST", f"/containers/create?name=egress-bench-{tag}",
                    {"Image": BASE, "Cmd": ["true"], "HostConfig": {"NetworkMode": "none"}})["Id"]
    api("POST", f"/containers/{container}/start")
    api("POST", f"/containers/{container}/wait?condition=not-running")
    api("DELETE", f"/containers/{container}?force=true&v=true")


SHAPES = {"current": shape_current, "no-net": shape_no_network, "bare": shape_bare}


def load():
    return open("/proc/loadavg").read().split()[0]


def sequential(rounds):
    times = {name: [] for name in SHAPES}
    print(f"{rounds} rounds, one run of each shape, load {load()}", flush=True)
    for index in range(rounds):
        for name in random.sample(list(SHAPES), len(SHAPES)):
            time.sleep(0.5)  # let the previous run's background work settle
            start = time.perf_counter()
            SHAPES[name](f"{name}-{index}", index)
            times[name].append(time.perf_counter() - start)
    bare = statistics.median(times["bare"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:8} median {median:.3f} s  min {min(samples):.3f}  max {max(samples):.3f}"
              f"  = {median / bare:.2f}x bare")
    print(f"  load after {load()}", flush=True)


def sustained(seconds, clients):
    print(f"{clients} clients back to back, {seconds} s per shape", flush=True)
    for name, shape in SHAPES.items():
        done, failed = [0], [0]
        counter = iter(range(1_000_000))
        lock = threading.Lock()
        deadline = time.perf_counter() + seconds

        def client():
            while time.perf_counter() < deadline:
                with lock:
                    index = next(counter)
                try:
                    shape(f"{name}-s{index}", 1000 + index)
                    with lock:
                        done[0] += 1
                except Exception as error:
                    with lock:
                        failed[0] += 1
                    print(f"  {name}: {error}", file=sys.stderr)

        start = time.perf_counter()
        start_load = load()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        print(f"  {name:8} {done[0]} runs in {elapsed:.1f} s = {done[0] / elapsed:.2f}/s"
              f" ({failed[0]} failed; load {start_load} -> {load()})", flush=True)
        time.sleep(5)


def remove_leftovers():
    for container in api("GET", "/containers/json?all=true"):
        if any(name.startswith("/egress-bench-") for name in container["Names"]):
            api("DELETE", f"/containers/{container['Id']}?force=true&v=true")
    for network in api("GET", "/networks"):
        if network["Name"].startswith("egress-bench-"):
            api("DELETE", f"/networks/{network['Id']}")


def main():
    global PROXY
    defaults = [15, 30, 8]
    given = [int(argument) for argument in sys.argv[1:4]]
    rounds, seconds, clients = given + defaults[len(given):]
    PROXY = proxy_image()
    try:
        sequential(rounds)
        if seconds > 0:
            sustained(seconds, clients)
    finally:
        remove_leftovers()


if __name__ == "__main__":
    main()
