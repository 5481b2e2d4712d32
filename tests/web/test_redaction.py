"""Secrets in a client's config, a session's context and state, and events are replaced by
a marker before they are stored or shown."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import AsyncClient, override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from picoflow_web.data.redact import (
    BUILTIN_KEYS,
    MARKER,
    event_text,
    is_secret,
    may_hold_secret,
    redact,
    redact_json,
    secret_keys,
)
from picoflow_web.execute.engine import get_engine
from picoflow_web.models import EventRecord, Run, StoredSession
from picoflow_web.record import ingest
from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    Model,
    ModelSelection,
    Rule,
    ScriptedModel,
    Step,
    TokenUsage,
    tool,
)
from runtime.events import (
    BranchFulfilled,
    BranchStarted,
    ErrorInfo,
    EventBus,
    MemorySink,
    StateContributed,
    ToolStarted,
    TurnFailed,
    TurnStarted,
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


def test_configured_keys_are_added_to_the_built_in_ones() -> None:
    value: dict[str, Any] = {"region": "eu", "api_key": "k", "private_key": "p"}
    with override_settings(PICOFLOW_REDACT_KEYS=("region",)):
        assert secret_keys() == (*BUILTIN_KEYS, "region")
        assert redact(value) == {"region": MARKER, "api_key": MARKER, "private_key": MARKER}
    assert secret_keys() == BUILTIN_KEYS
    assert redact(value) == {"region": "eu", "api_key": MARKER, "private_key": MARKER}
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


# -- the common secret names, credentials inside text, and what must survive ----------------


@pytest.mark.parametrize(("value", "redacted"), [
    ({"secret_key": "sk"}, {"secret_key": MARKER}),
    ({"aws_secret_access_key": "ak"}, {"aws_secret_access_key": MARKER}),
    ({"private_key": "pk"}, {"private_key": MARKER}),
    ({"privateKey": "pk"}, {"privateKey": MARKER}),
    ({"PRIVATE-KEY": "pk"}, {"PRIVATE-KEY": MARKER}),
    ({"passwd": "pw"}, {"passwd": MARKER}),
    ({"db.passwd": "pw"}, {"db.passwd": MARKER}),
    ({"cookie": "sid=1"}, {"cookie": MARKER}),
    ({"Set-Cookie": "sid=1"}, {"Set-Cookie": MARKER}),
    ({"bearer": "abc"}, {"bearer": MARKER}),
    ({"oauthCredential": "c"}, {"oauthCredential": MARKER}),
    ({"credentials": {"user": "u", "pass": "pw", "port": 5432}},
     {"credentials": {"user": MARKER, "pass": MARKER, "port": MARKER}}),
    ({"service": {"credentials": [{"pass": "pw"}]}},
     {"service": {"credentials": [{"pass": MARKER}]}}),
    ({"apiKeys": ["k1", "k2"]}, {"apiKeys": [MARKER, MARKER]}),
    ({"api_keys": {"primary": "k1"}}, {"api_keys": {"primary": MARKER}}),
    ({"secrets": {"db": "pw"}}, {"secrets": {"db": MARKER}}),
])
def test_the_common_secret_names_are_redacted(value: dict[str, Any],
                                              redacted: dict[str, Any]) -> None:
    assert redact(value) == redacted


@pytest.mark.parametrize(("text", "masked"), [
    ("postgres://u:pw@h/db", "postgres://u:[redacted]@h/db"),
    ("redis://:pw@cache:6379/0", "redis://:[redacted]@cache:6379/0"),
    ("connect to https://bob:p@ss@host:8443/x now",
     "connect to https://bob:[redacted]@host:8443/x now"),
    ("a postgres://a:1@h/x and amqp://b:2@q//", "a postgres://a:[redacted]@h/x and "
                                                 "amqp://b:[redacted]@q//"),
    ("Authorization: Bearer sk-live-123456", "Authorization: Bearer [redacted]"),
    ("curl -H 'authorization: bearer eyJhbGciOi.J9.x1'",
     "curl -H 'authorization: bearer [redacted]'"),
])
def test_credentials_inside_any_text_are_masked(text: str, masked: str) -> None:
    assert redact({"dsn": text}) == {"dsn": masked}
    assert redact({"note": text}) == {"note": masked}  # not only under secret-looking names
    assert redact([text]) == [masked]
    assert json.loads(redact_json(json.dumps({"message": text}))) == {"message": masked}


@pytest.mark.parametrize("text", [
    "mailto:ada@example.com", "ada@example.com wrote", "https://host/path?q=1#frag",
    "http://[::1]:8000/", "https://host:8443/a@b", "The Bearer authentication scheme",
    "bearer of bad news", "postgres://u@h/db", "postgres://u:[redacted]@h/db",
])
def test_text_without_credentials_is_left_as_it_is(text: str) -> None:
    value = {"note": text}
    assert redact(value) is value
    encoded = json.dumps(value)
    assert redact_json(encoded) is encoded


def test_token_counts_and_other_measures_survive() -> None:
    """Usage accounting (what the runtime records of every model call and every session)
    is numbers under names that mention tokens: numbers under a name that measures
    something stay; text under the same names is hidden all the same."""
    usage = {"tokens": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
             "input_tokens": 3, "total_tokens": 7, "max_tokens": 9, "token_budget": 500,
             "tokens_used": 12, "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                          "completion_tokens_details": {"reasoning_tokens": 0}},
             "token_usage": {"prompt": 3}, "password_min_length": 12, "passwords_count": 2,
             "has_password": True, "api_key": None, "token": "", "cookie_max_age": 3600}
    assert redact(usage) is usage
    text = json.dumps(usage, separators=(",", ":"))
    assert redact_json(text) is text
    # The runtime's own records (every model call, every session, every fork) are not even
    # parsed again.
    recorded = {"tokens": usage["tokens"], "input_tokens": 3, "output_tokens": 4,
                "total_tokens": 7, "token_budget": None, "max_tokens": 9}
    assert not may_hold_secret(json.dumps(recorded, separators=(",", ":")))
    assert not may_hold_secret(json.dumps(recorded))
    assert redact({"max_tokens": "lots", "tokens": ["tk-1"], "password": 123456}) == {
        "max_tokens": MARKER, "tokens": [MARKER], "password": MARKER}


@pytest.mark.parametrize("text", [
    '{"dsn":"postgres://u:pw@h/db"}', '{"m":"postgres:\\/\\/u:pw@h\\/db"}',
    '{"m":"Bearer sk-live-123456"}', '{"m":"x","privateKey":"p"}',
    '{"steps":{"A":{"aws_secret_access_key":"k"}}}', '{"apiKeys":["a"]}',
    '{"credentials":{"pass":"p"}}', '{"field":"db_passwd","value":"p"}',
    '{"tokens":{"api_key":"k"}}', '{"tokens":[{"x":"y"}]}',
])
def test_the_fast_text_check_sends_every_secret_to_the_walk(text: str) -> None:
    assert may_hold_secret(text), text
    assert MARKER in redact_json(text), text


def test_an_event_of_plain_values_with_credentials_in_its_text_is_masked() -> None:
    sink = MemorySink()
    bus = EventBus([sink], run_id="r", session_id="s")
    bus.emit(TurnStarted, flow="F", message="use postgres://u:pw-1@h/db please")
    bus.emit(StateContributed, path="0", step="Ask", field="total_tokens", value=3, order=0,
             draft=True, channel="sum", result=None)
    bus.emit(StateContributed, path="0", step="Ask", field="apiKeys", value="k", order=0,
             draft=True, channel="append", result=None)
    started, counted, keyed = sink.events
    assert json.loads(event_text(started))["message"] == "use postgres://u:[redacted]@h/db please"
    assert event_text(counted) == dump_event(counted)
    assert json.loads(event_text(keyed))["value"] == MARKER


def _more_events() -> list[Any]:
    sink = MemorySink()
    bus = EventBus([sink], run_id="r", session_id="s")
    bus.emit(TurnStarted, flow="F", message="redis://:pw@cache/0")
    bus.emit(TurnStarted, flow="F", message="mail ada@example.com")
    bus.emit(TurnStarted, flow="F", message="Bearer abc-12345678")
    bus.emit(ToolStarted, path="", step="S", name="sign", call_id="c1",
             args={"private_key": "pk", "note": "n"})
    bus.emit(ToolStarted, path="", step="S", name="sign", call_id="c2",
             args={"tokens": {"total_tokens": 3}, "token_budget": None})
    bus.emit(TurnFailed, error=ErrorInfo(
        type="E", code="internal", message="cannot reach postgres://pf:hunter2@db:5432/pf"))
    for field, result in (("secret_key", None), ("max_tokens", None),
                          ("credentials", {"n": 1})):
        bus.emit(StateContributed, path="0", step="Ask", field=field, value=5, order=0,
                 draft=True, channel=None, result=result)
    return list(sink.events)


@pytest.mark.parametrize("keys", [None, ("note",), ("output",)])
def test_new_rules_give_the_fast_path_and_the_walk_the_same_text(keys: Any) -> None:
    events = _more_events()
    texts = [event_text(e, keys) for e in events]
    assert texts == [redact_json(dump_event(e), keys) for e in events]
    if keys is None:
        assert [MARKER in text for text in texts] == [True, False, True, True, False, True,
                                                      True, False, True]


# -- every door: a real turn with secrets, run here, shipped, and imported ------------------

LEAKS = ("pk-SECRET-1", "pw-SECRET-2", "pw-SECRET-3", "ak-SECRET-4", "ak-SECRET-5",
         "pw-SECRET-6", "sk-SECRET-7", "ck-SECRET-8", "br-SECRET-9", "pw-SECRET-10",
         "aws-SECRET-11", "xk-SECRET-12")
SECRET_CONFIG = {
    "dsn": "postgres://pf:pw-SECRET-3@db:5432/pf", "apiKeys": ["ak-SECRET-4", "ak-SECRET-5"],
    "credentials": {"user": "ada", "pass": "pw-SECRET-6"}, "secret_key": "sk-SECRET-7",
    "cookie": "sid=ck-SECRET-8", "bearer": "br-SECRET-9", "passwd": "pw-SECRET-10",
    "aws_secret_access_key": "aws-SECRET-11", "max_tokens": 5, "region": "eu",
}
USAGE = TokenUsage(input_tokens=3, output_tokens=4, total_tokens=7)
VAULT_MODEL = "vault-models"


class Sign(Step):
    def get_prompt(self) -> str:
        return "Sign the note."

    @tool
    def sign(self, private_key: str, note: str) -> None:
        """Sign a note with a key."""
        self.save_state({"privateKey": private_key, "note": note})


class VaultFlow(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider=VAULT_MODEL, name="vault")

    def define_steps(self) -> list[Step]:
        return [Sign(self)]

    def model_providers(self) -> dict[str, Model]:
        return {VAULT_MODEL: ScriptedModel([
            Rule(tools=[("sign", {"private_key": "pk-SECRET-1", "note": "ok"})],
                 last_type="human", usage=USAGE),
            Rule(text="Signed; stored at postgres://pf:pw-SECRET-2@db/pf", usage=USAGE),
        ])}


def vault_leaks(text: str) -> list[str]:
    return [s for s in LEAKS if s in text]


def assert_usage_kept(payloads: list[dict[str, Any]]) -> None:
    finished = [p for p in payloads if p["type"] == "model.finished"]
    assert len(finished) == 2
    for event in finished:
        assert (event["input_tokens"], event["output_tokens"], event["total_tokens"]) == (3, 4, 7)
    tool_calls = finished[0]["tool_calls"]
    assert tool_calls[0]["args"] == {"private_key": MARKER, "note": "ok"}
    started = next(p for p in payloads if p["type"] == "tool.started")
    assert started["args"] == {"private_key": MARKER, "note": "ok"}


async def test_a_real_turn_stores_no_secret_of_its_config_message_tool_calls_or_reply() -> None:
    get_engine().register_flow(VaultFlow, replace=True)
    auth = bearer(await atoken(await amake_user()))
    client = AsyncClient()
    made = await client.post("/api/runs", data=json.dumps({
        "flow": VaultFlow.id, "config": SECRET_CONFIG,
        "message": "sign it, the cache is redis://:xk-SECRET-12@cache:6379"}),
        content_type="application/json", headers=auth)
    assert made.status_code == 201, made.content
    run = await wait_run_done(made.json()["run"]["id"])
    assert run.status == Run.Status.FINISHED, run.reply
    assert run.config["dsn"] == "postgres://pf:[redacted]@db:5432/pf"
    assert run.config["max_tokens"] == 5 and run.config["region"] == "eu"
    assert run.message == "sign it, the cache is redis://:[redacted]@cache:6379"
    assert run.reply["message"] == "Signed; stored at postgres://pf:[redacted]@db/pf"
    payloads = [p async for p in EventRecord.objects.filter(run_id=run.id).order_by(
        "seq").values_list("payload", flat=True)]
    assert not vault_leaks(json.dumps(payloads))
    assert_usage_kept(payloads)
    doc = (await StoredSession.objects.aget(id=run.session_id)).doc
    assert not vault_leaks(json.dumps(doc))
    assert doc["tokens"]["total_tokens"] == 14
    state = doc["flow"]["steps"][0]["state"]
    assert (state["privateKey"], state["note"]) == (MARKER, "ok")
    for path in (f"/api/runs/{run.id}", f"/api/runs/{run.id}/events",
                 f"/api/sessions/{run.session_id}", f"/api/runs/{run.id}/export"):
        answer = await client.get(path, headers=auth)
        assert answer.status_code == 200, path
        body = (b"".join([chunk async for chunk in answer.streaming_content])
                if answer.streaming else answer.content)
        assert not vault_leaks(body.decode()), path


async def recorded_vault_turn(run_id: str) -> list[str]:
    """A VaultFlow turn played here with the secrets in the clear, as a remote process would
    ship it (its own runtime redacts nothing)."""
    sink = MemorySink()
    engine = FlowEngine(flows=[VaultFlow], sinks=[sink])
    reply = await engine.run(VaultFlow.id, "sign it, via redis://:xk-SECRET-12@cache:6379",
                             config=SECRET_CONFIG, run_id=run_id)
    assert reply.success, reply.message
    lines = [dump_event(event) for event in sink.events]
    assert vault_leaks("\n".join(lines))  # what is sent holds them
    return lines


@pytest.mark.parametrize("door", ["ingest", "import"])
async def test_shipped_and_imported_turns_are_stored_without_their_secrets(door: str) -> None:
    lines = await recorded_vault_turn(f"vault-{door}")
    user = await amake_user()
    token = await atoken(user, scopes=("ingest",) if door == "ingest" else None)
    answer = await AsyncClient().post(
        f"/api/{door}", data="".join(line + "\n" for line in lines),
        content_type="application/x-ndjson",
        headers={**bearer(token), "PicoFlow-Origin-Host": "laptop", "PicoFlow-Origin-Pid": "1"})
    assert answer.status_code in (200, 201), answer.content
    run = await Run.objects.aget(id=f"vault-{door}")
    assert run.status == Run.Status.FINISHED
    payloads = [p async for p in EventRecord.objects.filter(run_id=run.id).order_by(
        "seq").values_list("payload", flat=True)]
    assert len(payloads) == len(lines)
    assert not vault_leaks(json.dumps(payloads))
    assert_usage_kept(payloads)
    assert not vault_leaks(json.dumps([run.message, run.reply]))
    doc = (await StoredSession.objects.aget(id=run.session_id)).doc
    assert not vault_leaks(json.dumps(doc))
    assert doc["tokens"]["total_tokens"] == 14


def test_the_command_lists_the_built_in_and_the_added_names() -> None:
    out = io.StringIO()
    with override_settings(PICOFLOW_REDACT_KEYS=("region", "token")):
        call_command("redact_keys", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines == [f"{name}\tbuilt-in" for name in BUILTIN_KEYS] + [
        "region\tPICOFLOW_REDACT_KEYS"]


# -- the fast text check never lets a secret through ----------------------------------------

NAMES = st.sampled_from([
    "password", "db_passwd", "apiKeys", "X-Api-Key", "clientsecret", "privateKey", "tokens",
    "total_tokens", "token_budget", "credentials", "cookie_max_age", "field", "value",
    "inputs", "note", "region", "key", "bearer", "Authorization", "api", "tokenizer"])
TEXTS = st.sampled_from([
    "", MARKER, "eu", "postgres://u:pw@h/db", "mail ada@example.com", "https://h/x",
    "Bearer sk-live-123456", "bearer of news", "password", "total_tokens", "r\u00e9gion",
    "caf\u00e9", 'say "api_key": "x"', "a\\", "tokens"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=4),
    max_leaves=12)


@settings(max_examples=1500, deadline=None)
@given(value=st.dictionaries(NAMES | TEXTS, JSON, max_size=5), indent=st.sampled_from(
    [None, 1]))
def test_a_text_the_fast_check_lets_through_holds_no_secret(value: dict[str, Any],
                                                            indent: int | None) -> None:
    for ascii_only in (True, False):
        text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
        if not may_hold_secret(text):
            assert redact(value) is value, text
        assert json.loads(redact_json(text)) == redact(value)
