"""Tool executors for tools that are not Python functions of this process (MCP servers)."""
