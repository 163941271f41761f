"""MCP, the way in for agents that speak the Model Context Protocol: one tool per syscall of
API.md, served over streamable HTTP at ``/mcp`` (api/mcp/http.py) and over stdio
(``memwarden mcp``, api/mcp/stdio.py). A tool call is the syscall's HTTP request, sent
through the same app (in process, or to ``MEMWARDEN_URL``): the same authentication,
gate, rate limit and audit record, and no identity in any tool's schema."""
