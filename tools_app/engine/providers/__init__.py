"""Model providers: the ChatModel protocol, wire adapters, and the offline models."""
