"""Live viewers: broadcasting committed events to the channel layer (notify), the
WebSocket consumer that relays them, what it reads (reads), the HTML fragments it
sends, and the socket routing. Reads runs through the runs layer; never writes them."""
