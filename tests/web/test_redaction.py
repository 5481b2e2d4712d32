"""Secrets in a client's config, a session's context and state, and events are replaced by
a marker before they are stored or shown."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient, override_settings

from picoflow_web import ingest
from picoflow_web.engine import get_engine
from picoflow_web.models import EventRecord, Run, StoredSession
from picoflow_web.redact import (
    MARKER,
    event_text,
    is_secret,
    may_hold_secret,
    redact,
    redact_json,
)
from runtime import Flow, LogicStep, ModelSelection, Step
from runtime.events import (
    BranchFulfilled,
    BranchStarted,
    EventBus,
    MemorySink,
    StateContributed,
    dump_event,
)
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

SECRETS = ("sk-live-123", "Bearer abc", "s3cret-state", "t0k-in-state", "pw-in-config")


class KeepsSecrets(LogicStep):
    async def run_logic(self) -> str:
        self.save_state({"password": "s3cret-state", "visible": "yes",
                         "nested": [{"access_token": "t0k-in-state"}]})
        return "done"


class SecretFlow(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [KeepsSecrets(self)]


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


async def test_secrets_are_redacted_in_config_state_context_and_events() -> None:
    get_engine().register_flow(SecretFlow)
    auth = bearer(await atoken(await amake_user()))
    config = {"api_key": "sk-live-123", "headers": {"Authorization": "Bearer abc"},
              "db": {"Password": "pw-in-config"}, "region": "eu", "max_tokens": 5}
    client = AsyncClient()
    made = await client.post("/api/runs", data=json.dumps({"flow": SecretFlow.id,
                                                           "config": config}),
                             content_type="application/json", headers=auth)
    assert made.status_code == 201, made.content
    assert not leaks(made.content.decode())
    run = await wait_run_done(made.json()["run"]["id"])
    assert run.status == Run.Status.FINISHED, run.reply
    assert run.config == {"api_key": MARKER, "headers": {"Authorization": MARKER},
                          "db": {"Password": MARKER}, "region": "eu", "max_tokens": 5}
    payloads = [p async for p in EventRecord.objects.filter(run_id=run.id).values_list(
        "payload", flat=True)]
    assert payloads and not leaks(json.dumps(payloads))
    doc = (await StoredSession.objects.aget(id=run.session_id)).doc
    assert not leaks(json.dumps(doc))
    state = doc["flow"]["steps"][0]["state"]
    assert state["visible"] == "yes" and state["password"] == MARKER
    assert doc["flow"]["context"]["config"]["api_key"] == MARKER
    for path in (f"/api/runs/{run.id}", f"/api/runs/{run.id}/events",
                 f"/api/sessions/{run.session_id}"):
        assert not leaks((await client.get(path, headers=auth)).content.decode()), path
    await client.aforce_login(await amake_user("reader", role="viewer"))
    for page in (f"/runs/{run.id}/", f"/sessions/{run.session_id}/"):
        assert not leaks((await client.get(page)).content.decode()), page


def test_ingested_events_are_redacted() -> None:
    line = {"v": 1, "type": "session.loaded", "run_id": "r", "session_id": "s", "seq": 1,
            "context": {"token": "t0k-in-state", "keep": 1}}
    data = redact(line)
    assert data["context"] == {"token": MARKER, "keep": 1}
    assert line["context"]["token"] == "t0k-in-state", "the input is not changed in place"
    assert ingest.redact is redact  # ingest redacts every parsed line with it


@pytest.mark.parametrize(("key", "secret"), [
    ("api_key", True), ("API-KEY", True), ("apikey", True), ("x-api-key", True),
    ("token", True), ("access_token", True), ("client_secret", True), ("password", True),
    ("Authorization", True), ("tokens", False), ("max_tokens", False), ("region", False),
    ("passwords_count", False),
])
def test_which_keys_look_like_secrets(key: str, secret: bool) -> None:
    assert is_secret(key) is secret


def test_the_keys_are_configurable() -> None:
    value: dict[str, Any] = {"region": "eu", "api_key": "k"}
    with override_settings(PICOFLOW_REDACT_KEYS=("region",)):
        assert redact(value) == {"region": MARKER, "api_key": "k"}
    assert redact(value) == {"region": "eu", "api_key": MARKER}
    clean = {"a": [1, {"b": 2}]}
    assert redact(clean) is clean


def test_an_event_text_is_redacted_and_a_clean_one_left_as_it_is() -> None:
    clean = json.dumps({"type": "step.entered", "step": "Ask", "text": "café"})
    assert redact_json(clean) is clean  # not parsed and dumped again
    secret = json.dumps({"type": "state.replaced", "field": "notes",
                         "value": {"Api-Key": "sk-1", "city": "Oslo"}})
    assert json.loads(redact_json(secret)) == {
        "type": "state.replaced", "field": "notes", "value": {"Api-Key": MARKER, "city": "Oslo"}}
    # A secret-looking word in a value is not a key: the text stays as it is.
    mention = json.dumps({"type": "step.entered", "text": "reset my password"})
    assert redact_json(mention) == mention


def test_a_key_spelled_with_an_escape_is_redacted_all_the_same() -> None:
    text = '{"type":"x","context":{"api_ke\\u0079":"sk-1","region":"eu"}}'
    assert json.loads(text)["context"]["api_key"] == "sk-1"
    assert json.loads(redact_json(text))["context"] == {"api_key": MARKER, "region": "eu"}


def test_names_that_only_contain_a_secret_word_keep_an_event_on_the_fast_path() -> None:
    """``tokens`` (usage) and ``token_budget`` (every fork) are no secrets: such an event is
    not walked, and its text is kept as it is."""
    clean = '{"tokens":{"total_tokens":3},"token_budget":null,"max_tokens":9}'
    assert not may_hold_secret(clean)
    assert redact_json(clean) is clean
    for text in ('{"access_token":"t"}', '{"field":"password","value":"p"}',
                 '{"headers":{"Authorization":"Bearer x"}}', '{"X-Api-Key":"k"}'):
        assert may_hold_secret(text), text
        assert MARKER in redact_json(text), text


def test_a_changed_setting_is_seen_at_once() -> None:
    text = '{"region":"eu"}'
    assert redact_json(text) is text
    with override_settings(PICOFLOW_REDACT_KEYS=("region",)):
        assert json.loads(redact_json(text)) == {"region": MARKER}
    assert redact_json(text) is text


def _events() -> list[Any]:
    sink = MemorySink()
    bus = EventBus([sink], run_id="r", session_id="s")
    bus.emit(BranchStarted, path="0", barrier="b0", index=0, key="api_key", step="Ask")
    bus.emit(BranchFulfilled, path="0", barrier="b0", index=0, key="k", output=7)
    bus.emit(BranchFulfilled, path="0", barrier="b0", index=0, key="k",
             output={"client_secret": "sk-1", "city": "Oslo"})
    bus.emit(BranchFulfilled, path="0", barrier="b0", index=0, key="k",
             output=[{"nested": {"Authorization": "Bearer x"}}])
    bus.emit(BranchFulfilled, path="0", barrier="b0", index=0, key="k",
             output="my password is hunter2")
    for field in ("password", "total", "Access-Token"):
        bus.emit(StateContributed, path="0", step="Ask", field=field, value="v", order=0,
                 draft=True, channel="append", result=None)
    return list(sink.events)


@pytest.mark.parametrize("keys", [None, ("api_key", "key"), ("output",), ()])
def test_an_event_is_redacted_exactly_as_its_text_would_be(keys: Any) -> None:
    # The fast path (an event of scalars, no secret-looking names) gives the same text as
    # scanning and redacting the serialised event, whatever the configured names.
    events = _events()
    texts = [event_text(e, keys) for e in events]
    assert texts == [redact_json(dump_event(e), keys) for e in events]
    redacted = [MARKER in text for text in texts]
    if keys is None:  # the defaults: the secret output, the nested header, two fields
        assert redacted == [False, False, True, True, False, True, False, True]
    elif keys == ("api_key", "key"):  # every branch event has a secret-looking "key"
        assert redacted[:5] == [True] * 5
    elif keys == ("output",):
        assert redacted == [False, True, True, True, True, False, False, False]
