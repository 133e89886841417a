#!/usr/bin/env bash
# runc and gVisor (runsc) side by side, the way users' programs run sandboxes:
#
# 1. cold: `egress-sandbox run [--runtime runsc] -- true`, interleaved pairs (medians,
#    ratio runsc/runc; target: runsc <= 2x runc);
# 2. warm: `true` through `serve --runtime runc` and `serve --runtime runsc` (warm pools),
#    interleaved with a bare `docker run --rm --network none IMAGE true` under runc
#    (target: runsc warm p50 <= that bare docker run p50);
# 3. sustained: CLIENTS concurrent clients for SECONDS_SUSTAINED against each daemon
#    (runs/s);
# 4. where the time goes: one cold run under each runtime at -vv, its own debug lines
#    (the engine client's request lines left out) with the time since the start.
#
#   bench/gvisor.sh          PAIRS=10 SECONDS_SUSTAINED=30 CLIENTS=4 POOL=2 by default
#   BIN=path/to/egress-sandbox bench/gvisor.sh
#
# Needs runsc registered (scripts/gvisor-setup.sh). Builds the release binary unless BIN is
# given. Each daemon runs on a private socket and is stopped (SIGTERM: every slot removed)
# at the end. The load average is printed with the figures: the machine may be shared.
set -euo pipefail

cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-10}
SECONDS_SUSTAINED=${SECONDS_SUSTAINED:-30}
CLIENTS=${CLIENTS:-4}
POOL=${POOL:-2}
GVISOR=${GVISOR:-runsc}
if [[ -z "${BIN:-}" ]]; then
    cargo build --release --quiet
    BIN=target/$(rustc --print host-tuple)/release/egress-sandbox
fi
docker info --format '{{json .Runtimes}}' | grep -q "\"$GVISOR\"" || {
    echo "the engine has no runtime $GVISOR: run scripts/gvisor-setup.sh first" >&2
    exit 1
}

dir=$(mktemp -d)
daemons=()
cleanup() {
    for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

# Warm-up outside the measurement (images); the report names the base image, which the
# bare docker run uses too.
"$BIN" run --report "$dir/warmup.json" -- true >/dev/null 2>&1
"$BIN" run --runtime "$GVISOR" -- true >/dev/null 2>&1
IMAGE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$dir/warmup.json")

start_daemon() { # NAME RUNTIME
    "$BIN" serve --socket "$dir/$1.sock" --pool "$POOL" --runtime "$2" 2>"$dir/$1.log" &
    daemons+=($!)
    for _ in $(seq 1 600); do
        grep -q "serving on" "$dir/$1.log" 2>/dev/null && return
        sleep 0.1
    done
    echo "serve --runtime $2 did not start: $(cat "$dir/$1.log")" >&2
    exit 1
}
start_daemon runc runc
start_daemon gvisor "$GVISOR"

echo "image $IMAGE, pool $POOL, $(runsc --version 2>/dev/null | head -1)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$BIN" "$IMAGE" "$GVISOR" "$dir" "$PAIRS" "$SECONDS_SUSTAINED" "$CLIENTS" "$POOL" <<'PY'
import statistics, subprocess, sys, threading, time
sys.path.insert(0, "clients/python")
from egress_sandbox import Client

binary, image, gvisor, tmp = sys.argv[1:5]
pairs, sustained, clients, pool = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
daemons = {"runc": Client(f"{tmp}/runc.sock"), gvisor: Client(f"{tmp}/gvisor.sock")}

def load():
    return float(open("/proc/loadavg").read().split()[0])

def metric(client, name):
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
    """Every pool full again, no run's objects being removed (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(c.health()["pool"]["ready"] >= pool
               and metric(c, "egress_sandbox_runs_tearing_down") == 0
               for c in daemons.values()):
            return
        time.sleep(0.05)

def timed(fn):
    settle()
    start = time.monotonic()
    fn()
    return time.monotonic() - start

def cold(runtime):
    return lambda: subprocess.run([binary, "run", "--runtime", runtime, "--", "true"], check=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def warm(runtime):
    def run():
        result = daemons[runtime].run(["true"])
        assert result.exit_code == 0, result
    return run

def docker_true():
    subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def p(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

loads = []
series = {"cold runc": [], f"cold {gvisor}": [], "docker run runc": [], "warm runc": [], f"warm {gvisor}": []}
for fn in (cold("runc"), cold(gvisor), warm("runc"), warm(gvisor), docker_true):
    fn()
for _ in range(pairs):
    series["cold runc"].append(timed(cold("runc")))
    series[f"cold {gvisor}"].append(timed(cold(gvisor)))
    series["docker run runc"].append(timed(docker_true))
    series["warm runc"].append(timed(warm("runc")))
    series[f"warm {gvisor}"].append(timed(warm(gvisor)))
    loads.append(load())
print(f"\n{pairs} interleaved rounds (load average {min(loads):.1f}..{max(loads):.1f}):")
for name, values in series.items():
    print(f"  {name:<18} p50 {statistics.median(values):.3f}s  p90 {p(values, 0.9):.3f}s")
med = {name: statistics.median(values) for name, values in series.items()}
print(f"  cold {gvisor}/runc            {med[f'cold {gvisor}'] / med['cold runc']:.2f}x (target <= 2x)")
print(f"  warm {gvisor}/docker run runc {med[f'warm {gvisor}'] / med['docker run runc']:.2f}x (target <= 1x)")
print(f"  warm {gvisor}/warm runc       {med[f'warm {gvisor}'] / med['warm runc']:.2f}x")

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
    return done[0] / (time.monotonic() - start), failed[0]

print(f"\nsustained, {clients} clients for {sustained:.0f}s each (pools of {pool} refilling):")
rates = {}
for runtime in ("runc", gvisor):
    settle()
    before = load()
    rate, failed = sustained_rate(warm(runtime))
    rates[runtime] = rate
    print(f"  serve --runtime {runtime:<6} {rate:.2f} runs/s, {failed} failed (load {before:.1f}..{load():.1f})")
print(f"  ratio {gvisor}/runc {rates[gvisor] / rates['runc']:.2f}x")
PY

echo
echo "where a cold run's time goes (-vv, seconds since the first line; engine requests left out):"
for runtime in runc "$GVISOR"; do
    echo "  --runtime $runtime:"
    "$BIN" -vv run --runtime "$runtime" -- true 2>&1 >/dev/null |
        grep -E '^[0-9-]+T[0-9:.]+Z +DEBUG' | grep -vE 'DEBUG (unix://|Decoded|\{)' |
        python3 -c '
import sys, datetime
first = None
for line in sys.stdin:
    stamp, _, rest = line.partition(" ")
    at = datetime.datetime.fromisoformat(stamp.rstrip("Z"))
    first = first or at
    message = rest.split("DEBUG", 1)[1].strip()
    print(f"    {(at - first).total_seconds():6.3f}  {message[:110]}")
'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
