"""One accessor for the app's settings (``picoflow_web.config.app_settings``) and where the app's
files are (``picoflow_web.config.locations``): the ``PICOFLOW`` dict first, then a flat
``PICOFLOW_*`` setting, then the environment with its default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picoflow_web.config import app_settings, locations
from picoflow_web.config.env import ConfigError
from picoflow_web.execute.engine import get_engine
from picoflow_web.execute.flows import FlowsConfigError
from runtime import events as ev
from runtime.events import MemorySink

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_picoflow_dict_wins_over_a_flat_setting_and_the_environment(
    settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PICOFLOW_WORKER_LEASE", "4.5")
    settings.PICOFLOW_WORKER_LEASE = 7.0
    settings.PICOFLOW = {"WORKER_LEASE": 3.0}
    assert app_settings.get("WORKER_LEASE") == 3.0
    settings.PICOFLOW = {"WORKERS": 2}  # another name: this one falls back
    assert app_settings.get("WORKER_LEASE") == 7.0


def test_without_either_setting_the_environment_and_then_the_default_decide(
    settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    del settings.PICOFLOW_WORKER_LEASE
    del settings.PICOFLOW_RELAY_URL
    monkeypatch.setenv("PICOFLOW_WORKER_LEASE", "4.5")
    monkeypatch.setenv("PICOFLOW_RELAY_URL", " http://web:8000/ ")
    assert app_settings.get("WORKER_LEASE") == 4.5
    assert app_settings.get("RELAY_URL") == "http://web:8000"
    monkeypatch.delenv("PICOFLOW_WORKER_LEASE")
    assert app_settings.get("WORKER_LEASE") == 10.0
    monkeypatch.setenv("PICOFLOW_WORKER_LEASE", "soon")
    with pytest.raises(ConfigError, match="PICOFLOW_WORKER_LEASE='soon'"):
        app_settings.get("WORKER_LEASE")


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(app_settings.UnknownSetting):
        app_settings.get("WORKER_LEAS")


def test_the_data_folder_comes_from_the_dict_and_is_made(settings: Any, tmp_path: Path) -> None:
    settings.PICOFLOW = {"DATA_DIR": tmp_path / "pf"}
    assert app_settings.data_dir() == tmp_path / "pf"
    assert (tmp_path / "pf").is_dir()


@pytest.fixture
def fresh_engine() -> Iterator[None]:
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


def test_the_served_flows_come_from_the_dict_too(settings: Any, fresh_engine: None) -> None:
    settings.PICOFLOW = {"DEMOS": False, "FLOWS": ["tests.flows_pkg.greeter:flows"]}
    assert sorted(get_engine().get_flow_names()) == ["EchoFlow", "GreeterFlow"]


def test_a_bad_demos_value_in_the_dict_is_a_flows_error(
    settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_engine: None,
) -> None:
    settings.PICOFLOW = {"DEMOS": True}
    monkeypatch.setenv("PICOFLOW_DEMOS", "maybe")  # the dict wins: no error
    assert "HotelFlow" in get_engine().get_flow_names()
    get_engine.cache_clear()
    settings.PICOFLOW = {}
    with pytest.raises(FlowsConfigError, match="PICOFLOW_DEMOS='maybe'"):
        get_engine()


def test_in_the_checkout_templates_and_static_files_come_from_its_top_level_folders() -> None:
    assert locations.checkout_dir() == REPO_ROOT
    assert locations.extra_templates_dir() == REPO_ROOT / "templates"
    assert locations.extra_static_dir() == REPO_ROOT / "static"
    assert locations.default_data_dir() == REPO_ROOT / "var"


@pytest.mark.parametrize(("platform", "environ", "expected"), [
    ("linux", {}, Path.home() / ".local/share/picoflow-web"),
    ("linux", {"XDG_DATA_HOME": "/data/u"}, Path("/data/u/picoflow-web")),
    ("darwin", {}, Path.home() / "Library/Application Support/picoflow-web"),
    ("win32", {"LOCALAPPDATA": "/c/Users/u/AppData/Local"},
     Path("/c/Users/u/AppData/Local/picoflow-web")),
])
def test_the_per_user_data_folder_follows_the_platform(
    platform: str, environ: dict[str, str], expected: Path,
) -> None:
    assert locations.user_data_dir(environ, platform) == expected


def test_a_misspelt_name_in_the_dict_is_a_system_check_error(settings: Any) -> None:
    from picoflow_web.config.checks import picoflow_dict

    settings.PICOFLOW = {"WORKER_LEAS": 3, "WORKERS": 2}
    errors = picoflow_dict()
    assert [(e.id, e.msg) for e in errors] == [
        ("picoflow_web.E003", "PICOFLOW has no setting 'WORKER_LEAS'.")]
    settings.PICOFLOW = {"WORKERS": 2}
    assert picoflow_dict() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_the_demos_write_their_answers_in_the_chunks_asked_for(
        settings: Any, fresh_engine: None) -> None:
    settings.PICOFLOW = {"DEMO_STREAM": 3, "DEMO_LATENCY": 0.004}
    sink = MemorySink()
    reply = await get_engine().run("HotelFlow", "Hi", sinks=[sink])
    assert reply.success, reply.message
    written: dict[tuple[str, int, int], str] = {}
    for event in sink.events:
        if isinstance(event, ev.ModelDelta):
            key = (event.path, event.call, event.attempt)
            written[key] = written.get(key, "") + event.text
    answers = {(e.path, e.call, e.attempt): e.content for e in sink.events
               if isinstance(e, ev.ModelFinished) and e.content}
    assert answers and written == answers
