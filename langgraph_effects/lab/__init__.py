"""The crash lab: the seed experiment rerun with real LangGraph graphs and real SIGKILLs.

Each cell runs N operations (one graph thread each) through one strategy against
one simulated provider, kills the worker at a crash point on every K-th
operation, resumes the thread in a fresh worker, and counts intended effects,
duplicates and missing work from the provider's own SQLite records.

Entry points: ``python -m langgraph_effects.lab`` or `runner.main`.
Strategies plug in through `strategies.register`.
"""

from .providers import (
    IdempotencyMismatch,
    KeyInFlight,
    Provider,
    ProviderError,
    ProviderRejected,
    Unsupported,
    Withdrawn,
)
from .strategies import BuildContext, Strategy, register, registered

__all__ = [
    "BuildContext",
    "IdempotencyMismatch",
    "KeyInFlight",
    "Provider",
    "ProviderError",
    "ProviderRejected",
    "Strategy",
    "Unsupported",
    "Withdrawn",
    "register",
    "registered",
]
