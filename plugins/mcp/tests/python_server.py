"""A server written with the official Python SDK (PyPI `mcp` 2.x, its
MCPServer, formerly FastMCP): one tool, one resource, one prompt. Run over
stdio by dsh-mcp's tests."""
from mcp.server import MCPServer

server = MCPServer("py-notes")


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return f"{a} + {b} = {a + b}"


@server.resource("notes://today")
def today() -> str:
    """Today's note."""
    return "buy milk"


@server.prompt()
def review(path: str) -> str:
    """Asks for a review of a file."""
    return f"Please review {path}."


if __name__ == "__main__":
    server.run()
