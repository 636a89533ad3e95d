"""What a run freezes when it starts and the engine rebuilt from it: the snapshot itself
(`frozen`), how each kind of tool becomes an executor (`executors`), MCP servers in runs
(`mcp`), the error policy's limits (`policy`) and what a run may reach (`access`). A
worker uses nothing but the snapshot, so a run behaves the same on any worker and on a
rerun."""
