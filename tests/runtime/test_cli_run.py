"""``python -m runtime run``: one turn of a user's flow, in a subprocess, events to a
dashboard (the local ingest server) named by the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.ingest_server import IngestServer

ROOT = Path(__file__).resolve().parents[2]

FLOW = '''
from runtime import Flow, LogicStep, ModelSelection


class Count(LogicStep):
    async def run_logic(self):
        n = (self.get_state("n") or 0) + 1
        self.save_state({"n": n})
        if self.get_context("config.fail"):
            raise RuntimeError("asked to fail")
        return f"turn {n}"


class Counter(Flow):
    def config_model(self):
        return ModelSelection(provider="none", name="none")

    def define_steps(self):
        return [Count(self)]
'''


@pytest.fixture
def server() -> Iterator[IngestServer]:
    with IngestServer() as running:
        yield running


def run(*args: str, cwd: Path, server: IngestServer | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PICOFLOW_DASHBOARD_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if server is not None:
        env["PICOFLOW_DASHBOARD_URL"] = server.url
        env["PICOFLOW_DASHBOARD_TOKEN"] = server.token
    return subprocess.run([sys.executable, "-m", "runtime", "run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def session_of(stdout: str) -> str:
    (line,) = [x for x in stdout.splitlines() if x.startswith("session: ")]
    return line.removeprefix("session: ")


def test_run_prints_the_reply_and_ships_the_events(tmp_path: Path,
                                                   server: IngestServer) -> None:
    (tmp_path / "counter.py").write_text(FLOW, encoding="utf-8")
    result = run("counter.py:Counter", "hello", cwd=tmp_path, server=server)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "turn 1"
    session = session_of(result.stdout)
    (run_id,) = server.stored
    events = server.stored[run_id]
    assert events[0].type == "turn.started"
    assert events[-1].type == "turn.finished"
    assert [e.seq for e in events] == list(range(len(events)))
    assert {e.session_id for e in events} == {session}
    assert server.status[run_id] == "finished"


def test_session_continues_across_invocations_with_a_sqlite_store(
        tmp_path: Path, server: IngestServer) -> None:
    (tmp_path / "counter.py").write_text(FLOW, encoding="utf-8")
    store = str(tmp_path / "sessions.sqlite3")
    first = run("counter:Counter", "one", "--store", store, cwd=tmp_path, server=server)
    assert first.returncode == 0, first.stderr
    session = session_of(first.stdout)
    second = run("counter:Counter", "two", "--store", store, "--session", session,
                 cwd=tmp_path, server=server)
    assert second.returncode == 0, second.stderr
    assert (second.stdout.splitlines()[0], session_of(second.stdout)) == ("turn 2", session)
    assert len(server.stored) == 2
    without_store = run("counter:Counter", "two", "--session", session, cwd=tmp_path,
                        server=None)
    assert without_store.stdout.splitlines()[0] == "turn 1"  # memory store: a new session


def test_a_failed_turn_exits_non_zero_and_its_failure_arrives(
        tmp_path: Path, server: IngestServer) -> None:
    (tmp_path / "counter.py").write_text(FLOW, encoding="utf-8")
    result = run(str(tmp_path / "counter.py") + ":Counter", "x", "--config", '{"fail": true}',
                 cwd=ROOT, server=server)
    assert result.returncode == 1
    assert "asked to fail" in result.stderr
    (run_id,) = server.stored
    assert server.stored[run_id][-1].type == "turn.failed"
    assert server.status[run_id] == "failed"


def test_bad_command_lines_exit_2(tmp_path: Path) -> None:
    (tmp_path / "counter.py").write_text(FLOW, encoding="utf-8")
    assert run("counter.py", "x", cwd=tmp_path, server=None).returncode == 2
    assert run("counter.py:Nope", "x", cwd=tmp_path, server=None).returncode == 2
    bad_config = run("counter.py:Counter", "x", "--config", "[1]", cwd=tmp_path, server=None)
    assert (bad_config.returncode, "JSON object" in bad_config.stderr) == (2, True)


def test_a_script_that_never_closes_its_engine_loses_nothing(
        tmp_path: Path, server: IngestServer) -> None:
    (tmp_path / "counter.py").write_text(FLOW, encoding="utf-8")
    script = ("import anyio\nfrom runtime import FlowEngine\nfrom counter import Counter\n"
              "engine = FlowEngine(flows=[Counter])\n"
              "for _ in range(3):\n"
              "    print(anyio.run(engine.run, 'Counter', 'hi').message)\n")
    env = {**os.environ, "PICOFLOW_DASHBOARD_URL": server.url,
           "PICOFLOW_DASHBOARD_TOKEN": server.token,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(server.stored) == 3  # the last turn is still buffered at exit: flushed then
    assert all(events[-1].type == "turn.finished" for events in server.stored.values())


@pytest.mark.parametrize(("spec", "source", "said"), [
    ("nosuchmodule_x:Counter", None, "cannot import nosuchmodule_x: ModuleNotFoundError"),
    ("broken:Counter", "import nosuchdependency_x\n", "No module named 'nosuchdependency_x'"),
    ("broken.py:Counter", "x = 1 +\n", "cannot import broken.py: SyntaxError"),
    ("broken.py:Counter", "raise RuntimeError('bad\\nsetup')\n", "RuntimeError: bad setup"),
    ("counter:Nope", FLOW, "counter has no 'Nope'"),
    ("counter.py:Count", FLOW, "'Count' in counter.py is not a Flow subclass"),
    ("counter:ModelSelection", FLOW, "is not a Flow subclass"),
])
def test_a_bad_flow_is_one_line_on_stderr_and_exit_2(
        tmp_path: Path, spec: str, source: str | None, said: str) -> None:
    (tmp_path / "counter.py").write_text(FLOW, encoding="utf-8")
    if source is not None:
        (tmp_path / f"{spec.split('.')[0].split(':')[0]}.py").write_text(source,
                                                                        encoding="utf-8")
    result = run(spec, "x", cwd=tmp_path, server=None)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and said in line, line
