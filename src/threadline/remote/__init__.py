"""Serving the protocol over WebSocket listeners (`--listen ws://IP:PORT`, `unix://PATH`):
addresses, authentication, the HTTP gate in front of the upgrade, and the listener itself."""
