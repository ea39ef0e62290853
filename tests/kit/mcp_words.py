"""A real MCP server for `pi-course run --mcp` (tests/kit/test_run.py), built on the official MCP SDK.

Run as `python mcp_words.py` it speaks MCP over stdio. It is the SDK's server on purpose: the learner's
hand-written client (checkpoint 17) must work with the servers people actually run, not only with the
focused tests' in-memory one.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("words")


@server.tool()
def word_count(text: str) -> int:
    """Count the words of a text (split on white space)."""
    return len(text.split())


@server.tool()
def has_variable(name: str) -> bool:
    """Whether this server's environment has a variable of that name."""
    return name in os.environ


if __name__ == "__main__":
    server.run()
