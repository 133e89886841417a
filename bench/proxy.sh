#!/usr/bin/env bash
# Side-by-side benchmark of the egress proxy, on loopback only:
#   throughput: one 1 GiB download through a CONNECT tunnel (median of 3 runs)
#   latency:    1,000 sequential small plain-HTTP requests, a new connection each,
#               median time to first byte
# for: no proxy (the physical limit), egress-sandbox proxy (release), Squid, tinyproxy.
# Squid and tinyproxy run in the foreground from private configs in a temp dir, on free
# loopback ports, with their own pid/log files: no system config or service is touched.
#
# Usage: bench/proxy.sh [BYTES] [REQUESTS]     (defaults: 1073741824 1000)
set -euo pipefail

BYTES=${1:-1073741824}
REQUESTS=${2:-1000}
RUNS=3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/egress-bench.XXXXXX)
chmod 755 "$TMP"
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}

json() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

echo "building release binaries..." >&2
(cd "$ROOT" && cargo build --release -q --bin egress-sandbox && cargo build --release -q -p egress-proxy --example bench)
OUT="$ROOT/target/$(rustc --print host-tuple)/release"
BENCH="$OUT/examples/bench"

# Upstream: a small Rust HTTP server on 127.0.0.1.
UP_PORT=$(free_port)
"$BENCH" serve "127.0.0.1:$UP_PORT" >/dev/null &
PIDS+=($!)
wait_port "$UP_PORT"
TARGET="127.0.0.1:$UP_PORT"

# egress-sandbox proxy: a cidr rule makes the upstream a legitimate destination.
OURS=$(free_port)
POLICY=$'version: 1\nname: bench\nallow:\n  - cidr: 127.0.0.1/32\n    ports: ['"$UP_PORT"$']\n'
"$OUT/egress-sandbox" proxy --listen "127.0.0.1:$OURS" --policy-yaml "bench.yaml=$POLICY" \
    --audit-log "$TMP/audit.log" --run-id bench >"$TMP/ours.out" &
PIDS+=($!)
wait_port "$OURS"

# Squid: private config, foreground, no cache, no disk.
SQUID=$(free_port)
cat >"$TMP/squid.conf" <<EOF
http_port 127.0.0.1:$SQUID
pid_filename $TMP/squid.pid
cache_log $TMP/squid-cache.log
access_log none
cache_store_log none
coredump_dir $TMP
cache deny all
cache_mem 8 MB
netdb_filename none
pinger_enable off
shutdown_lifetime 0 seconds
via off
acl bench_src src 127.0.0.1/32
http_access allow bench_src
http_access deny all
EOF
chmod 644 "$TMP/squid.conf"
chmod 777 "$TMP"
squid -N -f "$TMP/squid.conf" 2>"$TMP/squid.err" &
PIDS+=($!)
wait_port "$SQUID"

# tinyproxy: private config, foreground.
TINY=$(free_port)
cat >"$TMP/tinyproxy.conf" <<EOF
Port $TINY
Listen 127.0.0.1
Timeout 600
MaxClients 100
LogLevel Critical
LogFile "$TMP/tinyproxy.log"
PidFile "$TMP/tinyproxy.pid"
Allow 127.0.0.1
ConnectPort $UP_PORT
DisableViaHeader Yes
EOF
tinyproxy -d -c "$TMP/tinyproxy.conf" 2>"$TMP/tinyproxy.err" &
PIDS+=($!)
wait_port "$TINY"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

throughput() { # [PROXY]
    local args=()
    [ -n "${1:-}" ] && args=(--proxy "$1")
    for _ in $(seq 1 $RUNS); do
        "$BENCH" throughput "${args[@]}" "$TARGET" "$BYTES" | json mib_per_s
    done | median
}

latency() { # [PROXY]
    local args=()
    [ -n "${1:-}" ] && args=(--proxy "$1")
    "$BENCH" latency "${args[@]}" "$TARGET" "$REQUESTS" | json median_us
}

declare -A TP LAT
for name in direct ours squid tinyproxy; do
    case $name in
        direct) proxy="" ;;
        ours) proxy="127.0.0.1:$OURS" ;;
        squid) proxy="127.0.0.1:$SQUID" ;;
        tinyproxy) proxy="127.0.0.1:$TINY" ;;
    esac
    echo "measuring $name..." >&2
    TP[$name]=$(throughput "$proxy")
    LAT[$name]=$(latency "$proxy")
done

python3 - "$BYTES" "$REQUESTS" "${TP[direct]}" "${TP[ours]}" "${TP[squid]}" "${TP[tinyproxy]}" \
    "${LAT[direct]}" "${LAT[ours]}" "${LAT[squid]}" "${LAT[tinyproxy]}" <<'EOF'
import sys
size, count = int(sys.argv[1]), int(sys.argv[2])
tp = dict(zip(["direct", "egress-sandbox", "squid", "tinyproxy"], map(float, sys.argv[3:7])))
lat = dict(zip(["direct", "egress-sandbox", "squid", "tinyproxy"], map(float, sys.argv[7:11])))
print(f"{size / 2**20:.0f} MiB CONNECT download (median of 3), {count} sequential small requests (median TTFB)")
print(f"{'':16}{'MiB/s':>10}{'x direct':>10}{'TTFB us':>10}{'added us':>10}")
for name in tp:
    added = lat[name] - lat["direct"]
    print(f"{name:16}{tp[name]:>10.0f}{tp[name] / tp['direct']:>10.2f}{lat[name]:>10.0f}{added:>10.0f}")
ours_added = lat["egress-sandbox"] - lat["direct"]
tiny_added = lat["tinyproxy"] - lat["direct"]
print()
print(f"throughput egress-sandbox / direct : {tp['egress-sandbox'] / tp['direct']:.2f}  (target >= 0.75)")
print(f"throughput egress-sandbox / squid  : {tp['egress-sandbox'] / tp['squid']:.2f}  (target >= 1.4)")
print(f"added latency egress-sandbox / tinyproxy : {ours_added / tiny_added:.2f}  (target <= 0.33)")
EOF
