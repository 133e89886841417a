#!/usr/bin/env bash
# What keeping the key out of answers costs: a 100 MiB download from an INSPECTED host
# through the proxy, with a credential for that host (the run has a secret: the answer is
# scrubbed of it) against the same download from a host inspected WITHOUT a credential (a
# `paths` rule; no secret, nothing to scrub). Both take the same road otherwise: CONNECT, TLS
# from curl to the proxy with a leaf of the run CA, TLS from the proxy to the upstream.
#
# Everything on loopback: nginx with TLS on UPSTREAM:443 (default 127.0.0.3) serving a
# 100 MiB text file (base64 of random bytes: text like an API's, which holds no secret);
# two proxies on 127.0.0.1, one per policy, both pinned to nginx. One curl per download (a
# new connection each), the two proxies taking turns download by download so load swings
# hit both alike; WARMUP downloads each first, not counted. Throughput = size / total time.
# Ratio = median throughput with scrubbing / median without. Target (issue 21): >= 0.9.
#
# Usage: bench/scrub.sh [DOWNLOADS]            (default 7 per proxy; at most 1000)
# Env:   EGRESS_SANDBOX_BIN=path  skip the release build
#        UPSTREAM=127.0.0.x       nginx's address (port 443 there must be free)
#        WARMUP=N                 uncounted downloads per proxy first (default 1)
#        SIZE_MIB=N               the file's size (default 100)
# Needs: curl nginx openssl python3   (apt-get install nginx-light)
set -euo pipefail

DOWNLOADS=${1:-7}
WARMUP=${WARMUP:-1}
SIZE_MIB=${SIZE_MIB:-100}
UP=${UPSTREAM:-127.0.0.3}
case "$DOWNLOADS$WARMUP$SIZE_MIB" in *[!0-9]*) echo "DOWNLOADS, WARMUP and SIZE_MIB must be whole numbers" >&2; exit 2 ;; esac
if [ "$DOWNLOADS" -lt 1 ] || [ "$DOWNLOADS" -gt 1000 ]; then
    echo "DOWNLOADS must be 1..1000 (got $DOWNLOADS)" >&2
    exit 2
fi
case "$UP" in 127.*) ;; *) echo "UPSTREAM must be a loopback address (got $UP)" >&2; exit 2 ;; esac
for tool in curl nginx openssl python3; do
    command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install nginx-light curl openssl python3)" >&2; exit 2; }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/egress-bench-scrub.XXXXXX)
chmod 755 "$TMP" # nginx workers drop privileges and read the file from here
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "$*" >&2; exit 1; }
load() { cut -d' ' -f1 /proc/loadavg; }

free_port() { # ADDRESS
    python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "$1"
}

wait_port() { # ADDRESS PORT PID
    for _ in $(seq 1 200); do
        kill -0 "$3" 2>/dev/null || die "the process meant to listen on $1:$2 exited"
        if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    die "nothing listens on $1:$2"
}

OURS_BIN=${EGRESS_SANDBOX_BIN:-}
if [ -z "$OURS_BIN" ]; then
    echo "building the release binary..." >&2
    (cd "$ROOT" && cargo build --release -q --bin egress-sandbox)
    OURS_BIN="$ROOT/target/$(rustc --print host-tuple)/release/egress-sandbox"
fi
[ -x "$OURS_BIN" ] || die "no egress-sandbox binary at $OURS_BIN"

# --- certificates: a test CA and one server certificate for both names ----------------------
KEYED=keyed.bench.test
BARE=bare.bench.test
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 2 \
    -subj "/CN=egress-sandbox bench CA" -keyout "$TMP/ca.key" -out "$TMP/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>"$TMP/openssl.err" || die "openssl: $(cat "$TMP/openssl.err")"
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=$KEYED" \
    -keyout "$TMP/server.key" -out "$TMP/server.csr" 2>"$TMP/openssl.err" \
    || die "openssl: $(cat "$TMP/openssl.err")"
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s,DNS:%s\n' \
    "$KEYED" "$BARE" >"$TMP/server.ext"
openssl x509 -req -in "$TMP/server.csr" -CA "$TMP/ca.pem" -CAkey "$TMP/ca.key" -CAcreateserial \
    -days 2 -extfile "$TMP/server.ext" -out "$TMP/server.pem" 2>"$TMP/openssl.err" \
    || die "openssl: $(cat "$TMP/openssl.err")"
chmod 644 "$TMP/server.key"

# --- upstream: nginx with TLS on $UP:443, one text file -------------------------------------
mkdir -p "$TMP/www"
head -c $((SIZE_MIB * 3 / 4 * 1024 * 1024 + 4096)) /dev/urandom | base64 -w 76 >"$TMP/www/big.txt"
truncate -s $((SIZE_MIB * 1024 * 1024)) "$TMP/www/big.txt"
chmod -R a+rX "$TMP/www"
SIZE=$(stat -c %s "$TMP/www/big.txt")
if ss -Hltn "src $UP:443" | grep -q .; then
    die "something already listens on $UP:443; pick another address with UPSTREAM=127.0.0.x"
fi
cat >"$TMP/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx-body;
    proxy_temp_path $TMP/nginx-proxy;
    fastcgi_temp_path $TMP/nginx-fastcgi;
    uwsgi_temp_path $TMP/nginx-uwsgi;
    scgi_temp_path $TMP/nginx-scgi;
    server {
        listen $UP:443 ssl;
        server_name $KEYED $BARE;
        ssl_certificate $TMP/server.pem;
        ssl_certificate_key $TMP/server.key;
        default_type text/plain;
        root $TMP/www;
    }
}
EOF
nginx -c "$TMP/nginx.conf" -e "$TMP/nginx-error.log" &
PIDS+=($!)
wait_port "$UP" 443 "${PIDS[-1]}"

# --- two proxies: one whose run has a secret (a credential for $KEYED), one without ---------
start_proxy() { # NAME POLICY [SECRET FLAGS...]
    local name=$1 policy=$2
    shift 2
    local port
    port=$(free_port 127.0.0.1)
    "$OURS_BIN" proxy --listen "127.0.0.1:$port" -p "$policy" \
        --resolve "$KEYED=$UP" --resolve "$BARE=$UP" --upstream-ca "$TMP/ca.pem" \
        --ca-cert-out "$TMP/run-ca-$name.pem" --audit-log "$TMP/audit-$name.log" \
        --run-id "bench-scrub-$name" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        [ -s "$TMP/$name.out" ] && break
        kill -0 "${PIDS[-1]}" 2>/dev/null || die "the proxy exited: $(cat "$TMP/$name.err")"
        sleep 0.05
    done
    [ -s "$TMP/run-ca-$name.pem" ] || die "the $name proxy wrote no run CA"
    echo "$port"
}
cat >"$TMP/keyed.yaml" <<EOF
version: 1
name: bench-scrub-keyed
allow:
  - host: $KEYED
    ports: [443]
  - cidr: $UP/32
    ports: [443]
credentials:
  - host: $KEYED
    secret: BENCH_KEY
EOF
cat >"$TMP/bare.yaml" <<EOF
version: 1
name: bench-scrub-bare
allow:
  - host: $BARE
    ports: [443]
    paths: ["/**"]
  - cidr: $UP/32
    ports: [443]
EOF
SECRET="bench-secret-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
KEYED_PORT=$(BENCH_SECRET_VALUE="$SECRET" start_proxy keyed "$TMP/keyed.yaml" --secret BENCH_KEY=env:BENCH_SECRET_VALUE)
BARE_PORT=$(start_proxy bare "$TMP/bare.yaml")

# --- downloads ------------------------------------------------------------------------------
download() { # keyed | bare  -> prints "seconds bytes"
    local host port
    case "$1" in
        keyed) host=$KEYED port=$KEYED_PORT ;;
        bare) host=$BARE port=$BARE_PORT ;;
    esac
    local out
    out=$(curl -s -o /dev/null --http1.1 --max-time 300 -p -x "http://127.0.0.1:$port" \
        --cacert "$TMP/run-ca-$1.pem" -w '%{http_code} %{time_total} %{size_download}\n' \
        "https://$host/big.txt") || die "curl through the $1 proxy failed: $out"
    [ "${out%% *}" = 200 ] || die "through the $1 proxy: HTTP ${out%% *}, wanted 200"
    printf '%s\n' "${out#* }"
}

echo "warm-up: $WARMUP download(s) per proxy..." >&2
for _ in $(seq 1 "$WARMUP"); do download keyed >/dev/null; download bare >/dev/null; done
echo "$DOWNLOADS downloads of $SIZE bytes per proxy, taking turns..." >&2
LOAD_START=$(load)
for _ in $(seq 1 "$DOWNLOADS"); do
    download keyed >>"$TMP/keyed.times"
    download bare >>"$TMP/bare.times"
done
LOAD_END=$(load)
grep -qF "$SECRET" "$TMP/audit-keyed.log" && die "the secret appears in the audit log"

python3 - "$TMP" "$SIZE" "$LOAD_START" "$LOAD_END" "$(nproc)" <<'EOF'
import statistics, sys

tmp, size, load_start, load_end, cores = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
mib = size / 2**20
rates = {}
for name in ("keyed", "bare"):
    rows = [line.split() for line in open(f"{tmp}/{name}.times") if line.strip()]
    for seconds, got in rows:
        assert int(got) == size, (name, got, size)
    rates[name] = [mib / float(seconds) for seconds, _ in rows]
print(f"{mib:.0f} MiB inspected download, a new connection each ({len(rates['keyed'])} per proxy),"
      f" MiB/s; 1-minute load {load_start} at start, {load_end} at end, {cores} cores")
print(f"{'':34}{'median':>9}{'min':>9}{'max':>9}")
label = {"keyed": "with a credential (scrubbed)", "bare": "without (nothing to scrub)"}
for name, values in rates.items():
    print(f"{label[name]:34}{statistics.median(values):>9.1f}{min(values):>9.1f}{max(values):>9.1f}")
ratio = statistics.median(rates["keyed"]) / statistics.median(rates["bare"])
paired = [k / b for k, b in zip(rates["keyed"], rates["bare"])]
print(f"ratio scrubbed / not scrubbed: {ratio:.3f} (pair by pair: median {statistics.median(paired):.3f},"
      f" min {min(paired):.3f})")
print(f"against the target (issue 21, >= 0.9): {'met' if ratio >= 0.9 else 'NOT met'}")
print("  (figures on a shared machine are noisy: read them with the load next to them)")
EOF
