"""The sandbox's tools in the OpenAI Agents SDK: one MCP session for the agent's life."""

import asyncio

from agents import Agent, RunContextWrapper
from agents.mcp import MCPServerStdio

# Add the operator's bounds: --policy, --secret, --allow … (see Configuration).
SANDBOX = {"command": "egress-sandbox", "args": ["mcp", "--timeout", "60s"]}


async def main():
    async with MCPServerStdio(
        name="sandbox",
        params=SANDBOX,
        # Above --timeout: a call lasts as long as its run.
        client_session_timeout_seconds=90,
        cache_tools_list=True,
    ) as sandbox:
        agent = Agent(
            name="coder",
            instructions="Run code with run_code.",
            mcp_servers=[sandbox],
            mcp_config={"convert_schemas_to_strict": True},
        )
        # The tools as the model gets them: both strict.
        for tool in await agent.get_mcp_tools(RunContextWrapper(context=None)):
            print(f"{tool.name}: strict={tool.strict_json_schema}")
        # With a model: `await Runner.run(agent, "…")`. Here the call a strict model makes:
        # every field, null for those it leaves out.
        result = await sandbox.call_tool(
            "run_code",
            {"language": "python", "code": "print(6 * 7)", "stdin": None, "files": None, "timeout": None},
        )
        print(result.structuredContent["stdout"], end="")


asyncio.run(main())
