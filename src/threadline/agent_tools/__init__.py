"""Tools for agents: the MCP servers a thread gives its CLI (`servers`) and the client-defined
tools (`dynamicTools`) that threadline serves to the CLI over MCP and answers through the
client (`host`, `bridge`, `calls`)."""
