#!/usr/bin/env bash
# Registers gVisor (runsc) with the local Docker engine under the runtime name `runsc`, so
# `egress-sandbox run --runtime runsc` puts a second wall (gVisor's own kernel) around the
# sandbox.
#
# - Installs runsc from the distribution (apt-get) when it is not on PATH.
# - Registers it in /etc/docker/daemon.json (or $DOCKER_DAEMON_JSON) under `runtimes`,
#   keeping every other setting, and makes dockerd reload its configuration with SIGHUP:
#   the daemon is never restarted, running containers are untouched.
# - Probes gVisor's network modes in order — its own stack (the default), the host's stack
#   in the container's namespace (--network=host), loopback only (--network=none) — and
#   keeps the first under which a container starts. egress-sandbox gives a gVisor sandbox a
#   network of its own for its proxy, so --network=none, though it starts, is reported as
#   unusable for runs.
# - Idempotent: a second run finds the same registration and changes nothing.
#
# Exit 0 when `runsc` is registered and a container starts under it; 1 otherwise.
set -euo pipefail

RUNTIME_NAME=runsc
DAEMON_JSON=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
PROBE_IMAGE=egress-sandbox-runtime-probe:latest
RELOAD_TIMEOUT_SECONDS=20

say() { printf 'gvisor-setup: %s\n' "$*"; }
fail() { printf 'gvisor-setup: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || fail "docker is not installed"
docker version >/dev/null 2>&1 || fail "the Docker engine does not answer (DOCKER_HOST=${DOCKER_HOST:-unset})"

if ! command -v runsc >/dev/null 2>&1; then
  say "installing runsc (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q runsc
fi
RUNSC=$(command -v runsc)
say "runsc: $RUNSC ($("$RUNSC" --version 2>/dev/null | head -1))"

# The registration the engine reports for $RUNTIME_NAME, as compact JSON ("" if none).
registered() {
  docker info --format '{{json .Runtimes}}' |
    python3 -c 'import json,sys; r=json.load(sys.stdin).get(sys.argv[1]); print(json.dumps(r, sort_keys=True) if r else "")' "$RUNTIME_NAME"
}

# What the engine should report once `$1` (a JSON array of runtime arguments) is loaded.
expected() {
  python3 -c 'import json,sys; a=json.loads(sys.argv[2]); r={"path": sys.argv[1]}; a and r.update(runtimeArgs=a); print(json.dumps(r, sort_keys=True))' "$RUNSC" "$1"
}

# Writes the registration with arguments `$1` into daemon.json, every other key kept, and
# makes dockerd reload it; waits until `docker info` reports it.
register() {
  local args_json=$1
  python3 - "$DAEMON_JSON" "$RUNTIME_NAME" "$RUNSC" "$args_json" <<'PY'
import json, os, sys
path, name, runsc, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
try:
    with open(path) as f:
        config = json.load(f)
except FileNotFoundError:
    config = {}
entry = {"path": runsc}
if args:
    entry["runtimeArgs"] = args
config.setdefault("runtimes", {})[name] = entry
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
tmp = path + ".gvisor-setup.tmp"
with open(tmp, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
PY
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -o -x dockerd || true)
  [ -n "$pid" ] || fail "cannot find dockerd's pid to send it SIGHUP (is the engine local?)"
  kill -HUP "$pid"
  # `docker events` does not report a configuration reload; the engine's own answer does.
  local want deadline=$((SECONDS + RELOAD_TIMEOUT_SECONDS))
  want=$(expected "$args_json")
  until [ "$(registered)" = "$want" ]; do
    [ $SECONDS -lt $deadline ] || fail "dockerd did not load the new runtime within ${RELOAD_TIMEOUT_SECONDS}s (see its log)"
    sleep 0.1
  done
}

# A tiny image (this host's /bin/true and the libraries it needs), made locally: no pull.
make_probe_image() {
  docker image inspect "$PROBE_IMAGE" >/dev/null 2>&1 && return
  local root
  root=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" RETURN
  for file in /bin/true $(ldd /bin/true | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$file")"
    cp -L "$file" "$root$file"
  done
  tar -C "$root" -c . | docker import -c 'LABEL egress-sandbox.image=runtime-probe' - "$PROBE_IMAGE" >/dev/null
}

probe() {
  docker run --rm --runtime "$RUNTIME_NAME" --network none "$PROBE_IMAGE" /bin/true 2>&1
}

make_probe_image

current=$(registered)
if [ -n "$current" ] && probe >/dev/null; then
  say "already registered and working: $RUNTIME_NAME = $current"
  chosen=$current
else
  chosen=""
  for args in '[]' '["--network=host"]' '["--network=none"]'; do
    want=$(expected "$args")
    if [ "$(registered)" != "$want" ]; then
      register "$args"
    fi
    if output=$(probe); then
      chosen=$want
      break
    fi
    say "runtimeArgs $args: a container does not start: $(printf '%s' "$output" | head -1)"
  done
  [ -n "$chosen" ] || fail "no network mode of gVisor starts a container here; $RUNTIME_NAME is left registered with the last one tried"
  say "registered: $RUNTIME_NAME = $chosen"
fi

case $chosen in
  *'--network=none'*)
    say "only loopback works under gVisor here: egress-sandbox runs under $RUNTIME_NAME cannot reach their proxy"
    exit 1 ;;
  *'--network=host'*)
    say "gVisor's own network stack does not start here; it uses the host's (hostinet) in each container's namespace" ;;
  *)
    say "gVisor uses its own network stack" ;;
esac
say "try: egress-sandbox doctor; egress-sandbox run --runtime $RUNTIME_NAME -- uname -r"
