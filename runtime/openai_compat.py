"""Where :class:`OpenAICompatibleModel` comes from: :mod:`runtime.adapters.openai`, on the
official ``openai`` SDK (the ``openai`` extra: ``pip install "picoflow-web[openai]"``).

The core does not depend on the SDK: the adapter is loaded by name when first asked for
(``runtime.OpenAICompatibleModel``, ``runtime.openai_compat.OpenAICompatibleModel``, the
``python -m runtime`` command's ``openai`` provider), so ``import runtime`` works without
it, and asking for the adapter without it says which extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any

EXTRA_HINT = 'pip install "picoflow-web[openai]"'


class OpenAIExtraMissing(ImportError):
    """The ``openai`` package (the ``openai`` extra) is not installed."""


def load_openai_model() -> Any:
    """The :class:`~runtime.adapters.openai.OpenAICompatibleModel` class.

    Raises:
        OpenAIExtraMissing: the ``openai`` package is not installed.
    """
    try:
        module = importlib.import_module("runtime.adapters.openai")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".", 1)[0] not in ("openai", "httpx", "httpx2"):
            raise
        raise OpenAIExtraMissing(
            f"OpenAICompatibleModel needs the openai package (the openai extra): "
            f"{EXTRA_HINT}", name=exc.name) from None
    return module.OpenAICompatibleModel


def __getattr__(name: str) -> Any:
    if name == "OpenAICompatibleModel":
        return load_openai_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
