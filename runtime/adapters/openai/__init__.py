"""The OpenAI-compatible adapter on the official ``openai`` SDK (the ``openai`` extra).

:class:`OpenAICompatibleModel` is also ``runtime.OpenAICompatibleModel``, loaded on first
use; import it from here for its full type.
"""

from .model import DEFAULT_BASE_URL, OpenAICompatibleModel
from .wire import CONTENT_PARTS

__all__ = ["CONTENT_PARTS", "DEFAULT_BASE_URL", "OpenAICompatibleModel"]
