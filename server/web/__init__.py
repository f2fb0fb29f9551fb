"""The transports and what only they need: WebSocket and HTTP faces, access and origin checks,
problems, pages, OpenAPI, rate limits, the offload pool.
"""
