"""A run's events as OpenTelemetry spans: the one mapping of the live sink and the export.

Pure (the standard library, and the events' :class:`~runtime.events.Unpager` to read a
paged event whole): :class:`RunSpans` reads one run's events in order, as
plain JSON dicts (an event's ``model_dump(mode="json")``, or a stored payload), and says
which span opens and which span is complete after each. The live sink
(:mod:`runtime.integrations.otel.sink`) starts an SDK span at ``opened`` and ends it at
``ended``; the dashboard's OTLP export builds the whole trace with :func:`spans_of`.

One span per turn (the root), barrier, branch, model call attempt and tool call, nested as
the run nested them: a branch under its barrier (overlapping branches are overlapping
spans; a branch its barrier rejected before it started is a zero-length span at the
rejection, marked ``picoflow.branch.started`` false, so the barrier keeps every branch
it was asked for), a barrier under the tool call that forked it (or its caller's
invocation), model and tool calls under their invocation. Model calls follow the
OpenTelemetry GenAI semantic conventions (``gen_ai.*``, with the prompt and the answer as
``gen_ai.input.messages`` and ``gen_ai.output.messages``); the fork/join facts are
``picoflow.*`` attributes.

Times are the events' own. A branch's span ends with its branch but is complete only once
its barrier joined (the join decides whether it was published); a barrier's with a root-
join checkpoint only once the checkpoint was saved or failed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...events.values import Unpager

KIND_INTERNAL, KIND_CLIENT = "internal", "client"
TURN_ENDS = frozenset({"turn.finished", "turn.failed", "turn.cancelled", "run.interrupted"})
_PREFIXES = ("turn.", "run.", "barrier.", "branch.", "join.", "cancel.", "checkpoint.",
             "model.", "tool.", "list.")
_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def maps(event_type: str) -> bool:
    """Whether events of this type can change a span (others need not be read)."""
    return event_type.startswith(_PREFIXES)


@dataclass
class SpanRecord:
    """One span as the events tell it; ``key`` names it within its run."""

    key: str
    name: str
    parent: str | None
    start: float
    end: float | None = None
    kind: str = KIND_INTERNAL
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    complete: bool = False


@dataclass
class Changes:
    """What one event did: spans opened and spans complete (to end), in that order."""

    opened: list[SpanRecord] = field(default_factory=list)
    ended: list[SpanRecord] = field(default_factory=list)


def trace_id(run_id: str) -> bytes:
    """The trace id of a run: the run id itself when it is 32 hex digits (as the runtime
    makes them), so the trace and the run are found by one id; else derived from it."""
    if len(run_id) == 32:
        try:
            raw = bytes.fromhex(run_id)
        except ValueError:
            raw = b""
        if raw and any(raw):
            return raw
    return _derived(run_id, "trace", 16)


def span_id(run_id: str, key: str) -> bytes:
    """The span id of the span ``key`` of a run (the same every time it is built)."""
    return _derived(run_id, key, 8)


def _derived(run_id: str, key: str, size: int) -> bytes:
    digest = hashlib.sha256(f"{run_id}\0{key}".encode()).digest()[:size]
    return digest if any(digest) else b"\x01".rjust(size, b"\0")


def _error_text(error: dict[str, Any]) -> str:
    return f"{error.get('type', 'Error')}: {error.get('message', '')}"


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def input_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A model call's messages in the GenAI conventions' shape (role and parts)."""
    out = []
    for message in messages:
        kind = message.get("type", "")
        parts: list[dict[str, Any]] = []
        if kind == "tool":
            parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"),
                          "response": _text(message.get("content", ""))})
        elif message.get("content", "") != "":
            parts.append({"type": "text", "content": _text(message["content"])})
        parts.extend({"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
                      "arguments": call.get("args", {})}
                     for call in message.get("tool_calls") or ())
        out.append({"role": _ROLES.get(kind, kind), "parts": parts})
    return out


def output_messages(content: Any, tool_calls: list[dict[str, Any]],
                    finish_reason: str) -> list[dict[str, Any]]:
    """A model's answer in the GenAI conventions' shape."""
    parts: list[dict[str, Any]] = []
    if content not in ("", None):
        parts.append({"type": "text", "content": _text(content)})
    parts.extend({"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
                  "arguments": call.get("args", {})} for call in tool_calls)
    return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason}]


class RunSpans:
    """The spans of one run, built from its events in order (:meth:`add`)."""

    def __init__(self, run_id: str = "") -> None:
        self.run_id = run_id
        self.session_id = ""
        self.flow = ""
        self.spans: dict[str, SpanRecord] = {}
        self.last = 0.0
        self.ended = False
        """The turn ended: every span is complete."""
        self._tools: dict[str, list[str]] = {}  # open tool spans per invocation path
        self._requested: dict[str, str] = {}  # each forked branch's step, by its path
        self._changes = Changes()
        self._pages = Unpager()  # a paged event is read whole

    # -- building ------------------------------------------------------------------------

    def add(self, e: dict[str, Any]) -> Changes:
        """Read the next event of the run; what it opened and completed (a paged event's,
        once its ``list.continued`` pages have come)."""
        self._changes = changes = Changes()
        for whole in self._pages.feed(e):
            self._read(whole)
        return changes

    def _read(self, e: dict[str, Any]) -> None:
        kind, at = e["type"], float(e["time"])
        self.last = max(self.last, at)
        if not self.run_id:
            self.run_id = e["run_id"]
        if not self.session_id:
            self.session_id = e["session_id"]
        if kind == "turn.started":
            self.flow = e["flow"]
            self._open("turn", f"turn {e['flow']}", None, at, **{
                "picoflow.flow": e["flow"], "picoflow.message": e["message"] or "",
                "picoflow.run_id": e["run_id"], "picoflow.session_id": e["session_id"]})
        elif kind in TURN_ENDS:
            self._on_turn_end(e, at)
        elif kind.startswith(("barrier.", "branch.", "join.", "cancel.", "checkpoint.")):
            self._on_barrier(e, at)
        elif kind.startswith(("model.", "tool.")):
            self._on_call(e, at)

    def finish(self) -> Changes:
        """End every span still open at the record's last time (a record cut short)."""
        self._changes = changes = Changes()
        for whole in self._pages.flush():
            self._read(whole)
        self._end_all(self.last)
        return changes

    def _end_all(self, at: float) -> None:
        for span in self.spans.values():
            if span.end is None:
                span.end = at
                span.attributes["picoflow.unfinished"] = True
            self._complete(span)
        self.ended = True

    def _open(self, key: str, name: str, parent: str | None, at: float,
              **attributes: Any) -> SpanRecord:
        if parent is not None and parent not in self.spans:
            parent = "turn" if "turn" in self.spans and key != "turn" else None
        span = self.spans[key] = SpanRecord(key, name, parent, at, attributes=attributes)
        self._changes.opened.append(span)
        return span

    def _close(self, key: str, at: float, error: str | None = None, *, complete: bool = True,
               **attributes: Any) -> SpanRecord | None:
        span = self.spans.get(key)
        if span is None or span.complete:
            return None
        span.end, span.error = at, error
        span.attributes.update(attributes)
        if complete:
            self._complete(span)
        return span

    def _complete(self, span: SpanRecord) -> None:
        if not span.complete:
            span.complete = True
            self._changes.ended.append(span)

    def _invocation(self, path: str) -> str:
        return f"branch:{path}" if path else "turn"

    def _enclosing(self, path: str) -> str:
        """Where work of ``path`` nests: its innermost open tool call, or the invocation."""
        open_tools = self._tools.get(path)
        return open_tools[-1] if open_tools else self._invocation(path)

    def _branches(self, barrier_key: str) -> list[SpanRecord]:
        return [span for span in self.spans.values()
                if span.parent == barrier_key and span.key.startswith("branch:")]

    # -- families ------------------------------------------------------------------------

    def _on_turn_end(self, e: dict[str, Any], at: float) -> None:
        kind = e["type"]
        if kind == "run.interrupted":
            error: str | None = f"interrupted: {e['reason']}"
            status = "interrupted"
        else:
            # A cancelled turn is not a failure (the runtime says so too): status OK.
            error = _error_text(e["error"]) if kind == "turn.failed" else None
            status = kind.split(".")[1]
        turn = self.spans.get("turn")
        if turn is not None and kind == "turn.cancelled":
            turn.events.append((at, kind, {"reason": e["reason"],
                                           "requested_by": e["requested_by"] or "",
                                           "revision": e["revision"]}))
        if turn is not None and kind == "turn.finished":
            turn.attributes["picoflow.reply"] = e["message"]
        self._close("turn", at, error, complete=False, **{"picoflow.turn.status": status})
        self._end_all(at)  # what is still open ends with the turn

    def _on_barrier(self, e: dict[str, Any], at: float) -> None:
        kind, barrier = e["type"], e.get("barrier", "")
        key = f"barrier:{barrier}"
        if kind == "barrier.forked":
            self._requested.update((r["path"], r["step"]) for r in e["requests"])
            count = e.get("count")
            self._open(key, f"barrier {barrier}", self._enclosing(e["path"]), at, **{
                "picoflow.barrier.id": barrier, "picoflow.barrier.path": e["path"],
                "picoflow.barrier.policy": e["policy"],
                "picoflow.barrier.checkpoint": e["checkpoint"],
                "picoflow.barrier.caller_step": e["caller_step"],
                "picoflow.barrier.branches": len(e["requests"]) if count is None else count})
        elif kind == "barrier.requested":  # a wide fork's next page of requests
            self._requested.update((r["path"], r["step"]) for r in e["requests"])
        elif kind == "branch.started":
            self._open(f"branch:{e['path']}", f"branch {e['key']}", key, at, **{
                "picoflow.branch.key": e["key"], "picoflow.branch.index": e["index"],
                "picoflow.branch.path": e["path"], "picoflow.branch.step": e["step"],
                "picoflow.barrier.id": barrier})
        elif kind == "branch.fulfilled":
            self._close(f"branch:{e['path']}", at, complete=False,
                        **{"picoflow.branch.status": "fulfilled"})
        elif kind == "branch.reused":  # restored from the ledger: a span of no length
            self._open(f"branch:{e['path']}", f"branch {e['key']}", key, at, **{
                "picoflow.branch.key": e["key"], "picoflow.branch.index": e["index"],
                "picoflow.branch.path": e["path"], "picoflow.branch.step": e["step"],
                "picoflow.barrier.id": barrier, "picoflow.branch.reused": True,
                "picoflow.branch.original_run_id": e["original_run_id"],
                **({"picoflow.branch.original_seq": e["original_seq"]}
                   if e["original_seq"] is not None else {}),
                "gen_ai.usage.input_tokens": e["input_tokens"],
                "gen_ai.usage.output_tokens": e["output_tokens"]})
            self._close(f"branch:{e['path']}", at, complete=False,
                        **{"picoflow.branch.status": "fulfilled"})
        elif kind == "branch.rejected":
            if not e["started"] and f"branch:{e['path']}" not in self.spans:
                self._never_started(e, key, at)
            self._close(f"branch:{e['path']}", at, _error_text(e["error"]), complete=False,
                        **{"picoflow.branch.status": "cancelled" if e["cancelled"]
                           else "rejected"})
        elif kind == "join.published":
            self._on_published(e, key, at)
        elif kind == "join.invalidated":
            self._on_invalidated(e, key, at)
        elif kind.startswith(("cancel.", "checkpoint.")) and key in self.spans:
            details = {name: e[name] for name in ("reason", "running", "queued", "closed",
                                                    "revision") if name in e}
            if "error" in e:
                details["error"] = _error_text(e["error"])
            span = self.spans[key]
            span.events.append((at, kind, details))
            if kind.startswith("checkpoint.") and span.end is not None:
                if kind == "checkpoint.failed":
                    span.error = _error_text(e["error"])
                self._complete(span)

    def _never_started(self, e: dict[str, Any], key: str, at: float) -> None:
        """A branch rejected before it started (cancelled while queued) has no span of its
        own: a zero-length one at its rejection keeps it in its barrier's tree."""
        step = self._requested.get(e["path"], "")
        self._open(f"branch:{e['path']}", f"branch {e['key']}", key, at, **{
            "picoflow.branch.key": e["key"], "picoflow.branch.index": e["index"],
            "picoflow.branch.path": e["path"], "picoflow.branch.step": step,
            "picoflow.barrier.id": e["barrier"], "picoflow.branch.started": False})

    def _on_published(self, e: dict[str, Any], key: str, at: float) -> None:
        discarded = {item["index"]: item for item in e["discarded"]}
        span = self.spans.get(key)
        # A root join that published something is saved next: the barrier's span waits
        # for the checkpoint's event.
        saving = (span is not None and e["target"] == "canonical" and bool(e["fields"])
                  and span.attributes.get("picoflow.barrier.checkpoint") == "root-join")
        for branch in self._branches(key):
            gone = discarded.get(branch.attributes["picoflow.branch.index"])
            branch.attributes["picoflow.branch.publication"] = (
                "discarded" if gone else "published")
            if gone:
                branch.attributes["picoflow.branch.discard_reason"] = str(gone["reason"])
            self._end_branch(branch, at)
        self._close(key, at, complete=not saving, **{
            # An atomic batch that discarded everything also ends in join.published.
            "picoflow.barrier.outcome": "published" if e["fields"] else "nothing published",
            "picoflow.barrier.target": e["target"],
            "picoflow.barrier.published": [f"{f['step']}.{f['field']}" for f in e["fields"]],
            "picoflow.barrier.discarded": [str(d["key"]) for d in discarded.values()]})

    def _on_invalidated(self, e: dict[str, Any], key: str, at: float) -> None:
        for branch in self._branches(key):
            branch.attributes["picoflow.branch.publication"] = "discarded"
            branch.attributes["picoflow.branch.discard_reason"] = "join invalidated"
            self._end_branch(branch, at)
        span = self.spans.get(key)
        if span is not None and not span.complete:
            span.events.append((at, "join.invalidated", {
                "error_code": e["error"]["code"], "error": _error_text(e["error"]),
                "provenance": _json(e["provenance"])}))
        self._close(key, at, _error_text(e["error"]), **{
            "picoflow.barrier.outcome": "invalidated", "picoflow.barrier.published": [],
            "picoflow.barrier.error_code": e["error"]["code"]})

    def _end_branch(self, branch: SpanRecord, at: float) -> None:
        if branch.end is None:  # the join came without the branch's own end
            branch.end = at
            branch.attributes["picoflow.unfinished"] = True
        self._complete(branch)

    def _on_call(self, e: dict[str, Any], at: float) -> None:
        kind, path = e["type"], e["path"]
        if kind.startswith("model."):
            key = f"model:{path}:{e['call']}:{e['attempt']}"
            if kind == "model.started":
                model = e["model"]
                name, provider = str(model.get("name", "")), str(model.get("provider", ""))
                self._open(key, f"chat {name}".strip(), self._invocation(path), at, **{
                    "gen_ai.operation.name": "chat", "gen_ai.system": provider,
                    "gen_ai.provider.name": provider, "gen_ai.request.model": name,
                    "gen_ai.input.messages": _json(input_messages(e["messages"])),
                    "picoflow.model.tools": [str(t) for t in e["tools"]],
                    "picoflow.step": e["step"], "picoflow.model.call": e["call"],
                    "picoflow.model.attempt": e["attempt"]}).kind = KIND_CLIENT
            elif kind == "model.finished":
                self._close(key, at, **{
                    "gen_ai.usage.input_tokens": e["input_tokens"],
                    "gen_ai.usage.output_tokens": e["output_tokens"],
                    "gen_ai.response.finish_reasons": [e["finish_reason"]],
                    "gen_ai.output.messages": _json(output_messages(
                        e["content"], e["tool_calls"], e["finish_reason"])),
                    "picoflow.model.latency_s": e["latency"],
                    "picoflow.model.accepted": e["accepted"]})
            elif kind == "model.failed":
                span = self.spans.get(key)
                if span is not None and not span.complete:
                    span.events.append((at, "exception", {
                        "exception.type": e["error"].get("type", "Error"),
                        "exception.message": e["error"].get("message", "")}))
                self._close(key, at, _error_text(e["error"]), **{
                    "error.type": e["error"].get("type", "Error"),
                    "picoflow.model.retrying": e["retrying"]})
        elif kind == "tool.started":
            key = f"tool:{path}:{e['call_id']}"
            arguments = _json(e["args"])
            self._open(key, f"execute_tool {e['name']}", self._enclosing(path), at, **{
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": e["name"],
                "gen_ai.tool.call.id": e["call_id"], "gen_ai.tool.call.arguments": arguments,
                "picoflow.step": e["step"], "picoflow.tool.args": arguments})
            self._tools.setdefault(path, []).append(key)
        elif kind == "tool.finished":
            key = f"tool:{path}:{e['call_id']}"
            open_tools = self._tools.get(path, [])
            if key in open_tools:
                open_tools.remove(key)
            result = _json(e["result"])
            self._close(key, at, result if e["status"] == "error" else None, **{
                "gen_ai.tool.call.result": result,
                "picoflow.tool.status": e["status"], "picoflow.tool.outcome": e["outcome"],
                "picoflow.tool.result": result})


def spans_of(events: Iterable[dict[str, Any]]) -> RunSpans:
    """Every span of one run's record (in order); spans the record leaves open end with
    its last event, marked ``picoflow.unfinished``."""
    run = RunSpans()
    for e in events:
        if maps(e["type"]):
            run.add(e)
        else:
            run.last = max(run.last, float(e["time"]))
            run.run_id = run.run_id or e["run_id"]
            run.session_id = run.session_id or e["session_id"]
    if not run.ended:
        run.finish()
    return run


__all__ = ["KIND_CLIENT", "KIND_INTERNAL", "TURN_ENDS", "Changes", "RunSpans", "SpanRecord",
           "input_messages", "maps", "output_messages", "span_id", "spans_of", "trace_id"]
