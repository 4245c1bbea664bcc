"""The HTTP edge: the ASGI app (Starlette) and its middleware (``server``), and the API faces — each decodes
its request into the shared pipeline and encodes the parser events into its own wire format."""
