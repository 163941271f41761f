"""The HTTP way in: the Litestar app, its routes, the gate, wire schemas and errors."""
