#!/usr/bin/env bash
# `true` through the `serve` API (warm pool) against a bare `docker run --rm --network none
# IMAGE true` on the same image, side by side: interleaved pairs (medians, p99, ratios),
# then sustained throughput with 8 concurrent clients for each, the pool refilling.
#
#   bench/serve.sh                 PAIRS=20 SECONDS_SUSTAINED=60 CLIENTS=8 POOL=2 by default
#   BIN=path/to/egress-sandbox PAIRS=10 SECONDS_SUSTAINED=30 bench/serve.sh
#
# Builds the release binary unless BIN is given; starts its own daemon on a private socket
# and stops it (SIGTERM: every run's objects and every slot removed) at the end. Before
# each timed run of either kind the engine is let settle: the pool full again and no run's
# objects being removed, so neither side pays for the other's background work. The load
# average is printed with the figures: the machine may be shared.
set -euo pipefail

cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-20}
SECONDS_SUSTAINED=${SECONDS_SUSTAINED:-60}
CLIENTS=${CLIENTS:-8}
POOL=${POOL:-2}
if [[ -z "${BIN:-}" ]]; then
    cargo build --release --quiet
    BIN=target/$(rustc --print host-tuple)/release/egress-sandbox
fi

dir=$(mktemp -d)
socket="$dir/api.sock"
# Warm-up outside the measurement: the proxy (and, if needed, base) image; the report names
# the base image this binary uses, which the bare docker run then uses too.
"$BIN" run --report "$dir/warmup.json" -- true >/dev/null 2>&1
IMAGE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$dir/warmup.json")
"$BIN" serve --socket "$socket" --pool "$POOL" 2>"$dir/daemon.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 600); do
    grep -q "serving on" "$dir/daemon.log" 2>/dev/null && break
    sleep 0.1
done
echo "image $IMAGE, pool $POOL; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$socket" "$IMAGE" "$PAIRS" "$SECONDS_SUSTAINED" "$CLIENTS" "$POOL" <<'PY'
import json, statistics, subprocess, sys, threading, time
sys.path.insert(0, "clients/python")
from egress_sandbox import Client

socket, image, pairs, sustained, clients, pool = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
client = Client(socket)

def load():
    return open("/proc/loadavg").read().split()[0]

def metric(name):
    connection, response = client._request("GET", "/metrics")
    try:
        body = response.read()
    finally:
        connection.close()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0

def settle():
    """The pool full again, no run's objects being removed (bounded)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready = client.health()["pool"]["ready"]
        if ready >= pool and metric("egress_sandbox_runs_tearing_down") == 0:
            return
        time.sleep(0.05)

def docker_true():
    subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def api_true():
    result = client.run(["true"])
    assert result.exit_code == 0, result

def timed(fn):
    settle()
    start = time.monotonic()
    fn()
    return time.monotonic() - start

def p99(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]

settle(); api_true(); docker_true()
docker, api = [], []
loads = []
for _ in range(pairs):
    docker.append(timed(docker_true))
    api.append(timed(api_true))
    loads.append(float(load()))
d50, a50 = statistics.median(docker), statistics.median(api)
d99, a99 = p99(docker), p99(api)
print(f"{pairs} interleaved pairs (load average {min(loads):.1f}..{max(loads):.1f}):")
print(f"  docker run --rm --network none  p50 {d50:.3f}s  p99 {d99:.3f}s")
print(f"  serve API, warm (POST /v1/runs true)  p50 {a50:.3f}s  p99 {a99:.3f}s")
print(f"  ratio p50 {a50 / d50:.2f}x (target <= 0.6x)  p99 {a99 / d99:.2f}x (target <= 1.5x)")

def sustained_rate(fn):
    stop = time.monotonic() + sustained
    done, failed = [0], [0]
    lock = threading.Lock()
    def worker():
        while time.monotonic() < stop:
            try:
                fn()
                with lock:
                    done[0] += 1
            except Exception:
                with lock:
                    failed[0] += 1
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    start = time.monotonic()
    for t in threads: t.start()
    for t in threads: t.join()
    elapsed = time.monotonic() - start
    return done[0], failed[0], elapsed

for name, fn in [("docker run --rm --network none", docker_true), ("serve API", api_true)]:
    settle()
    warm0 = metric('egress_sandbox_run_starts_total{path="warm"}')
    cold0 = metric('egress_sandbox_run_starts_total{path="cold"}')
    before = load()
    done, failed, elapsed = sustained_rate(fn)
    extra = ""
    if fn is api_true:
        warm = metric('egress_sandbox_run_starts_total{path="warm"}') - warm0
        cold = metric('egress_sandbox_run_starts_total{path="cold"}') - cold0
        extra = f", {warm:.0f} warm / {cold:.0f} cold"
    print(f"sustained, {clients} clients, {sustained:.0f}s: {name}: {done} runs in {elapsed:.1f}s = {done / elapsed:.2f}/s ({failed} failed{extra}; load {before} -> {load()})")
PY
