#!/usr/bin/env bash
# `print(1)` in python through `egress-sandbox mcp` (its own warm pool, driven by the
# official MCP Python SDK as a host drives it), through the `serve` API (warm pool, the
# Python client), and as a bare `docker run --rm --network none IMAGE python3 -c 'print(1)'`
# on the same image: interleaved triples, medians, p99 and ratios.
#
#   bench/mcp.sh                      TRIPLES=20 POOL=2 by default
#   BIN=path/to/egress-sandbox MCP_PYTHON=/path/to/venv/bin/python TRIPLES=10 bench/mcp.sh
#
# Needs a python with the `mcp` package (MCP_PYTHON, default python3). Builds the release
# binary unless BIN is given. Each MCP call is a new request on the one session a host
# keeps; each API call a new connection, as the client makes one per run. Before each timed
# call the engine is let settle (the daemon's pool full, no run being removed, then PAUSE
# seconds for the MCP server's own pool to refill: it prepares a slot's replacement at
# most 2 s after a claim), so no side pays for another's background work. The load average
# is printed with the figures: the machine may be shared.
set -euo pipefail

cd "$(dirname "$0")/.."
TRIPLES=${TRIPLES:-20}
POOL=${POOL:-2}
PAUSE=${PAUSE:-3}
MCP_PYTHON=${MCP_PYTHON:-python3}
if [[ -z "${BIN:-}" ]]; then
    cargo build --release --quiet
    BIN=target/$(rustc --print host-tuple)/release/egress-sandbox
fi
BIN=$(realpath "$BIN")

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
echo "image $IMAGE, pool $POOL each; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$MCP_PYTHON" - "$BIN" "$socket" "$IMAGE" "$TRIPLES" "$POOL" "$PAUSE" <<'PY'
import asyncio, statistics, subprocess, sys, time
sys.path.insert(0, "clients/python")
from egress_sandbox import AsyncClient
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

binary, socket, image, triples, pool, pause = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
api = AsyncClient(socket)

def load():
    return float(open("/proc/loadavg").read().split()[0])

async def settle():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (await api.health())["pool"]["ready"] >= pool:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(pause)

def p99(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]

async def main():
    params = StdioServerParameters(command=binary, args=["mcp", "--pool", str(pool)])
    with open("/dev/null", "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def mcp_print():
                    result = await session.call_tool("run_code", {"language": "python", "code": "print(1)"})
                    assert not result.is_error and result.structured_content["stdout"] == "1\n", result

                async def api_print():
                    result = await api.run(["python3", "-c", "print(1)"])
                    assert result.exit_code == 0 and result.stdout == b"1\n", result

                async def docker_print():
                    process = await asyncio.create_subprocess_exec(
                        "docker", "run", "--rm", "--network", "none", image, "python3", "-c", "print(1)",
                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
                    out, _ = await process.communicate()
                    assert process.returncode == 0 and out == b"1\n"

                async def timed(call):
                    await settle()
                    start = time.monotonic()
                    await call()
                    return time.monotonic() - start

                for call in (mcp_print, api_print, docker_print):
                    await settle()
                    await call()
                times = {"mcp": [], "api": [], "docker": []}
                loads = []
                for _ in range(triples):
                    times["mcp"].append(await timed(mcp_print))
                    times["api"].append(await timed(api_print))
                    times["docker"].append(await timed(docker_print))
                    loads.append(load())
    p50 = {name: statistics.median(values) for name, values in times.items()}
    print(f"{triples} interleaved triples (load average {min(loads):.1f}..{max(loads):.1f}):")
    print(f"  MCP run_code print(1), own warm pool      p50 {p50['mcp']:.3f}s  p99 {p99(times['mcp']):.3f}s")
    print(f"  serve API python3 -c print(1), warm pool  p50 {p50['api']:.3f}s  p99 {p99(times['api']):.3f}s")
    print(f"  docker run --rm --network none            p50 {p50['docker']:.3f}s  p99 {p99(times['docker']):.3f}s")
    print(f"  MCP / API p50 {p50['mcp'] / p50['api']:.2f}x (target <= 1.2x)")
    print(f"  MCP / docker run p50 {p50['mcp'] / p50['docker']:.2f}x (target <= 0.5x)")

asyncio.run(main())
PY
