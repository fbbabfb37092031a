"""HTTPS serving: TLS contexts, the uvicorn protocol, the ASGI app and the server."""
