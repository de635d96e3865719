"""A small local notification service with Stripe-like idempotency, for the examples.

Start it with :func:`provider.server.run_in_background` (a separate process that
answers over HTTP on 127.0.0.1 and keeps its own SQLite file), or from a shell::

    python -m provider --port 8765 --db provider.sqlite   # from examples/

See ``app.py`` for the HTTP API and its semantics.
"""

from .server import ProviderProcess, run_in_background

__all__ = ["ProviderProcess", "run_in_background"]
