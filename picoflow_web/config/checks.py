"""System checks of the app: the served flows can be built (``PICOFLOW_FLOWS``).

``manage.py check``, ``runserver`` and ``migrate`` run the checks, so a bad entry stops them
with its message; Daphne builds the engine when it imports :mod:`picoflow_web.asgi` and
stops there. The runtime is imported only when the check runs, not when Django sets up.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register


@register()
def served_flows(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An error naming the ``PICOFLOW_FLOWS`` entry (and why) when the engine cannot be built."""
    from picoflow_web.engine import get_engine
    from picoflow_web.flows import FlowsConfigError
    from runtime import PicoFlowError

    try:
        get_engine()
    except FlowsConfigError as exc:
        return [Error(str(exc), hint="Fix or remove the entry in PICOFLOW_FLOWS.",
                      id="picoflow_web.E001")]
    except PicoFlowError as exc:  # a flow's model_providers(), OPENAI_BASE_URL, a limit
        return [Error(f"The flow engine cannot be built: {exc}", id="picoflow_web.E002")]
    return []


@register()
def picoflow_dict(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An error for a ``PICOFLOW`` dict that is not one, or names a setting the app does
    not have (a typo would otherwise fall back to the default without a word)."""
    from django.conf import settings

    from picoflow_web.app_settings import DEFAULTS

    table = getattr(settings, "PICOFLOW", None)
    if table is None:
        return []
    if not isinstance(table, dict):
        return [Error(f"PICOFLOW must be a dict, not {type(table).__name__}.",
                      id="picoflow_web.E003")]
    return [Error(f"PICOFLOW has no setting {name!r}.",
                  hint=f"Known names: {', '.join(sorted(DEFAULTS))}.", id="picoflow_web.E003")
            for name in sorted(set(table) - set(DEFAULTS))]
