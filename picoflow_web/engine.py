"""The process-wide flow engine of the web app: demo flows, the Django store, models.

``PICOFLOW_MODEL`` picks the models: ``scripted`` (default) plays each demo flow's
scripted conversation; ``openai`` sends every call to the OpenAI-compatible endpoint at
``OPENAI_BASE_URL`` with ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import os
from functools import cache

from picoflow_web.demos.parallel import demo_flows
from picoflow_web.store import DjangoSessionStore
from runtime import FlowEngine, Model, OpenAICompatibleModel


@cache
def get_engine() -> FlowEngine:
    """The engine (built once per process)."""
    latency = float(os.environ.get("PICOFLOW_DEMO_LATENCY", "0.25"))
    flows = demo_flows(latency)
    for _, scripted in flows:
        if scripted is not None:
            scripted.keep_requests = False  # a server must not keep every request
    mode = os.environ.get("PICOFLOW_MODEL", "scripted")
    if mode == "openai":
        model = OpenAICompatibleModel.from_env()
        return FlowEngine(flows=[f for f, _ in flows], store=DjangoSessionStore(),
                          providers={"openai": model, "scripted": model})
    models: dict[str, Model] = {flow.id: m for flow, m in flows if m is not None}
    return FlowEngine(flows=[f for f, _ in flows], store=DjangoSessionStore(),
                      model_override=lambda name: models.get(name))
