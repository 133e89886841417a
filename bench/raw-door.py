#!/usr/bin/env python3
"""A raw door against a CONNECT tunnel, side by side, through the same proxy (release build).

The way programs behave: a new curl process and a new connection per request.

  download: one GiB over HTTP from a local upstream, through a raw door (curl with the
            proxy variables ignored: it connects to the name's loopback address) and through
            a CONNECT tunnel (curl -p -x), rounds taking turns; median MiB/s of each.
  ttfb:     REQUESTS fresh connections each, a small answer, time to first byte, taking
            turns request by request; median and p90 of each.
Ratios are raw / tunnel (throughput: higher is better; ttfb: lower is better). Every figure
comes with the 1-minute load average, since the machine is shared.

Everything stays on loopback: the upstream on 127.0.0.2, the proxy's explicit door and DNS
responder on 127.0.0.1, its raw door on 127.100.0.1 (the first name's address).

Usage: bench/raw-door.py [REQUESTS] [GIB_ROUNDS]   (defaults: 200 3)
Needs: curl, a release build (built here if missing: cargo build --release).
"""

import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST_TUPLE = subprocess.run(
    ["rustc", "--print", "host-tuple"], capture_output=True, text=True, check=True
).stdout.strip()
BINARY = os.path.join(ROOT, "target", HOST_TUPLE, "release", "egress-sandbox")
REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
GIB_ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
GIB = 1 << 30
CHUNK = bytes(8 << 20)
NAME = "bench.test"
RAW_ADDRESS = "127.100.0.1"


def load():
    return open("/proc/loadavg").read().split()[0]


def serve_upstream(listener):
    """HTTP/1.1: /big answers one GiB of zeros, anything else a short body; one request per
    connection."""

    def handle(conn):
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                more = conn.recv(4096)
                if not more:
                    return
                head += more
            if head.startswith(b"GET /big "):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % GIB)
                left = GIB
                while left:
                    piece = memoryview(CHUNK)[: min(left, len(CHUNK))]
                    conn.sendall(piece)
                    left -= len(piece)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nhi\n")

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def dns_query(server, name):
    """One A query to the proxy's responder: it gives the name its loopback address."""
    query = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        query += bytes([len(label)]) + label.encode()
    query += b"\x00\x00\x01\x00\x01"
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(5)
    udp.sendto(query, server)
    answer = udp.recv(512)
    return socket.inet_ntoa(answer[-4:])


def curl(args):
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "--noproxy", "", "-w", "%{time_starttransfer} %{speed_download}"] + args,
        check=True,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
    ).stdout.split()
    return float(out[0]), float(out[1])


def main():
    if not os.path.exists(BINARY):
        subprocess.run(["cargo", "build", "--release", "-q", "--bin", "egress-sandbox"], cwd=ROOT, check=True)
    upstream = socket.socket()
    upstream.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    upstream.bind(("127.0.0.2", 0))
    upstream.listen(1024)
    port = upstream.getsockname()[1]
    threading.Thread(target=serve_upstream, args=(upstream,), daemon=True).start()

    policy = (
        f"version: 1\nname: bench\nallow:\n  - host: {NAME}\n    ports: [{port}]\n"
        f"  - cidr: 127.0.0.2/32\n    ports: [{port}]\n"
    )
    tmp = tempfile.mkdtemp(prefix="egress-bench-raw.")
    proxy = subprocess.Popen(
        [
            BINARY, "proxy",
            "--listen", "127.0.0.1:0",
            "--dns-listen", "127.0.0.1:0",
            "--dns-answer", "127.0.0.1",
            "--raw-listen", f"{RAW_ADDRESS}:{port}",
            "--policy-yaml", f"bench.yaml={policy}",
            "--resolve", f"{NAME}=127.0.0.2",
            "--audit-log", os.path.join(tmp, "audit.jsonl"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = json.loads(proxy.stdout.readline())
        explicit = ready["listen"]
        dns_host, dns_port = ready["dns"].rsplit(":", 1)
        given = dns_query((dns_host, int(dns_port)), NAME)
        assert given == RAW_ADDRESS, f"the responder gave {given}"
        url = lambda path: f"http://{NAME}:{port}{path}"
        raw = lambda path: curl(["--resolve", f"{NAME}:{port}:{RAW_ADDRESS}", url(path)])
        tunnel = lambda path: curl(["-p", "-x", f"http://{explicit}", url(path)])

        for warm in (raw, tunnel):
            warm("/small")
        throughput = {"raw": [], "tunnel": []}
        loads = []
        for round_ in range(GIB_ROUNDS):
            order = [("raw", raw), ("tunnel", tunnel)]
            if round_ % 2:
                order.reverse()
            for label, fetch in order:
                loads.append(load())
                throughput[label].append(fetch("/big")[1] / (1 << 20))
        ttfb = {"raw": [], "tunnel": []}
        ttfb_loads = []
        for n in range(REQUESTS):
            order = [("raw", raw), ("tunnel", tunnel)]
            if n % 2:
                order.reverse()
            for label, fetch in order:
                ttfb[label].append(fetch("/small")[0] * 1000)
            if n % 50 == 0:
                ttfb_loads.append(load())

        median = statistics.median
        p90 = lambda values: sorted(values)[int(len(values) * 0.9)]
        print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
        print(f"download 1 GiB x {GIB_ROUNDS} (load {', '.join(loads)}):")
        for label in ("raw", "tunnel"):
            print(f"  {label:7} median {median(throughput[label]):8.0f} MiB/s  runs {[round(v) for v in throughput[label]]}")
        print(f"  ratio raw/tunnel {median(throughput['raw']) / median(throughput['tunnel']):.2f} (higher is better)")
        print(f"ttfb, {REQUESTS} fresh connections each (load {', '.join(ttfb_loads)}):")
        for label in ("raw", "tunnel"):
            print(f"  {label:7} median {median(ttfb[label]):6.2f} ms  p90 {p90(ttfb[label]):6.2f} ms")
        print(f"  ratio raw/tunnel {median(ttfb['raw']) / median(ttfb['tunnel']):.2f} (lower is better)")
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
