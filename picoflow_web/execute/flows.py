"""The flows the dashboard serves: the demos (``PICOFLOW_DEMOS``) and your own
(``PICOFLOW_FLOWS``).

``PICOFLOW_FLOWS`` is a comma-separated list of ``package.module:FlowClass`` or
``package.module:flows`` (an iterable of Flow classes). Loading is strict: a path that does
not import, an attribute that is not a Flow class, or a flow id that is already taken raises
:class:`FlowsConfigError` naming the entry and the reason. The engine is built from
:func:`configured_flows` by a system check (:mod:`picoflow_web.execute.checks`: ``manage.py
check``, ``runserver``, ``migrate``) and when Daphne imports :mod:`picoflow_web.asgi`, so
both refuse to start on a bad list.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping

from django.core.exceptions import ImproperlyConfigured

from picoflow_web.config.env import ConfigError, env_bool, env_list
from runtime import Flow, ScriptedModel


class FlowsConfigError(ImproperlyConfigured):
    """``PICOFLOW_FLOWS`` (or ``PICOFLOW_DEMOS``) names flows that cannot be served."""


def _where(flow: type[Flow]) -> str:
    return f"{flow.__module__}.{flow.__qualname__}"


def load_entry(entry: str) -> list[type[Flow]]:
    """The Flow classes one ``PICOFLOW_FLOWS`` entry names."""
    module_name, sep, attribute = entry.partition(":")
    if not sep or not module_name.strip() or not attribute.strip():
        raise FlowsConfigError(
            f"PICOFLOW_FLOWS entry {entry!r}: not of the form package.module:FlowClass "
            "(or package.module:flows).")
    module_name, attribute = module_name.strip(), attribute.strip()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise FlowsConfigError(
            f"PICOFLOW_FLOWS entry {entry!r}: module {module_name!r} cannot be imported "
            f"({type(exc).__name__}: {exc}).") from exc
    try:
        value = getattr(module, attribute)
    except AttributeError:
        raise FlowsConfigError(
            f"PICOFLOW_FLOWS entry {entry!r}: module {module_name!r} has no attribute "
            f"{attribute!r}.") from None
    if isinstance(value, type):
        candidates: list[object] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        candidates = list(value)
        if not candidates:
            raise FlowsConfigError(
                f"PICOFLOW_FLOWS entry {entry!r}: {attribute!r} holds no flows.")
    else:
        raise FlowsConfigError(
            f"PICOFLOW_FLOWS entry {entry!r}: {attribute!r} is not a Flow subclass (it is "
            f"{type(value).__name__} {value!r:.80}).")
    flows: list[type[Flow]] = []
    for candidate in candidates:
        if not (isinstance(candidate, type) and issubclass(candidate, Flow)
                and candidate is not Flow):
            what = (f"class {candidate.__module__}.{candidate.__qualname__}"
                    if isinstance(candidate, type) else f"{type(candidate).__name__} "
                    f"{candidate!r:.80}")
            raise FlowsConfigError(
                f"PICOFLOW_FLOWS entry {entry!r}: {what} is not a Flow subclass.")
        flows.append(candidate)
    return flows


def configured_flows(
    latency: float, environ: Mapping[str, str] | None = None,
) -> list[tuple[type[Flow], ScriptedModel | None]]:
    """The demos (unless ``PICOFLOW_DEMOS=0``) with their scripted models, then the
    ``PICOFLOW_FLOWS`` classes (no scripted model: they bring their own or use the
    configured providers). Raises :class:`FlowsConfigError` for a bad entry."""
    env = os.environ if environ is None else environ
    try:
        demos = env_bool("PICOFLOW_DEMOS", True, env)
    except ConfigError as exc:
        raise FlowsConfigError(str(exc)) from None
    served: list[tuple[type[Flow], ScriptedModel | None]] = []
    owners: dict[str, str] = {}
    if demos:
        from picoflow_web.demos.parallel import demo_flows

        for flow, model in demo_flows(latency):
            served.append((flow, model))
            owners[flow.id] = f"the demo flow {_where(flow)}"
    for entry in env_list("PICOFLOW_FLOWS", "", env):
        for flow in load_entry(entry):
            if flow.id in owners:
                raise FlowsConfigError(
                    f"PICOFLOW_FLOWS entry {entry!r}: flow id {flow.id!r} of {_where(flow)} "
                    f"is already taken by {owners[flow.id]}.")
            served.append((flow, None))
            owners[flow.id] = f"{_where(flow)} (entry {entry!r})"
    return served
