#!/usr/bin/env bash
# What credential injection costs a request: an INSPECTED HTTPS request through the proxy
# (CONNECT, TLS from the client to the proxy with a leaf of the run CA, TLS from the proxy to
# the upstream, the credential header set by the proxy) against a DIRECT HTTPS request to the
# same upstream, and a plain (not inspected) CONNECT tunnel to it for comparison.
#
# Everything on loopback: nginx with TLS on UPSTREAM:443 (default 127.0.0.2; a test CA and a
# server certificate made here with openssl, private config in a temp dir), our proxy on
# 127.0.0.1 with `--resolve` pins and a `cidr` rule for the loopback upstream (the
# private-address floor refuses it otherwise). Two names lead to the same nginx:
#   api.bench.test    has a credential: inspected (the proxy terminates TLS and adds the key)
#   plain.bench.test  has none: a CONNECT tunnel, the client sees nginx's own certificate
# nginx answers 200 only when `Authorization: Bearer <secret>` arrives, so every counted
# inspected request proves the proxy swapped the placeholder for the secret.
#
# One curl process per request (a new connection, a full TLS handshake: as sandboxed
# programs connect), HTTP/1.1, time to first byte (`%{time_starttransfer}`, which includes
# the TCP connect, CONNECT and every TLS handshake). The three doors take turns request by
# request, so load swings hit all alike; WARMUP requests per door are not counted.
# "added" = the door's median minus the direct median. Target (issue 7): inspected < 2 ms.
#
# Usage: bench/inspect.sh [REQUESTS]           (default 300 per door; at most 100000)
# Env:   EGRESS_SANDBOX_BIN=path  skip the release build (e.g. to try a debug binary)
#        UPSTREAM=127.0.0.x       nginx's address (port 443 there must be free)
#        WARMUP=N                 uncounted requests per door first (default 10)
# Needs: curl nginx openssl python3   (apt-get install nginx-light)
set -euo pipefail

REQUESTS=${1:-300}
WARMUP=${WARMUP:-10}
UP=${UPSTREAM:-127.0.0.2}
case "$REQUESTS$WARMUP" in *[!0-9]*) echo "REQUESTS and WARMUP must be whole numbers" >&2; exit 2 ;; esac
if [ "$REQUESTS" -lt 1 ] || [ "$REQUESTS" -gt 100000 ]; then
    echo "REQUESTS must be 1..100000 (got $REQUESTS)" >&2
    exit 2
fi
case "$UP" in 127.*) ;; *) echo "UPSTREAM must be a loopback address (got $UP)" >&2; exit 2 ;; esac
for tool in curl nginx openssl python3; do
    command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install nginx-light curl openssl python3)" >&2; exit 2; }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/egress-bench-inspect.XXXXXX)
chmod 755 "$TMP" # nginx workers drop privileges and read the page config from here
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

# EGRESS_SANDBOX_BIN=path skips the build.
OURS_BIN=${EGRESS_SANDBOX_BIN:-}
if [ -z "$OURS_BIN" ]; then
    echo "building the release binary..." >&2
    (cd "$ROOT" && cargo build --release -q --bin egress-sandbox)
    OURS_BIN="$ROOT/target/$(rustc --print host-tuple)/release/egress-sandbox"
fi
[ -x "$OURS_BIN" ] || die "no egress-sandbox binary at $OURS_BIN"

# --- certificates: a test CA and one ECDSA P-256 server certificate for both names ----------
# (P-256 like the run CA's leaves, so both handshakes do the same kind of signature)
API=api.bench.test
PLAIN=plain.bench.test
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 2 \
    -subj "/CN=egress-sandbox bench CA" -keyout "$TMP/ca.key" -out "$TMP/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>"$TMP/openssl.err" || die "openssl: $(cat "$TMP/openssl.err")"
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=$API" \
    -keyout "$TMP/server.key" -out "$TMP/server.csr" 2>"$TMP/openssl.err" \
    || die "openssl: $(cat "$TMP/openssl.err")"
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s,DNS:%s\n' \
    "$API" "$PLAIN" >"$TMP/server.ext"
openssl x509 -req -in "$TMP/server.csr" -CA "$TMP/ca.pem" -CAkey "$TMP/ca.key" -CAcreateserial \
    -days 2 -extfile "$TMP/server.ext" -out "$TMP/server.pem" 2>"$TMP/openssl.err" \
    || die "openssl: $(cat "$TMP/openssl.err")"
chmod 644 "$TMP/server.key" # read by nginx's master (root) only, in a private temp dir

# --- upstream: nginx with TLS on $UP:443 ---------------------------------------------------
SECRET="bench-secret-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
if ss -Hltn "src $UP:443" | grep -q .; then
    die "something already listens on $UP:443; pick another address with UPSTREAM=127.0.0.x"
fi
cat >"$TMP/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx-body;
    proxy_temp_path $TMP/nginx-proxy;
    fastcgi_temp_path $TMP/nginx-fastcgi;
    uwsgi_temp_path $TMP/nginx-uwsgi;
    scgi_temp_path $TMP/nginx-scgi;
    server {
        listen $UP:443 ssl backlog=4096;
        server_name $API $PLAIN;
        ssl_certificate $TMP/server.pem;
        ssl_certificate_key $TMP/server.key;
        default_type text/plain;
        # Only the real key is answered: a request the proxy did not rewrite would be 401.
        if (\$http_authorization != "Bearer $SECRET") { return 401 "no key\n"; }
        location / { return 200 "hello from the bench upstream\n"; }
    }
}
EOF
nginx -c "$TMP/nginx.conf" -e "$TMP/nginx-error.log" &
PIDS+=($!)
wait_port "$UP" 443 "${PIDS[-1]}"

# --- our proxy: a credential for $API (inspected), nothing for $PLAIN (tunnelled) -----------
OURS=$(free_port 127.0.0.1)
cat >"$TMP/policy.yaml" <<EOF
version: 1
name: bench-inspect
allow:
  - host: $API
    ports: [443]
  - host: $PLAIN
    ports: [443]
  - cidr: $UP/32
    ports: [443]
credentials:
  - host: $API
    secret: BENCH_KEY
    header: Authorization
    value: "Bearer {secret}"
EOF
BENCH_SECRET_VALUE="$SECRET" "$OURS_BIN" proxy --listen "127.0.0.1:$OURS" -p "$TMP/policy.yaml" \
    --resolve "$API=$UP" --resolve "$PLAIN=$UP" \
    --secret BENCH_KEY=env:BENCH_SECRET_VALUE --upstream-ca "$TMP/ca.pem" \
    --ca-cert-out "$TMP/run-ca.pem" --audit-log "$TMP/audit.log" --audit-limit 10000000 \
    --run-id bench-inspect >"$TMP/ours.out" 2>"$TMP/ours.err" &
PIDS+=($!)
for _ in $(seq 1 200); do
    [ -s "$TMP/ours.out" ] && break
    kill -0 "${PIDS[-1]}" 2>/dev/null || die "the proxy exited: $(cat "$TMP/ours.err")"
    sleep 0.05
done
PLACEHOLDER=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["placeholders"]["BENCH_KEY"])' "$TMP/ours.out") \
    || die "no placeholder in the proxy's ready line: $(head -c 500 "$TMP/ours.out")"
[ -s "$TMP/run-ca.pem" ] || die "the proxy wrote no run CA to --ca-cert-out"

# --- the three doors ------------------------------------------------------------------------
# Each prints "ttfb appconnect" in seconds; anything but a 200 stops the bench.
curl_ttfb() { # NAME CA HEADER [PROXY]
    local args=(-s -o /dev/null --http1.1 --max-time 30 --resolve "$1:443:$UP" --cacert "$2"
        -H "Authorization: Bearer $3" -w '%{http_code} %{time_starttransfer} %{time_appconnect}\n')
    [ -n "${4:-}" ] && args+=(-p -x "http://$4")
    local out
    out=$(curl "${args[@]}" "https://$1/v1/models") || die "curl to $1 (proxy ${4:-none}) failed: $out"
    [ "${out%% *}" = 200 ] || die "curl to $1 (proxy ${4:-none}): HTTP ${out%% *}, wanted 200"
    printf '%s\n' "${out#* }"
}
door() { # direct | inspected | tunnel
    case "$1" in
        direct) curl_ttfb "$API" "$TMP/ca.pem" "$SECRET" ;;
        inspected) curl_ttfb "$API" "$TMP/run-ca.pem" "$PLACEHOLDER" "127.0.0.1:$OURS" ;;
        tunnel) curl_ttfb "$PLAIN" "$TMP/ca.pem" "$SECRET" "127.0.0.1:$OURS" ;;
    esac
}
DOORS=(direct inspected tunnel)

echo "warm-up: $WARMUP requests per door..." >&2
for _ in $(seq 1 "$WARMUP"); do
    for d in "${DOORS[@]}"; do door "$d" >/dev/null; done
done
echo "time to first byte: $REQUESTS fresh connections per door, taking turns..." >&2
LOAD_START=$(load)
for _ in $(seq 1 "$REQUESTS"); do
    for d in "${DOORS[@]}"; do door "$d" >>"$TMP/ttfb-$d"; done
done
LOAD_END=$(load)

# The proxy's own account: every inspected request is an audited `http` record with the
# credential applied; no record may hold the secret.
grep -qF "$SECRET" "$TMP/audit.log" && die "the secret appears in the audit log"

python3 - "$TMP" "$REQUESTS" "$LOAD_START" "$LOAD_END" "$TMP/audit.log" "$WARMUP" <<'EOF'
import json, statistics, sys

tmp, requests, load_start, load_end, audit = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]

def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]

doors = {}
for door in ("direct", "inspected", "tunnel"):
    rows = [line.split() for line in open(f"{tmp}/ttfb-{door}") if line.strip()]
    doors[door] = ([float(r[0]) * 1000 for r in rows], [float(r[1]) * 1000 for r in rows])
    assert len(rows) == requests, (door, len(rows))

records = [json.loads(line) for line in open(audit) if line.strip()]
kinds = {}
for r in records:
    kinds[r.get("kind", "?")] = kinds.get(r.get("kind", "?"), 0) + 1
keyed = sum(1 for r in records if r.get("kind") == "http" and r.get("credential") == "BENCH_KEY"
            and r.get("status") == 200)

warmup = int(sys.argv[6])
assert keyed == requests + warmup, f"{keyed} keyed http records, wanted {requests + warmup}"

label = {"direct": "direct HTTPS", "inspected": "inspected (CONNECT+2xTLS)", "tunnel": "CONNECT tunnel"}
print(f"HTTPS time to first byte, a new connection per request ({requests} curl runs per door),"
      f" ms; 1-minute load {load_start} at start, {load_end} at end")
print(f"{'':28}{'median':>9}{'p90':>9}{'added':>9}{'TLS done':>10}")
base = statistics.median(doors["direct"][0])
for door, (ttfb, appconnect) in doors.items():
    med = statistics.median(ttfb)
    print(f"{label[door]:28}{med:>9.3f}{pct(ttfb, 90):>9.3f}{med - base:>9.3f}"
          f"{statistics.median(appconnect):>10.3f}")
print("  (added = median minus the direct median; TLS done = median time_appconnect, the")
print("   client's handshake finished: to nginx for direct and tunnel, to the proxy when inspected)")
paired = [i - d for i, d in zip(doors["inspected"][0], doors["direct"][0])]
print(f"inspected minus direct, request by request: median {statistics.median(paired):.3f} ms,"
      f" p90 {pct(paired, 90):.3f} ms")
print(f"audit records: {', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))};"
      f" http with the credential and status 200: {keyed} (warm-up included)")
added = statistics.median(doors["inspected"][0]) - base
verdict = "met" if added < 2 else "NOT met"
print(f"\nAgainst the target (issue 7): inspected adds {added:.3f} ms (< 2 ms: {verdict})")
print("  (figures on a shared machine are noisy: read them with the load next to them)")
EOF
