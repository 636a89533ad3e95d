"""Live viewers: broadcasting committed events to the channel layer (notify), the
WebSocket consumer that relays them, the HTML fragments it sends, and the socket
routing. Reads runs through the runs layer; never writes them."""
