"""The registry outside the admin: tools and MCP servers (`registry`), the model endpoints
page (`endpoints`) and the capability probe's report (`probes`)."""
