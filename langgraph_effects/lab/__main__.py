"""``python -m langgraph_effects.lab``: run the crash lab."""

from .runner import main

# The guard matters: forkserver workers import the parent's __main__ module.
if __name__ == "__main__":
    raise SystemExit(main())
