"""The HTML pages: playground, timeline, runs and calls lists, tool pages, fork editor,
re-execution, try-it; htmx partials rendered by the same views."""
