"""The process-wide flow engine of the web app: the served flows, the Django store, models.

The flows are the demos (``PICOFLOW_DEMOS``, on by default; their scripted answers take
``PICOFLOW_DEMO_LATENCY`` seconds, written in ``PICOFLOW_DEMO_STREAM`` chunks) and your own
(``PICOFLOW_FLOWS``; see :mod:`picoflow_web.execute.flows`). ``PICOFLOW_MODEL`` picks the models:
``scripted`` (default) plays each demo flow's scripted conversation; ``openai`` sends every
call to the OpenAI-compatible endpoint at ``OPENAI_BASE_URL`` with ``OPENAI_API_KEY``. Your
own flows use the models they bring (``Flow.model_providers``) first, else that endpoint
as provider ``openai`` in either mode. No run forks more than ``PICOFLOW_MAX_BRANCHES``
branches in all, whatever its flow allows.
"""

from __future__ import annotations

from functools import cache

from picoflow_web.config import app_settings
from picoflow_web.config.env import ConfigError
from picoflow_web.data.documents import SessionDocumentStore
from picoflow_web.execute.flows import FlowsConfigError, configured_flows
from runtime import FlowEngine, Model, OpenAICompatibleModel


@cache
def get_engine() -> FlowEngine:
    """The engine (built once per process)."""
    latency = float(app_settings.get("DEMO_LATENCY"))
    flows = configured_flows(latency, _flow_settings())
    stream = int(app_settings.get("DEMO_STREAM"))
    for flow, scripted in flows:
        if scripted is not None:
            scripted.keep_requests = False  # a server must not keep every request
            # The demos write their answers as a streaming provider does (model.delta).
            scripted.stream = stream
            if scripted.name is None:  # events name the script, not the flow's selection
                scripted.name = f"{flow.id} script"
    endpoint = OpenAICompatibleModel.from_env()
    classes = [f for f, _ in flows]
    if app_settings.get("MODEL") == "openai":
        return _described(FlowEngine(flows=classes, store=SessionDocumentStore(),
                                     providers={"openai": endpoint, "scripted": endpoint},
                                     ship_to_dashboard=False,
                                     max_invocations=app_settings.get("MAX_BRANCHES")))
    models: dict[str, Model] = {flow.id: m for flow, m in flows if m is not None}
    # ship_to_dashboard=False: this engine's runs are recorded by the bridge already; with
    # the dashboard variables set in the web process they would come back through ingest.
    return _described(FlowEngine(flows=classes, store=SessionDocumentStore(),
                                 providers={"openai": endpoint},
                                 model_override=lambda name: models.get(name),
                                 ship_to_dashboard=False,
                                 max_invocations=app_settings.get("MAX_BRANCHES")))


def _flow_settings() -> dict[str, str]:
    """``PICOFLOW_DEMOS`` and ``PICOFLOW_FLOWS`` through the settings accessor, so a
    project's ``PICOFLOW`` dict can name them too; a bad value is a flows error (E001)."""
    try:
        return {"PICOFLOW_DEMOS": "1" if app_settings.get("DEMOS") else "0",
                "PICOFLOW_FLOWS": _comma_list(app_settings.get("FLOWS"))}
    except ConfigError as exc:
        raise FlowsConfigError(str(exc)) from None


def _comma_list(value: str | list[str] | tuple[str, ...]) -> str:
    """``PICOFLOW["FLOWS"]`` may be a list or, like the variable, a comma-separated string."""
    return value if isinstance(value, str) else ",".join(value)


def _described(engine: FlowEngine) -> FlowEngine:
    """``engine``, once every flow has said how to start it (its config schema, examples):
    a hook that fails does so at start-up, not in ``GET /api/flows``."""
    for name in engine.get_flow_names():
        try:
            engine.flow_info(name)
        except Exception as exc:
            raise FlowsConfigError(
                f"Flow {name!r} cannot say how to start it (config_schema, example_messages "
                f"or needs_message failed: {type(exc).__name__}: {exc}).") from exc
    return engine
