"""Model adapters on the libraries made for their providers (each an optional extra).

=================  ========================================================================
``openai``         :class:`~runtime.adapters.openai.OpenAICompatibleModel`: any
                   OpenAI-compatible Chat Completions endpoint (OpenAI, Azure OpenAI, vLLM,
                   Ollama, llama.cpp, LiteLLM...) through the official ``openai`` SDK, streamed
                   (the ``openai`` extra: ``pip install "picoflow-web[openai]"``)
=================  ========================================================================

Nothing in the runtime core imports this package (``runtime/LAYERS.toml``): ``from runtime
import OpenAICompatibleModel`` loads it by name on first use, so ``import runtime`` needs
only pydantic and anyio.
"""
