"""The integrations (private): thin adapters from LangGraph's and LangChain's
extension points (``ToolNode``, agent middleware, the Functional API) to the
runtime's session. Their public names are exported from the package root."""
