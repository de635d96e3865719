"""The runtime (private): one call's session, its dispatch, reviews, leases and
the messages the model sees. It performs what the pure core
(`langgraph_effects.core`) decides, against a ledger and LangGraph."""
