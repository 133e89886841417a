"""An agent host driving `egress-sandbox mcp` with the official MCP Python SDK (PyPI `mcp`).

Run by tests/e2e/mcp.rs: argv is BINARY NETWORK GATEWAY UPSTREAM_PORT BARRIER_PORT POLICY PIDFILE.
The upstreams listen on GATEWAY; the server is told api.test is there.
Prints one JSON object with what each step saw; the Rust test judges it.
"""

import asyncio
import json
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

binary, network, gateway, upstream_port, barrier_port, policy, pidfile = sys.argv[1:8]
upstream_url = f"http://api.test:{upstream_port}/"
barrier_url = f"http://api.test:{barrier_port}/"


def objects_of(run):
    """The run's containers and networks, as the docker CLI lists them."""
    label = f"label=egress-sandbox.run={run}"
    found = []
    for kind in (["ps", "-aq"], ["network", "ls", "-q"]):
        listed = subprocess.run(["docker", *kind, "--filter", label], capture_output=True, text=True, check=True)
        found += listed.stdout.split()
    return found


def seen(result):
    return {
        "is_error": result.is_error,
        "structured": result.structured_content,
        "text": "\n".join(block.text for block in result.content if block.type == "text"),
    }


async def scenario():
    server_args = [
        "mcp", "--policy", policy,
        "--allow", f"api.test:{upstream_port}", "--allow", f"api.test:{barrier_port}",
        "--resolve", f"api.test={gateway}",
        "--egress-network", network, "--timeout", "60s", "--output-limit", "4KiB",
        "--max-runs", "4", "--pool", "2",
    ]
    # Through sh, which writes its pid (the server's, after exec) for the test's last check.
    params = StdioServerParameters(command="sh", args=["-c", 'echo $$ > "$0"; exec "$@"', pidfile, binary, *server_args])
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            listed = await session.list_tools()
            out["tools"] = {t.name: {"input": t.input_schema, "output": t.output_schema} for t in listed.tools}

            async def call(tool, arguments, **options):
                return seen(await session.call_tool(tool, arguments, **options))

            out["python"] = await call("run_code", {
                "language": "python",
                "code": "import sys; print(open('data/in.txt').read().strip(), sys.stdin.read())",
                "stdin": "piped", "files": [{"path": "data/in.txt", "content": "from a file"}]})
            out["node"] = await call("run_code", {"language": "node", "code": "console.log(6 * 7)"})
            out["blocked"] = await call("run_code", {
                "language": "python",
                "code": "import urllib.request\ntry:\n    urllib.request.urlopen('https://blocked.example.org', timeout=30)\nexcept Exception:\n    print('refused')"})
            out["allowed"] = await call("run_command", {"argv": ["curl", "-sS", upstream_url]})
            out["time_limit"] = await call("run_command", {"argv": ["sleep", "60"], "timeout": 1})
            out["ceiling"] = await call("run_command", {"argv": ["true"], "timeout": 61})
            out["unknown"] = await call("run_command", {"argv": ["true"], "allow": ["evil.example"]})
            # Each waits at the test's barrier, which answers only once all four are there.
            out["concurrent"] = await asyncio.gather(*[
                call("run_command", {"argv": ["curl", "-sS", "--max-time", "100", f"{barrier_url}{i}"]})
                for i in range(4)])
            out["truncated"] = await call("run_code", {"language": "python", "code": "print('x' * 100000)"})

            live = asyncio.get_running_loop().create_future()

            async def progress(value, total, message):
                if message and message.startswith("run ") and not live.done():
                    live.set_result(message.split()[1].rstrip(":"))

            cancelled = asyncio.create_task(
                session.call_tool("run_command", {"argv": ["sleep", "300"]}, progress_callback=progress))
            run = await asyncio.wait_for(live, 120)
            assert objects_of(run), f"run {run} has no objects while live"
            cancelled.cancel()
            try:
                await cancelled
            except asyncio.CancelledError:
                pass
            began = time.monotonic()
            while objects_of(run) and time.monotonic() - began < 60:
                await asyncio.sleep(0.2)
            out["cancelled"] = {"run": run, "left": objects_of(run), "seconds": time.monotonic() - began}
            out["after_cancel"] = await call("run_code", {"language": "sh", "code": "echo still serving"})
    print(json.dumps(out))


asyncio.run(scenario())
