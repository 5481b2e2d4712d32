"""Other frameworks' runs, recorded as PicoFlow events for the same debugger.

=================  ========================================================================
``langgraph``      :class:`~runtime.integrations.langgraph.LangGraphTracer`: a LangChain
                   callback handler turning a compiled LangGraph graph's supersteps into
                   barriers (the ``langgraph`` extra: ``pip install "picoflow-web[langgraph]"``)
=================  ========================================================================

Nothing in the runtime core imports this package (``runtime/LAYERS.toml``), so the core
never needs the frameworks installed; import the module you use by its full name.
"""
