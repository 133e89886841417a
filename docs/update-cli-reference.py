#!/usr/bin/env python3
"""Rewrites the `--help` blocks of docs/src/reference/cli.md from the built binary.

Each section headed "## `egress-sandbox SUBCOMMAND`" holds the first ```text block after
its heading; this replaces that block with what `egress-sandbox SUBCOMMAND --help` prints
now, leaving the prose around it alone. A command with no section yet gets one at the end.

    python3 docs/update-cli-reference.py target/$(rustc --print host-tuple)/debug/egress-sandbox
"""
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "src" / "reference" / "cli.md"

def help_text(binary: str, command: list[str]) -> str:
    out = subprocess.run([binary, *command, "--help"], check=True, capture_output=True, text=True)
    return "\n".join(line.rstrip() for line in out.stdout.rstrip("\n").splitlines())

def main() -> None:
    binary = sys.argv[1]
    page = PAGE.read_text()
    heading = re.compile(r"^## `egress-sandbox((?: [a-z-]+)*)`\n", re.M)
    documented = [m.group(1).split() for m in heading.finditer(page)]

    for command in documented:
        title = "## `egress-sandbox" + "".join(" " + c for c in command) + "`\n"
        start = page.index(title) + len(title)
        block = re.compile(r"```text\n.*?\n```", re.S).search(page, start)
        if block is None:
            sys.exit(f"no ```text block after {title.strip()}")
        fresh = "```text\n" + help_text(binary, command) + "\n```"
        page = page[: block.start()] + fresh + page[block.end():]

    top = help_text(binary, [])
    listed = re.findall(r"^  ([a-z-]+)\s", top.split("Commands:")[1], re.M)
    for name in listed:
        if name != "help" and [name] not in documented:
            page = page.rstrip("\n") + f"\n\n## `egress-sandbox {name}`\n\n```text\n"
            page += help_text(binary, [name]) + "\n```\n"
    PAGE.write_text(page)


if __name__ == "__main__":
    main()
