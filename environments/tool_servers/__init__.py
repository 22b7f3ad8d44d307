"""MCP tool servers that built-in environments compose (each runnable as `python -m environments.tool_servers.X`)."""
