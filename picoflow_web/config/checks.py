"""The system check of the app's settings: the ``PICOFLOW`` dict names only settings the
app has (the served flows are checked by :mod:`picoflow_web.execute.checks`).

``manage.py check``, ``runserver`` and ``migrate`` run the checks, so a bad setting stops
them with its message.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register


@register()
def picoflow_dict(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An error for a ``PICOFLOW`` dict that is not one, or names a setting the app does
    not have (a typo would otherwise fall back to the default without a word)."""
    from django.conf import settings

    from picoflow_web.config.app_settings import DEFAULTS

    table = getattr(settings, "PICOFLOW", None)
    if table is None:
        return []
    if not isinstance(table, dict):
        return [Error(f"PICOFLOW must be a dict, not {type(table).__name__}.",
                      id="picoflow_web.E003")]
    return [Error(f"PICOFLOW has no setting {name!r}.",
                  hint=f"Known names: {', '.join(sorted(DEFAULTS))}.", id="picoflow_web.E003")
            for name in sorted(set(table) - set(DEFAULTS))]
