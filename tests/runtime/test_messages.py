"""Message records the runtime builds itself: their time stamps, and the compiled builder
that makes them without validating them again (pinned here without strict mode too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from runtime import events as ev
from runtime import messages
from runtime.messages import Message, human_message, system_message

ROOT = Path(__file__).resolve().parents[2]


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def test_now_iso_writes_milliseconds_and_follows_the_clock_across_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1796220608.9995, 1796220608.99951, 1796220609.0004, 1796220669.25])
    monkeypatch.setattr(messages.time, "time", lambda: next(clock))
    stamps = [messages.now_iso() for _ in range(4)]
    assert stamps == ["2026-12-02T14:10:08.999Z", "2026-12-02T14:10:08.999Z",
                      "2026-12-02T14:10:09.000Z", "2026-12-02T14:11:09.250Z"]
    assert stamps[2:] == [iso(1796220609.0004), iso(1796220669.25)]


def test_a_message_whose_content_is_not_text_is_refused_as_before() -> None:
    with pytest.raises(ValidationError, match="content"):
        human_message("Desk", 42)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="content"):
        system_message(None)  # type: ignore[arg-type]


PROBE = """
import json
from runtime import events as ev
from runtime.messages import Message, ai_message, human_message, system_message, ToolCall
made = [human_message("Desk", "hi"), system_message("be brief"),
        ai_message("Desk", "", [ToolCall(id="c1", name="book", args={"n": 1})])]
print(json.dumps({"strict": ev.STRICT,
                  "made": [m.model_dump(mode="json") for m in made],
                  "fresh": made[0].tool_calls is not made[1].tool_calls}))
"""


def test_without_strict_mode_the_runtime_s_messages_equal_validated_ones() -> None:
    env = {k: v for k, v in os.environ.items() if k != ev.STRICT_ENV}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            check=True, cwd=ROOT, env=env)
    out: dict[str, Any] = json.loads(result.stdout)
    assert out["strict"] is False and out["fresh"] is True
    for made in out["made"]:
        assert made == Message.model_validate(made).model_dump(mode="json")
        assert list(made) == list(Message.model_fields)
    human, system, ai = out["made"]
    assert (human["type"], human["content"], human["additional_kwargs"]) == (
        "human", "hi", {"direct": False})
    assert (system["id"], system["timestamp"][-1]) == ("system", "Z")
    assert ai["tool_calls"] == [{"id": "c1", "name": "book", "args": {"n": 1}}]
