"""The sandbox's tools in LangChain, through one kept MCP session (one server, one warm pool)."""

import asyncio

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

# Add the operator's bounds: --policy, --secret, --allow … (see Configuration).
SANDBOX = {"transport": "stdio", "command": "egress-sandbox", "args": ["mcp", "--timeout", "60s"]}


async def main():
    client = MultiServerMCPClient({"sandbox": SANDBOX})
    # `await client.get_tools()` would start a server (and its pool) for every call; a
    # session kept open serves every call from one.
    async with client.session("sandbox") as session:
        tools = {tool.name: tool for tool in await load_mcp_tools(session)}
        # With a model: `create_agent(model, list(tools.values()))`. Here two calls as a
        # strict model makes them: every field, null for those it leaves out.
        code = await tools["run_code"].ainvoke(
            {"language": "python", "code": "print(6 * 7)", "stdin": None, "files": None, "timeout": None}
        )
        print(code[0]["text"])
        command = await tools["run_command"].ainvoke(
            {
                "argv": ["python3", "main.py"],
                "stdin": None,
                "files": [{"path": "main.py", "content": "print('from a file')"}],
                "timeout": None,
            }
        )
        print(command[0]["text"])

asyncio.run(main())
