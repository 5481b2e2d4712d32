"""Without httpx2 (the ``http`` extra) the runtime still imports and runs; what sends HTTP
says, in one line, what to install.

Each check runs in a fresh interpreter whose import system refuses ``httpx2``, as an
installation of the runtime alone would.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NO_HTTPX = """
import sys

class NoHttpx:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "httpx2":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoHttpx())
"""


def without_httpx(code: str) -> str:
    """What ``code`` prints, run where httpx2 cannot be imported."""
    result = subprocess.run(
        [sys.executable, "-c", NO_HTTPX + textwrap.dedent(code)], cwd=ROOT,
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_runtime_and_its_events_import_and_run_without_httpx() -> None:
    out = without_httpx("""
        import anyio, runtime, runtime.events, runtime.concurrent
        from runtime import Flow, FlowEngine, LogicStep, ModelSelection

        class Hello(LogicStep):
            async def run_logic(self):
                return "hello"

        class HelloFlow(Flow):
            def config_model(self):
                return ModelSelection(provider="none", name="none")

            def define_steps(self):
                return [Hello(self)]

        reply = anyio.run(FlowEngine(flows=[HelloFlow], ship_to_dashboard=False).run,
                          "HelloFlow", None)
        print(reply.message, "httpx2" in sys.modules)
    """)
    assert out.split() == ["hello", "False"]


def test_a_dashboard_sink_without_httpx_names_the_extra() -> None:
    out = without_httpx("""
        from runtime.events import DashboardSink
        try:
            DashboardSink("http://127.0.0.1:9", "pf_token")
        except ImportError as exc:
            print(exc.name, "|", exc)
    """)
    assert out.strip() == ("httpx2 | DashboardSink sends with httpx2, which is not installed: "
                           "pip install 'picoflow-web[http]'")


def test_a_dashboard_named_by_the_environment_is_warned_about_once_without_httpx() -> None:
    out = without_httpx("""
        import logging
        from runtime.engine import dashboard_from_env
        said = []
        logging.getLogger("picoflow").addHandler(logging.Handler())
        logging.getLogger("picoflow").handlers[-1].emit = lambda r: said.append(r)
        env = {"PICOFLOW_DASHBOARD_URL": "http://127.0.0.1:9",
               "PICOFLOW_DASHBOARD_TOKEN": "pf_token"}
        print(dashboard_from_env(env), dashboard_from_env(env))
        print(len(said), said[0].levelname, said[0].getMessage())
    """)
    first, second = out.strip().splitlines()
    assert first == "None None"
    assert second.startswith("1 WARNING PICOFLOW_DASHBOARD_URL is set (http://127.0.0.1:9) "
                             "but no events are shipped")
    assert "pip install 'picoflow-web[http]'" in second


def test_concurrent_steps_without_httpx_fails_the_turn_naming_the_extra() -> None:
    out = without_httpx("""
        import anyio
        from runtime import Flow, FlowEngine, LogicStep, ModelSelection

        class Idle(LogicStep):
            async def run_logic(self):
                return "idle"

        class Coordinator(Flow):
            def config_model(self):
                return ModelSelection(provider="none", name="none")

            def define_steps(self):
                return [Idle(self)]

            async def spawn_steps(self):
                await self.concurrent_steps([1], batch_size=1, on_config=lambda item: {})
                return "sent"

        engine = FlowEngine(flows=[Coordinator], self_url="http://127.0.0.1:9",
                            self_token="pf_token", ship_to_dashboard=False)
        reply = anyio.run(lambda: engine.run("Coordinator", None,
                                             config={"_concurrent": True}))
        print(reply.success, reply.error_code, "|", reply.message)
    """)
    assert out.startswith("False concurrent_config | ")
    assert "concurrent_steps() sends its requests with httpx2, which is not installed: " \
           "pip install 'picoflow-web[http]'" in out
