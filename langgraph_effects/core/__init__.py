"""The pure core: the operation's state machine, the per-call protocol, the
reconciliation rules, identity, contracts, call order and exit codes, as plain
code with no I/O (see ``docs/core.md``).

Nothing here imports LangGraph, LangChain or a database driver, so it can be
imported, tested and reasoned about alone. The runtime
(``langgraph_effects._runtime``) performs what these functions decide.
"""
