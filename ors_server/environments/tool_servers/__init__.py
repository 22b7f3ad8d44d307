"""MCP tool servers that built-in environments compose (each runnable as
`python -m ors_server.environments.tool_servers.X`)."""
