"""The system check of the served flows: they can be built (``PICOFLOW_FLOWS``).

``manage.py check``, ``runserver`` and ``migrate`` run the checks, so a bad entry stops them
with its message; Daphne builds the engine when it imports :mod:`picoflow_web.asgi` and
stops there. The engine is built only when the check runs, not when Django sets up.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register


@register()
def served_flows(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An error naming the ``PICOFLOW_FLOWS`` entry (and why) when the engine cannot be built."""
    from picoflow_web.execute.engine import get_engine
    from picoflow_web.execute.flows import FlowsConfigError
    from runtime import PicoFlowError

    try:
        get_engine()
    except FlowsConfigError as exc:
        return [Error(str(exc), hint="Fix or remove the entry in PICOFLOW_FLOWS.",
                      id="picoflow_web.E001")]
    except PicoFlowError as exc:  # a flow's model_providers(), OPENAI_BASE_URL, a limit
        return [Error(f"The flow engine cannot be built: {exc}", id="picoflow_web.E002")]
    return []


__all__ = ["served_flows"]
