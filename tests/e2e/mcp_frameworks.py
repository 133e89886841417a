"""Agent frameworks' own MCP clients driving `egress-sandbox mcp`: the OpenAI Agents SDK
(PyPI `openai-agents`: `MCPServerStdio`, its strict-schema conversion) and LangChain's
(PyPI `langchain-mcp-adapters` with `langchain-core`'s strict conversion). No model and no
network: each calls the tools through its framework's MCP client.

Run by tests/e2e/mcp.rs: argv is BINARY NETWORK POLICY VERBOSE_STDERR QUIET_STDERR: the
Agents SDK's server runs with -v, its stderr in VERBOSE_STDERR; LangChain's without, its
stderr in QUIET_STDERR (the test reads both). Prints one JSON object with what each step
saw; the Rust test judges it.
"""

import asyncio
import copy
import json
import sys
import time

from agents import Agent, RunContextWrapper
from agents.mcp import MCPServerStdio
from agents.strict_schema import ensure_strict_json_schema
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

binary, network, policy, verbose_stderr, quiet_stderr = sys.argv[1:6]

# Calls as a strict-mode model makes them: every field, null for those it leaves out.
LONG_OUTPUT = (
    "import sys\n"
    "print('the first line')\n"
    "for i in range(20000):\n"
    "    print('line', i)\n"
    "print('the last line')\n"
    "sys.stderr.write('an error at the end\\n')\n"
)


def server_command(stderr_path, *extra):
    """The server through sh, which appends its stderr to `stderr_path`."""
    args = ["mcp", "--policy", policy, "--egress-network", network, "--timeout", "60s", *extra]
    return "sh", ["-c", 'exec "$@" 2>>"$0"', stderr_path, binary, *args]


def seen(result):
    return {
        "is_error": result.isError,
        "structured": result.structuredContent,
        "text": "\n".join(block.text for block in result.content if block.type == "text"),
    }


def strict_or_error(schema):
    try:
        return ensure_strict_json_schema(copy.deepcopy(schema), _reject_open_objects=True)
    except Exception as error:  # noqa: BLE001 - the test reports what the framework said
        return {"error": str(error)}


def stderr_text():
    with open(verbose_stderr, encoding="utf-8", errors="replace") as file:
        return file.read()


def pool_lines():
    """The verbose server's reports of its pool, in order."""
    return [line for line in stderr_text().splitlines() if "pool: " in line]


async def wait_until_pool_warm(bound=60):
    """Until the server's last report of its pool is that every slot is ready."""
    began = time.monotonic()
    while not pool_lines() or "pool: 2 of 2 warm slots ready" not in pool_lines()[-1]:
        if time.monotonic() - began > bound:
            return False
        await asyncio.sleep(0.1)
    return True


async def openai_agents():
    command, args = server_command(verbose_stderr, "-v", "--pool", "2")
    out = {}
    async with MCPServerStdio(
        name="sandbox",
        params={"command": command, "args": args},
        client_session_timeout_seconds=120,
        cache_tools_list=True,
    ) as server:
        listed = await server.list_tools()
        out["schemas"] = {tool.name: tool.inputSchema for tool in listed}
        out["ensure_strict"] = {tool.name: strict_or_error(tool.inputSchema) for tool in listed}
        agent = Agent(name="coder", mcp_servers=[server], mcp_config={"convert_schemas_to_strict": True})
        function_tools = await agent.get_mcp_tools(RunContextWrapper(context=None))
        out["function_tools"] = {
            tool.name: {"strict": tool.strict_json_schema, "params": tool.params_json_schema}
            for tool in function_tools
        }
        # Calls 2 s apart, as a model's turns come: each takes a warm slot.
        out["calls"] = []
        for turn in range(3):
            if turn:
                await asyncio.sleep(2)
            out["calls"].append(seen(await server.call_tool("run_code", {
                "language": "python",
                "code": "import sys; print(open('data/in.txt').read(), sys.stdin.read())",
                "stdin": f"turn {turn}", "files": [{"path": "data/in.txt", "content": "from a file"}],
                "timeout": None})))
        out["nulls"] = seen(await server.call_tool("run_command", {
            "argv": ["echo", "no options"], "stdin": None, "files": None, "timeout": None}))
        out["bad_field"] = seen(await server.call_tool("run_command", {
            "argv": ["true"], "stdin": None, "files": [{"path": "a", "content": 7}], "timeout": None}))
        out["long"] = seen(await server.call_tool("run_code", {
            "language": "python", "code": LONG_OUTPUT, "stdin": None, "files": None, "timeout": None}))
        # The pool refills after the calls: the server says so with -v.
        out["refilled"] = await wait_until_pool_warm()
    return out


async def langchain():
    command, args = server_command(quiet_stderr, "--pool", "0")
    client = MultiServerMCPClient({"sandbox": {"transport": "stdio", "command": command, "args": args}})
    out = {}
    async with client.session("sandbox") as session:
        tools = await load_mcp_tools(session)
        out["strict"] = {
            tool.name: convert_to_openai_tool(tool, strict=True)["function"]["parameters"] for tool in tools
        }
        by_name = {tool.name: tool for tool in tools}
        out["call"] = str(await by_name["run_command"].ainvoke({
            "argv": ["cat", "note.txt"], "stdin": None,
            "files": [{"path": "note.txt", "content": "written by langchain"}], "timeout": None}))
    return out


async def scenario():
    out = {"agents": await openai_agents(), "langchain": await langchain()}
    print(json.dumps(out))


asyncio.run(scenario())
