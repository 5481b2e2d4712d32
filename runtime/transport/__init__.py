"""The runtime's HTTP, on httpx2 (the ``http`` extra: ``pip install "picoflow-web[http]"``).

=================  ========================================================================
``clients``        what ``Flow.concurrent_steps()`` sends its children with
                   (:class:`~runtime.transport.clients.ChildPoster`, async) and what a
                   :class:`~runtime.events.DashboardSink` ships with
                   (:class:`~runtime.transport.clients.IngestTransport`, in its threads)
=================  ========================================================================

Nothing imports this package: ``runtime.concurrent`` and ``runtime.events.ingest_client``
load ``clients`` by name when they first send (``runtime/LAYERS.toml``,
``[runtime.plugins]``), so ``import runtime`` needs only pydantic and anyio.
"""
