#!/usr/bin/env bash
# The proxy measured the way sandboxed programs use it: a NEW client connection per request.
# Side by side, on loopback only, against nginx on 127.0.0.2:
#   ttfb:     REQUESTS curl processes per door (plain HTTP through the proxy, and a CONNECT
#             tunnel), time to first byte, median; "added" = minus the direct median.
#             The four setups take turns request by request, so load swings hit all alike.
#             For reference, what one hop costs at best on this machine: HAProxy (one
#             thread, event-driven C) as a reverse proxy with its upstream connections kept
#             alive (the plain door's work without the forward-proxy request form) and as a
#             bare TCP forwarder (a tunnel without the CONNECT exchange). Not a peer: it
#             judges nothing and logs nothing; it takes the same turns.
#   tunnel:   one MIB MiB download with curl through a CONNECT tunnel (median of 3 rounds,
#             the setups taking turns).
#   load:     ab (apache2-utils), no keep-alive, plain HTTP, AB_REQUESTS requests at 100 and at
#             1,000 concurrent clients, AB_ROUNDS rounds with the setups taking turns (each
#             round in another order): median req/s, p99, max, failures, and the kernel's
#             listen overflow counters (nstat, whole machine) around each run.
# Each proxy's CPU time (user + system, its own and its children's, from /proc) is read
# around every phase: CPU per request and per MiB hardly depend on what else the machine
# runs, unlike wall-clock figures on a shared machine.
# for: direct (no proxy), egress-sandbox proxy (release), tinyproxy, Squid (Debian packages,
# private configs in a temp dir, foreground, no system service or config touched).
# Each figure is printed with the 1-minute load average taken when it was measured.
# EGRESS_SANDBOX_BASE_BIN=path runs a second build of our proxy (say, the one before a
# change) as one more setup, "base", taking the same turns: before and after measured in
# the same minutes, under the same load.
#
# Usage: bench/proxy-fresh.sh [REQUESTS] [MIB] [AB_REQUESTS] [AB_ROUNDS]
#        (defaults: 300 256 10000 3)
# Needs: curl nginx ab tinyproxy squid haproxy nstat ss python3
#   (apt-get install nginx-light apache2-utils tinyproxy squid haproxy)
set -euo pipefail

REQUESTS=${1:-300}
MIB=${2:-256}
AB_REQUESTS=${3:-10000}
AB_ROUNDS=${4:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/egress-bench-fresh.XXXXXX)
chmod 777 "$TMP" # Squid and nginx workers drop privileges and must write their files here
RESULTS="$TMP/results.tsv"
PIDS=()
ulimit -n 20000 # ab at 1,000 clients, and the proxies relaying for them

cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { # ADDRESS
    python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "$1"
}

wait_port() { # ADDRESS PORT
    for _ in $(seq 1 200); do
        if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on $1:$2" >&2
    return 1
}

load() { cut -d' ' -f1 /proc/loadavg; }

# CPU time, in clock ticks, of PID and every process below it: utime + stime of the living,
# cutime + cstime of the children it reaped (tinyproxy forks workers). 0 for direct.
cpu_ticks() { # PID
    [ -n "${1:-}" ] || { echo 0; return; }
    local total=0 pid child fields
    for pid in "$1" $(pgrep -P "$1" 2>/dev/null); do
        if [ "$pid" != "$1" ]; then
            total=$((total + $(cpu_ticks "$pid")))
            continue
        fi
        fields=$(cut -d')' -f2- "/proc/$pid/stat" 2>/dev/null) || continue
        # after "pid (comm)": field 3 is the state, so utime..cstime are words 12..15
        total=$((total + $(echo "$fields" | awk '{print $12 + $13 + $14 + $15}')))
    done
    echo "$total"
}
record() { printf '%s\n' "$*" >>"$RESULTS"; } # KIND SETUP FIELD=VALUE...

# EGRESS_SANDBOX_BIN=path skips the build (e.g. to try the script with a debug binary).
OURS_BIN=${EGRESS_SANDBOX_BIN:-}
if [ -z "$OURS_BIN" ]; then
    echo "building the release binary..." >&2
    (cd "$ROOT" && cargo build --release -q --bin egress-sandbox)
    OURS_BIN="$ROOT/target/$(rustc --print host-tuple)/release/egress-sandbox"
fi

# --- upstream: nginx on 127.0.0.2, a small page and a MIB MiB file -------------------------
UP=127.0.0.2
UP_PORT=$(free_port $UP)
mkdir -p "$TMP/www"
printf 'hello from the bench upstream\n' >"$TMP/www/small"
truncate -s "${MIB}M" "$TMP/www/big"
chmod -R a+rX "$TMP/www"
cat >"$TMP/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx-body;
    proxy_temp_path $TMP/nginx-proxy;
    fastcgi_temp_path $TMP/nginx-fastcgi;
    uwsgi_temp_path $TMP/nginx-uwsgi;
    scgi_temp_path $TMP/nginx-scgi;
    sendfile on;
    server {
        listen $UP:$UP_PORT backlog=4096;
        root $TMP/www;
    }
}
EOF
nginx -c "$TMP/nginx.conf" -e "$TMP/nginx-error.log" &
PIDS+=($!)
wait_port $UP "$UP_PORT"
SMALL="http://$UP:$UP_PORT/small"
BIG="http://$UP:$UP_PORT/big"

# --- egress-sandbox proxy: a cidr rule makes the loopback upstream a legitimate destination --
OURS=$(free_port 127.0.0.1)
POLICY=$'version: 1\nname: bench\nallow:\n  - cidr: '"$UP"$'/32\n    ports: ['"$UP_PORT"$']\n'
"$OURS_BIN" proxy --listen "127.0.0.1:$OURS" --policy-yaml "bench.yaml=$POLICY" \
    --audit-log "$TMP/audit.log" --audit-limit 10000000 --run-id bench >"$TMP/ours.out" &
PIDS+=($!)
OURS_PID=$!
wait_port 127.0.0.1 "$OURS"
BASE_BIN=${EGRESS_SANDBOX_BASE_BIN:-}
if [ -n "$BASE_BIN" ]; then
    BASE=$(free_port 127.0.0.1)
    "$BASE_BIN" proxy --listen "127.0.0.1:$BASE" --policy-yaml "bench.yaml=$POLICY" \
        --audit-log "$TMP/audit-base.log" --audit-limit 10000000 --run-id bench >"$TMP/base.out" &
    PIDS+=($!)
    BASE_PID=$!
    wait_port 127.0.0.1 "$BASE"
fi

# --- tinyproxy: private config, foreground ------------------------------------------------
TINY=$(free_port 127.0.0.1)
cat >"$TMP/tinyproxy.conf" <<EOF
Port $TINY
Listen 127.0.0.1
Timeout 600
MaxClients 2000
LogLevel Critical
LogFile "$TMP/tinyproxy.log"
PidFile "$TMP/tinyproxy.pid"
Allow 127.0.0.1
ConnectPort $UP_PORT
DisableViaHeader Yes
EOF
tinyproxy -d -c "$TMP/tinyproxy.conf" 2>"$TMP/tinyproxy.err" &
PIDS+=($!)
TINY_PID=$!
wait_port 127.0.0.1 "$TINY"

# --- Squid: private config, foreground, no cache, no disk ----------------------------------
SQUID=$(free_port 127.0.0.1)
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
max_filedescriptors 16384
via off
acl bench_src src 127.0.0.1/32
http_access allow bench_src
http_access deny all
EOF
chmod 644 "$TMP/squid.conf"
squid -N -f "$TMP/squid.conf" 2>"$TMP/squid.err" &
PIDS+=($!)
SQUID_PID=$!
wait_port 127.0.0.1 "$SQUID"

# --- HAProxy, the reference hop: private config, foreground, one thread ---------------------
HAPROXY_HTTP=$(free_port 127.0.0.1)
HAPROXY_TCP=$(free_port 127.0.0.1)
cat >"$TMP/haproxy.cfg" <<EOF
global
    nbthread 1
defaults
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend reference_http
    mode http
    bind 127.0.0.1:$HAPROXY_HTTP
    default_backend upstream_http
backend upstream_http
    mode http
    http-reuse always
    server nginx $UP:$UP_PORT
frontend reference_tcp
    mode tcp
    bind 127.0.0.1:$HAPROXY_TCP
    default_backend upstream_tcp
backend upstream_tcp
    mode tcp
    server nginx $UP:$UP_PORT
EOF
haproxy -db -f "$TMP/haproxy.cfg" >"$TMP/haproxy.out" 2>&1 &
PIDS+=($!)
wait_port 127.0.0.1 "$HAPROXY_HTTP"
wait_port 127.0.0.1 "$HAPROXY_TCP"

declare -A PROXY=([direct]="" [ours]="127.0.0.1:$OURS" [tinyproxy]="127.0.0.1:$TINY" [squid]="127.0.0.1:$SQUID")
SETUPS=(direct ours tinyproxy squid)
# The process whose CPU time counts for a setup (direct: none).
declare -A PROXY_PID=([direct]="" [ours]="$OURS_PID" [tinyproxy]="$TINY_PID" [squid]="$SQUID_PID")
if [ -n "$BASE_BIN" ]; then
    PROXY[base]="127.0.0.1:$BASE"
    PROXY_PID[base]="$BASE_PID"
    SETUPS+=(base)
fi
record clock ticks "per_s=$(getconf CLK_TCK)"

echo "listen backlogs (ss Send-Q):" >&2
for name in "${SETUPS[@]}"; do
    [ "$name" = direct ] && continue
    backlog=$(ss -Hltn "sport = :${PROXY[$name]##*:}" | awk '{print $3}')
    echo "  $name $backlog" >&2
    record backlog "$name" "value=$backlog"
done

# One curl process per request: a fresh TCP connection (and for CONNECT, a fresh tunnel).
curl_ttfb() { # URL [PROXY] [-p]
    local args=(-s -o /dev/null --max-time 30 -w '%{time_starttransfer}\n')
    [ -n "${2:-}" ] && args+=(-x "http://$2")
    [ "${3:-}" = -p ] && args+=(-p)
    curl "${args[@]}" "$1"
}

echo "time to first byte: $REQUESTS fresh connections per setup and door..." >&2
LOAD_START=$(load)
declare -A CPU_BEFORE
for name in "${SETUPS[@]}"; do CPU_BEFORE[$name]=$(cpu_ticks "${PROXY_PID[$name]}"); done
for _ in $(seq 1 "$REQUESTS"); do
    # The reference hop: the same request as a reverse proxy's, and through a TCP forwarder.
    curl_ttfb "http://127.0.0.1:$HAPROXY_HTTP/small" >>"$TMP/ttfb-plain-haproxy"
    curl_ttfb "http://127.0.0.1:$HAPROXY_TCP/small" >>"$TMP/ttfb-connect-haproxy"
    for name in "${SETUPS[@]}"; do
        curl_ttfb "$SMALL" "${PROXY[$name]}" >>"$TMP/ttfb-plain-$name"
        [ "$name" = direct ] && continue # direct has no tunnel: its plain figure is the base
        curl_ttfb "$SMALL" "${PROXY[$name]}" -p >>"$TMP/ttfb-connect-$name"
    done
done
for name in "${SETUPS[@]}" haproxy; do
    for door in plain connect; do
        [ -f "$TMP/ttfb-$door-$name" ] || continue
        record ttfb "$name" "door=$door" "file=$TMP/ttfb-$door-$name" "load=$LOAD_START-$(load)"
    done
    [ "$name" = haproxy ] && continue # the reference: its CPU is not compared
    record ttfb_cpu "$name" "ticks=$(($(cpu_ticks "${PROXY_PID[$name]}") - CPU_BEFORE[$name]))" \
        "requests=$((2 * REQUESTS))"
done

# Each round starts at another setup, so no setup always runs right after the same one.
round_order() { # ROUND
    local i n=${#SETUPS[@]}
    for i in $(seq 0 $((n - 1))); do echo "${SETUPS[$(((i + $1) % n))]}"; done
}

echo "tunnel throughput: $MIB MiB, 3 rounds..." >&2
for round in 0 1 2; do
    for name in $(round_order "$round"); do
        [ "$name" = direct ] && tunnel=() || tunnel=(-p -x "http://${PROXY[$name]}")
        before=$(cpu_ticks "${PROXY_PID[$name]}")
        bps=$(curl -s -o /dev/null --max-time 300 "${tunnel[@]}" -w '%{speed_download}' "$BIG")
        record tunnel "$name" "bytes_per_s=$bps" "ticks=$(($(cpu_ticks "${PROXY_PID[$name]}") - before))" \
            "load=$(load)"
    done
done

listen_overflows() { nstat -saz TcpExtListenOverflows | awk '$1 == "TcpExtListenOverflows" {print $2}'; }

echo "load: ab, no keep-alive, $AB_REQUESTS requests at 100 and 1,000 clients, $AB_ROUNDS rounds..." >&2
for round in $(seq 1 "$AB_ROUNDS"); do
    for clients in 100 1000; do
        for name in $(round_order "$round"); do
            requests=$((AB_REQUESTS > clients ? AB_REQUESTS : clients))
            args=(-n "$requests" -c "$clients" -s 60 -r)
            [ -n "${PROXY[$name]}" ] && args+=(-X "${PROXY[$name]}")
            out="$TMP/ab-$name-$clients-$round"
            before=$(listen_overflows)
            cpu=$(cpu_ticks "${PROXY_PID[$name]}")
            la=$(load)
            ab "${args[@]}" "$SMALL" >"$out" 2>&1 || true
            after=$(listen_overflows)
            record ab "$name" "clients=$clients" "file=$out" "requests=$requests" \
                "ticks=$(($(cpu_ticks "${PROXY_PID[$name]}") - cpu))" \
                "overflows=$((after - before))" "load=$la-$(load)"
        done
    done
done

python3 - "$RESULTS" "$REQUESTS" "$MIB" "$AB_REQUESTS" "$AB_ROUNDS" <<'EOF'
import re, statistics, sys

results, requests, mib, ab_requests, ab_rounds = sys.argv[1], *sys.argv[2:]
rows = []
for line in open(results):
    kind, setup, *fields = line.split()
    rows.append((kind, setup, dict(f.split("=", 1) for f in fields)))

def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]

names = {"direct": "direct", "ours": "egress-sandbox", "tinyproxy": "tinyproxy", "squid": "Squid",
         "base": "ours, base build", "haproxy": "HAProxy (ref.)"}
tick_us = 1e6 / float(next(f["per_s"] for k, _, f in rows if k == "clock"))
backlog = {s: f["value"] for k, s, f in rows if k == "backlog"}
print("listen backlog:", ", ".join(f"{names[s]} {b}" for s, b in backlog.items()))

print(f"\nTime to first byte, a new connection per request ({requests} curl runs each), ms")
print(f"{'':16}{'door':>9}{'median':>9}{'p90':>9}{'added':>9}{'load':>14}")
ttfb = {}
for kind, setup, f in rows:
    if kind != "ttfb":
        continue
    secs = [float(x) for x in open(f["file"]) if x.strip()]
    ttfb[setup, f["door"]] = statistics.median(secs) * 1000
    ttfb[setup, f["door"], "p90"] = pct(secs, 90) * 1000
    ttfb[setup, f["door"], "load"] = f["load"]
base = ttfb["direct", "plain"]
for (setup, door) in [k for k in ttfb if len(k) == 2]:
    added = ttfb[setup, door] - base
    print(f"{names[setup]:16}{door:>9}{ttfb[setup, door]:>9.3f}{ttfb[setup, door, 'p90']:>9.3f}"
          f"{added:>9.3f}{ttfb[setup, door, 'load']:>14}")
cpu = {s: int(f["ticks"]) * tick_us / int(f["requests"]) for k, s, f in rows if k == "ttfb_cpu" and s != "direct"}
print("proxy CPU per fresh request (plain and CONNECT alike), us: "
      + ", ".join(f"{names[s]} {c:.0f}" for s, c in cpu.items()))

print(f"\nTunnel throughput, {mib} MiB through CONNECT (median of 3), MiB/s")
runs = {}
for kind, setup, f in rows:
    if kind == "tunnel":
        runs.setdefault(setup, []).append((float(f["bytes_per_s"]) / 2**20, int(f["ticks"]), f["load"]))
tunnel = {s: statistics.median(r for r, _, _ in v) for s, v in runs.items()}
for setup, v in runs.items():
    loads = ",".join(l for _, _, l in v)
    cpu = "" if setup == "direct" else \
        f"   proxy CPU {sum(t for _, t, _ in v) * tick_us / 1000 / (3 * int(mib)):.2f} ms/MiB"
    print(f"{names[setup]:16}{tunnel[setup]:>9.0f} MiB/s  x direct {tunnel[setup] / tunnel['direct']:.2f}"
          f"{cpu}   load {loads}")

print(f"\nUnder load: ab, no keep-alive, plain HTTP, {ab_requests} requests, median of {ab_rounds} rounds")
print(f"{'':16}{'clients':>8}{'req/s':>9}{'p99 ms':>8}{'max ms':>8}{'failed':>8}{'non-2xx':>8}"
      f"{'overflows':>10}{'cpu us/req':>11}  loads")
ab_runs = {}
for kind, setup, f in rows:
    if kind != "ab":
        continue
    text = open(f["file"]).read()
    def grab(pattern, default="nan"):
        m = re.search(pattern, text, re.M)
        return m.group(1) if m else default
    r = dict(rps=float(grab(r"^Requests per second:\s+([\d.]+)")),
             p99=float(grab(r"^\s+99%\s+(\d+)")),
             max=float(grab(r"^\s+100%\s+(\d+)")),
             failed=int(grab(r"^Failed requests:\s+(\d+)", "-1")),
             non2xx=int(grab(r"^Non-2xx responses:\s+(\d+)", "0")),
             overflows=int(f["overflows"]),
             cpu=int(f["ticks"]) * tick_us / int(f["requests"]),
             load=f["load"])
    if r["failed"] < 0:
        print(f"{names[setup]}: ab did not finish: {text.strip().splitlines()[-1:]}")
    ab_runs.setdefault((setup, int(f["clients"])), []).append(r)
ab = {}
for (setup, clients), v in sorted(ab_runs.items(), key=lambda kv: (kv[0][1], list(names).index(kv[0][0]))):
    med = lambda key: statistics.median(r[key] for r in v)
    ab[setup, clients] = r = dict(rps=med("rps"), p99=med("p99"), max=max(r["max"] for r in v),
                                  failed=sum(r["failed"] for r in v), non2xx=sum(r["non2xx"] for r in v),
                                  overflows=sum(r["overflows"] for r in v), cpu=med("cpu"))
    cpu = "-" if setup == "direct" else f"{r['cpu']:.0f}"
    print(f"{names[setup]:16}{clients:>8}{r['rps']:>9.0f}{r['p99']:>8.0f}{r['max']:>8.0f}"
          f"{r['failed']:>8}{r['non2xx']:>8}{r['overflows']:>10}{cpu:>11}  {' '.join(x['load'] for x in v)}")

def verdict(ok):
    return "met" if ok else "NOT met"
for who in (["base", "ours"] if ("base", "plain") in ttfb else ["ours"]):
  print(f"\nAgainst the targets ({names[who]}):")
  for door in ("plain", "connect"):
    ours, tiny = ttfb[who, door] - base, ttfb["tinyproxy", door] - base
    ratio = ours / tiny if tiny > 0 else float("inf")
    print(f"  added TTFB {door:7} ours/tinyproxy = {ours:.3f}/{tiny:.3f} ms = {ratio:.2f}  (<= 1: {verdict(ratio <= 1)})")
    ref = ttfb["haproxy", door] - base
    print(f"    (reference: one HAProxy hop adds {ref:.3f} ms = {ref / tiny:.2f} of tinyproxy's;"
          f" ours = {ours / ref:.2f} of it)")
  t = tunnel[who]
  print(f"  tunnel ours/direct = {t / tunnel['direct']:.2f}  (>= 0.8: {verdict(t / tunnel['direct'] >= 0.8)})")
  print(f"    (tunnel ours/Squid = {t / tunnel['squid']:.2f})")
  o, s = ab[who, 1000], ab["squid", 1000]
  print(f"  1,000 clients req/s ours/Squid = {o['rps']:.0f}/{s['rps']:.0f} = {o['rps'] / s['rps']:.2f}  (>= 1.5: {verdict(o['rps'] >= 1.5 * s['rps'])})")
  print(f"  1,000 clients p99 ours/Squid = {o['p99']:.0f}/{s['p99']:.0f} ms = {o['p99'] / s['p99']:.2f}  (<= 1: {verdict(o['p99'] <= s['p99'])})")
  print(f"  (1,000 clients, proxy CPU per request ours/Squid = {o['cpu']:.0f}/{s['cpu']:.0f} us = {o['cpu'] / s['cpu']:.2f})")
print("  (figures on a shared machine are noisy: read them with the load next to them)")
EOF
