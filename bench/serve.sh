#!/usr/bin/env bash
# `true` through the `serve` API against a bare `docker run --rm --network none IMAGE true`,
# side by side: interleaved pairs (medians, p99, ratios), then sustained throughput with 8
# concurrent clients for each.
#
#   bench/serve.sh                 PAIRS=20 SECONDS_SUSTAINED=60 CLIENTS=8 by default
#   BIN=path/to/egress-sandbox PAIRS=10 SECONDS_SUSTAINED=30 bench/serve.sh
#
# Builds the release binary unless BIN is given; starts its own daemon on a private socket
# and stops it (SIGTERM: every run's objects removed) at the end.
set -euo pipefail

cd "$(dirname "$0")/.."
IMAGE=egress-sandbox-base:bookworm-3
PAIRS=${PAIRS:-20}
SECONDS_SUSTAINED=${SECONDS_SUSTAINED:-60}
CLIENTS=${CLIENTS:-8}
if [[ -z "${BIN:-}" ]]; then
    cargo build --release --quiet
    BIN=target/x86_64-unknown-linux-gnu/release/egress-sandbox
fi

dir=$(mktemp -d)
socket="$dir/api.sock"
"$BIN" serve --socket "$socket" 2>"$dir/daemon.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 600); do
    grep -q "serving on" "$dir/daemon.log" 2>/dev/null && break
    sleep 0.1
done
# Warm-up outside the measurement: the proxy (and, if needed, base) image.
"$BIN" run -- true >/dev/null 2>&1

python3 - "$socket" "$IMAGE" "$PAIRS" "$SECONDS_SUSTAINED" "$CLIENTS" <<'PY'
import statistics, subprocess, sys, threading, time
sys.path.insert(0, "clients/python")
from egress_sandbox import Client

socket, image, pairs, sustained, clients = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
client = Client(socket)

def docker_true():
    subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def api_true():
    result = client.run(["true"])
    assert result.exit_code == 0, result

def timed(fn):
    start = time.monotonic()
    fn()
    return time.monotonic() - start

def p99(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]

api_true(); docker_true()
docker, api = [], []
for _ in range(pairs):
    docker.append(timed(docker_true))
    api.append(timed(api_true))
d50, a50 = statistics.median(docker), statistics.median(api)
d99, a99 = p99(docker), p99(api)
print(f"{pairs} interleaved pairs:")
print(f"  docker run --rm --network none  p50 {d50:.3f}s  p99 {d99:.3f}s")
print(f"  serve API (POST /v1/runs true)  p50 {a50:.3f}s  p99 {a99:.3f}s")
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
    done, failed, elapsed = sustained_rate(fn)
    print(f"sustained, {clients} clients, {sustained:.0f}s: {name}: {done} runs in {elapsed:.1f}s = {done / elapsed:.2f}/s ({failed} failed)")
PY
