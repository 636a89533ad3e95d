"""Live viewers: broadcasting committed events to the channel layer (notify), the
WebSocket consumer that relays them, what it reads (reads), the HTML fragments it
sends, and the socket routing. Also: `watching` (on Redis, batches are announced only for
watched runs), `run_waits` (the API's event stream and long poll wait on the same
groups), `lineage` (a run page's list of its child runs kept current) and `sessions`
(sockets closed or rechecked on logout, deactivation, a new password). Reads runs through
the runs layer; never writes them."""
