"""An OpenTelemetry trace's spans as one run's events (pure: no database).

One trace is one run, its id the trace id. The root span (no parent, or a parent in another
process that is not in the trace) is the turn. Every span is an invocation: the children
of a span are read in start order, and children whose times overlap form an inferred
barrier — forked at the first one's start, each of them a branch (keyed by its name,
``name:index`` when the name repeats in the barrier), joined at the last one's end —
while a child that overlaps no sibling stays sequential (``step.entered`` /
``step.exited`` in its parent's invocation). GenAI spans (``gen_ai.operation.name``
chat, text_completion, embeddings; OpenInference ``LLM``) are model calls, tool spans
(``execute_tool``; OpenInference ``TOOL``) tool calls, each also a branch when they
overlap a sibling. Status ERROR or an
``exception`` span event rejects a branch, fails a model or tool call, and fails the turn
when the root has it. A span of our own export that stands for a barrier (its
``picoflow.barrier.id``) makes its children that barrier's branches even when they ran one
at a time, keyed by their ``picoflow.branch.key`` and in their ``picoflow.branch.index``
order, so an exported run comes back as the same barrier tree; what else that export
says is read back too: a branch that never started (``picoflow.branch.started`` false)
or was cancelled, a branch or barrier its run left open (``picoflow.unfinished``), an
invalidated join, a root-join checkpoint, a cancelled or interrupted turn.

Spans carry no state: the barriers publish nothing, and the run's state is empty.

Events are stamped with the spans' own times and ordered by them; ties keep the tree's
order (a fork before its branches, a branch's end before its join), so the list folds
without anomalies even when a child's clock says it began before its parent (the child
is moved to its parent's start) or ended after it (the parent is stretched). The list is
a function of the spans alone: the same spans always give the same events, which is what
lets a trace assembled from many requests append only what its new spans add.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime import events as ev

FLOW_PREFIX = "OpenTelemetry:"
UNKNOWN_SERVICE = "unknown_service"
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "embeddings", "generate_content"})
BARRIER_ATTRIBUTE = "picoflow.barrier.id"
"""Marks a span our own export made for a barrier."""
UNFINISHED = "picoflow.unfinished"
"""Marks a span of our own export that its run left open (its end is the record's)."""
PENDING_ROOT = "(root span not received yet)"
"""The turn's step while a trace's root span has not arrived."""
STATUS_ERROR = 2
"""OTLP's ``STATUS_CODE_ERROR``."""


def shown_attributes(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """A span's own attributes as its branch's params, for the inspector (stored redacted);
    the ``picoflow.*`` ones our export writes are structure, read back as the tree."""
    # Each cut like every value an event carries (a span may hold whole prompts), so one
    # long attribute does not hide the others.
    shown = {name: ev.safe_value(value) for name, value in attributes.items()
             if not name.startswith("picoflow.")}
    return shown or None


@dataclass
class Span:
    """One span, as stored (:class:`~picoflow_web.models.TraceSpan`)."""

    span_id: str
    parent_span_id: str
    name: str
    start: int
    """Unix nanoseconds."""
    end: int
    status_code: int = 0
    status_message: str = ""
    kind: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    """``{"name", "time" (ns), "attributes"}``."""
    resource: dict[str, Any] = field(default_factory=dict)
    remote_parent: bool = False
    """Its parent is another process's span (OTLP's span flags say so): the root of what
    this trace holds, unless that parent arrives too."""

    @property
    def rooted(self) -> bool:
        """Whether it is a root: no parent, or a parent in another process."""
        return not self.parent_span_id or self.remote_parent


@dataclass(eq=False)
class _Node:
    span: Span
    children: list[_Node] = field(default_factory=list)
    start: int = 0
    end: int = 0
    path: str = ""
    step: str = ""
    branch: tuple[str, int, str] | None = None
    """(barrier, index, key) when the span is a branch."""


def service_of(spans: list[Span]) -> str:
    for span in spans:
        name = span.resource.get("service.name")
        if isinstance(name, str) and name:
            return name
    return UNKNOWN_SERVICE


def kind_of(span: Span) -> str:
    """``model``, ``tool`` or ``span``."""
    attrs = span.attributes
    operation = attrs.get("gen_ai.operation.name")
    openinference = str(attrs.get("openinference.span.kind", "")).upper()
    if operation in MODEL_OPERATIONS or openinference in ("LLM", "EMBEDDING"):
        return "model"
    if operation == "execute_tool" or openinference == "TOOL":
        return "tool"
    return "span"


def failure(span: Span) -> ev.ErrorInfo | None:
    """The span's error: status ERROR, or an ``exception`` event."""
    raised = next((e for e in span.events if e.get("name") == "exception"), None)
    if span.status_code != STATUS_ERROR and raised is None:
        return None
    attrs = (raised or {}).get("attributes") or {}
    message = str(attrs.get("exception.message") or span.status_message or "span failed")
    return ev.ErrorInfo(type=str(attrs.get("exception.type") or "SpanError"),
                        code="span_error", message=ev.safe_text(message), extra={})


def tree(spans: list[Span]) -> tuple[_Node, list[_Node]]:
    """The root and every node. With no true root (it has not arrived yet), a stand-in
    (:data:`PENDING_ROOT`) spans the others, the spans whose parent is missing its
    children."""
    nodes = {s.span_id: _Node(s) for s in spans}
    roots = sorted((n for n in nodes.values() if not n.span.parent_span_id or (
        n.span.remote_parent and n.span.parent_span_id not in nodes)),
        key=lambda n: (n.span.start, n.span.span_id))
    if roots:
        root = roots[0]
    else:
        root = _Node(Span(span_id="", parent_span_id="", name=PENDING_ROOT,
                          start=min(s.start for s in spans), end=max(s.end for s in spans)))
    for node in nodes.values():
        if node is not root:
            parent = nodes.get(node.span.parent_span_id)
            (parent if parent is not None else root).children.append(node)
    _times(root, None)
    return root, list(nodes.values())


def _times(node: _Node, parent: _Node | None) -> None:
    """Effective times: a child never begins before its parent; a parent lasts until its
    last child ends."""
    node.start = node.span.start if parent is None else max(node.span.start, parent.start)
    node.end = max(node.span.end, node.start)
    node.children.sort(key=lambda n: (n.span.start, n.span.span_id))
    for child in node.children:
        _times(child, node)
        node.end = max(node.end, child.end)


def clusters(children: list[_Node]) -> list[list[_Node]]:
    """Children (in start order) grouped where their times overlap."""
    out: list[list[_Node]] = []
    reach = None
    for child in children:
        if out and reach is not None and child.start < reach:
            out[-1].append(child)
            reach = max(reach, child.end)
        else:
            out.append([child])
            reach = child.end
    return out


class _Emitter:
    def __init__(self, run_id: str, session_id: str, origin: int) -> None:
        self.run_id, self.session_id, self.origin = run_id, session_id, origin
        self.items: list[tuple[int, int, type[ev.EventBase], str, dict[str, Any]]] = []
        self.calls = 0
        self.barriers: dict[str, int] = {}

    def at(self, ns: int, cls: type[ev.EventBase], path: str, **fields: Any) -> None:
        self.items.append((ns, len(self.items), cls, path, fields))

    def paged(self, ns: int, cls: type[ev.EventBase], path: str, barrier: str,
              lists: dict[str, list[Any]], **fields: Any) -> None:
        """``cls`` with its per-branch ``lists`` in pages, as the runtime records them: the
        first page on it (and the counts), ``list.continued`` events after it."""
        heads, counts, rest = ev.paged_lists(lists)
        self.at(ns, cls, path, barrier=barrier, **fields, **heads,
                **({"counts": counts} if counts else {}))
        of = cls.model_fields["type"].default
        for name, first, items in rest:
            self.at(ns, ev.ListContinued, path, barrier=barrier, of=of, name=name,
                    first=first, items=items)

    def events(self) -> list[ev.EventBase]:
        out = []
        for seq, (ns, _, cls, path, fields) in enumerate(sorted(
                self.items, key=lambda item: (item[0], item[1]))):
            offset = max(0, ns - self.origin) / 1e9
            out.append(ev.build_strict(cls, {
                "v": ev.SCHEMA_VERSION, "run_id": self.run_id, "session_id": self.session_id,
                "seq": seq, "time": ns / 1e9, "offset": offset, "path": path, **fields,
                "type": cls.model_fields["type"].default}))
        return out


def derive(run_id: str, session_id: str, spans: list[Span], *, ended: bool = True
           ) -> list[ev.EventBase]:
    """The run's events for ``spans`` (one trace's; at least one). ``ended``: whether the
    root span has arrived (its end is the turn's end); else the turn stays open."""
    root, _ = tree(spans)
    out = _Emitter(run_id, session_id, root.start)
    message = root.span.attributes.get("input.value")
    out.at(root.start, ev.TurnStarted, "", flow=ev.safe_text(
        FLOW_PREFIX + service_of(spans), 200),
        message=ev.safe_text(message) if isinstance(message, str) else None)
    out.at(root.start, ev.SessionLoaded, "", new_session=True, revision=0,
           current_step=None, steps={}, context={},
           tokens={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
    root.step = root.span.name
    out.at(root.start, ev.StepEntered, "", step=root.step, level=1, how="start")
    _content(out, root, level=1)
    if not ended:
        return out.events()
    status = root.span.attributes.get("picoflow.turn.status")
    if status == "interrupted":
        _interrupted(out, root)
        return out.events()
    if status == "cancelled":
        _cancelled(out, root)
        return out.events()
    out.at(root.end, ev.StepExited, "", step=root.step)
    error = failure(root.span)
    if error is not None:
        out.at(root.end, ev.TurnFailed, "", error=error)
    else:
        said = root.span.attributes.get("output.value")
        out.at(root.end, ev.TurnFinished, "", success=True, completed=True,
               message=ev.safe_text(said if isinstance(said, str) else ""),
               content_type="text/plain")
    return out.events()


def _interrupted(out: _Emitter, root: _Node) -> None:
    """Our own export of an interrupted run: the turn ends as it did, silent since the
    last span that ended on its own."""
    reason = root.span.status_message.removeprefix("interrupted: ") or "interrupted"
    last = root.start
    pending = [root]
    while pending:
        node = pending.pop()
        pending.extend(node.children)
        last = max(last, node.start if node.span.attributes.get(UNFINISHED) else node.end)
    out.at(root.end, ev.RunInterrupted, "", reason=ev.safe_text(reason),
           silent_for=max(0, root.end - last) / 1e9)


def _cancelled(out: _Emitter, root: _Node) -> None:
    """Our own export of a cancelled turn: who stopped it and why (its span event)."""
    said = next((e.get("attributes") or {} for e in root.span.events
                 if e.get("name") == "turn.cancelled"), {})
    revision = said.get("revision")
    out.at(root.end, ev.TurnCancelled, "", reason=ev.safe_text(str(said.get("reason", ""))),
           requested_by=str(said.get("requested_by") or "") or None,
           revision=revision if isinstance(revision, int) else 0)


def _content(out: _Emitter, node: _Node, level: int) -> None:
    """What happens inside ``node`` (its own call, then its children), at its path."""
    kind = kind_of(node.span)
    if kind == "model":
        _model(out, node)
    elif kind == "tool":
        _tool(out, node)
    for group in clusters(node.children):
        if len(group) == 1:
            _sequential(out, node, group[0], level)
        else:
            _barrier(out, node, group, level)


def _sequential(out: _Emitter, parent: _Node, child: _Node, level: int) -> None:
    child.path = parent.path
    if BARRIER_ATTRIBUTE in child.span.attributes and child.children:
        # A barrier our own export wrote (picoflow_web.data.otlp_export): its children
        # are its branches, overlapping or not, forked in its caller's invocation.
        child.step = parent.step
        _barrier(out, child, sorted(child.children, key=_request_order), level)
        return
    if kind_of(child.span) != "span":  # a call of its parent's invocation
        child.step = parent.step
        _content(out, child, level)
        return
    child.step = child.span.name
    out.at(child.start, ev.StepEntered, child.path, step=child.step, level=level + 1,
           how="child")
    _content(out, child, level + 1)
    out.at(child.end, ev.StepExited, child.path, step=child.step)


def _reused(out: _Emitter, child: _Node, barrier: str, index: int, key: str) -> None:
    """A branch a resumed turn restored from its ledger, as our own export wrote it."""
    attrs = child.span.attributes
    said = attrs.get("output.value")

    def count(name: str) -> int:
        value = attrs.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    original = attrs.get("picoflow.branch.original_seq")
    tokens_in, tokens_out = count("gen_ai.usage.input_tokens"), count("gen_ai.usage.output_tokens")
    out.at(child.start, ev.BranchReused, child.path, barrier=barrier, index=index, key=key,
           step=child.step, output=ev.safe_value(said) if said is not None else None,
           original_run_id=str(attrs.get("picoflow.branch.original_run_id") or ""),
           original_seq=original if isinstance(original, int) else None,
           input_tokens=tokens_in, output_tokens=tokens_out,
           total_tokens=tokens_in + tokens_out)


def _request_order(node: _Node) -> tuple[int, int, str]:
    """A branch of our own export: where its fork requested it (when it started varies)."""
    index = node.span.attributes.get("picoflow.branch.index")
    return (index if isinstance(index, int) else 2**53, node.span.start, node.span.span_id)


def _barrier(out: _Emitter, parent: _Node, group: list[_Node], level: int) -> None:
    caller = parent.path
    ordinal = out.barriers.get(caller, 0)
    out.barriers[caller] = ordinal + 1
    barrier = f"{caller}/b{ordinal}" if caller else f"b{ordinal}"
    names = [child.span.name for child in group]
    request = ev.record_maker(ev.BranchRequest)
    requests = []
    for index, child in enumerate(group):
        own = str(index) if ordinal == 0 else f"{ordinal}:{index}"
        child.path = f"{caller}.{own}" if caller else own
        attrs = child.span.attributes
        child.step = str(attrs.get("picoflow.branch.step") or child.span.name)
        key = str(attrs.get("picoflow.branch.key") or (
            child.span.name if names.count(child.span.name) == 1
            else f"{child.span.name}:{index}"))
        child.branch = (barrier, index, key)
        requests.append(request(index=index, path=child.path, step=child.step, key=key,
                                params=shown_attributes(attrs), user_message=None))
    forked, pages = min(child.start for child in group), ev.fork_pages(requests)
    out.at(forked, ev.BarrierForked, caller, barrier=barrier,
           caller_step=parent.step,
           requests=pages[0], policy="retain-successes", checkpoint="none",
           max_concurrency=None, branch_timeout=None, token_budget=None,
           base=caller or "canonical", count=len(requests) if len(pages) > 1 else None)
    for page in pages[1:]:
        out.at(forked, ev.BarrierRequested, caller, barrier=barrier, first=page[0].index,
               requests=page)
    rejected = []
    for index, child in enumerate(group):
        key = requests[index].key
        attrs = child.span.attributes
        started = attrs.get("picoflow.branch.started") is not False
        if attrs.get("picoflow.branch.reused") is True:  # our own export's reused branch
            _reused(out, child, barrier, index, key)
            continue
        if started:
            out.at(child.start, ev.BranchStarted, child.path, barrier=barrier, index=index,
                   key=key, step=child.step)
            _content(out, child, level)
        error = failure(child.span)
        if error is None and attrs.get(UNFINISHED):
            continue  # still running when its run's record ends
        if error is None:
            said = child.span.attributes.get("output.value")
            out.at(child.end, ev.BranchFulfilled, child.path, barrier=barrier, index=index,
                   key=key, output=ev.safe_value(said) if said is not None else None)
        else:
            rejected.append({"index": index, "key": key, "reason": "rejected"})
            out.at(child.end, ev.BranchRejected, child.path, barrier=barrier, index=index,
                   key=key, error=error, started=started,
                   cancelled=attrs.get("picoflow.branch.status") == "cancelled")
    joined = max(child.end for child in group)
    if BARRIER_ATTRIBUTE in parent.span.attributes:  # our own export's barrier
        if parent.span.attributes.get(UNFINISHED):
            return  # its run's record ends before it joined
        if parent.span.attributes.get("picoflow.barrier.outcome") == "invalidated":
            error, provenance = _invalidation(parent.span)
            out.paged(max(joined, parent.end), ev.JoinInvalidated, caller, barrier,
                      {"provenance": provenance}, error=error)
            return
    out.paged(joined, ev.JoinPublished, caller, barrier, {"discarded": rejected},
              target="caller-scope" if caller else "canonical", fields=[])
    if BARRIER_ATTRIBUTE in parent.span.attributes:
        _checkpoint(out, parent, barrier, joined)


def _checkpoint(out: _Emitter, node: _Node, barrier: str, joined: int) -> None:
    """The root-join checkpoint our own export's barrier span tells of (a span event)."""
    for event in node.span.events:
        attrs = event.get("attributes") or {}
        at = max(joined, int(event.get("time") or 0))
        if event.get("name") == "checkpoint.failed":
            kind, _, message = str(attrs.get("error") or "").partition(": ")
            out.at(at, ev.CheckpointFailed, node.path, barrier=barrier, error=ev.ErrorInfo(
                type=kind or "SpanError", code="checkpoint_failed",
                message=ev.safe_text(message or kind), extra={}))
        elif event.get("name") == "checkpoint.saved" and isinstance(
                attrs.get("revision"), int):
            out.at(at, ev.CheckpointSaved, node.path, barrier=barrier,
                   revision=attrs["revision"])


def _invalidation(span: Span) -> tuple[ev.ErrorInfo, list[Any]]:
    """The error and provenance of a join our own export says was invalidated."""
    kind, _, message = span.status_message.partition(": ")
    code = span.attributes.get("picoflow.barrier.error_code")
    provenance: Any = []
    for event in span.events:
        if event.get("name") == "join.invalidated":
            try:
                provenance = json.loads(str((event.get("attributes") or {}).get("provenance")))
            except ValueError:
                provenance = []
    return (ev.ErrorInfo(type=kind or "SpanError", code=str(code or "span_error"),
                         message=ev.safe_text(message or span.status_message), extra={}),
            [ev.safe_value(entry) for entry in provenance]
            if isinstance(provenance, list) else [])


# -- model and tool calls -----------------------------------------------------------------


def _messages(attrs: Mapping[str, Any], side: str) -> list[dict[str, Any]]:
    """A GenAI span's prompt (``side`` input) or output messages, in whichever convention
    it carries them: ``gen_ai.{input,output}.messages`` (JSON), OpenLLMetry's
    ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``, OpenInference's
    ``llm.{input,output}_messages.N.message.*``."""
    whole = attrs.get(f"gen_ai.{side}.messages")
    if isinstance(whole, str):
        try:
            parsed = json.loads(whole)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            return [m if isinstance(m, dict) else {"content": m} for m in parsed]
    prefixes = ((f"gen_ai.{'prompt' if side == 'input' else 'completion'}.", ""),
                (f"llm.{side}_messages.", "message."))
    for prefix, inner in prefixes:
        found: dict[int, dict[str, Any]] = {}
        for name, value in attrs.items():
            if not name.startswith(prefix):
                continue
            number, _, rest = name[len(prefix):].partition(".")
            if number.isdigit() and rest.startswith(inner) and rest[len(inner):]:
                found.setdefault(int(number), {})[rest[len(inner):]] = value
        if found:
            return [found[n] for n in sorted(found)]
    return []


def _tokens(attrs: Mapping[str, Any], *names: str) -> int:
    for name in names:
        value = attrs.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and 0 <= value < 2**53:
            return int(value)
    return 0


def _model(out: _Emitter, node: _Node) -> None:
    attrs = node.span.attributes
    out.calls += 1
    call = out.calls
    name = (attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
            or attrs.get("llm.model_name") or node.span.name)
    provider = (attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")
                or attrs.get("llm.provider") or "opentelemetry")
    out.at(node.start, ev.ModelStarted, node.path, step=node.step, call=call, attempt=1,
           model={"provider": str(provider), "name": str(name), "params": {}},
           messages=ev.safe_list(_messages(attrs, "input")), tools=[])
    latency = (node.span.end - node.span.start) / 1e9
    error = failure(node.span)
    if error is not None:
        out.at(node.end, ev.ModelFailed, node.path, step=node.step, call=call, attempt=1,
               latency=max(0.0, latency), error=error, retrying=False)
        return
    tokens_in = _tokens(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                        "llm.token_count.prompt")
    tokens_out = _tokens(attrs, "gen_ai.usage.output_tokens",
                         "gen_ai.usage.completion_tokens", "llm.token_count.completion")
    output = _messages(attrs, "output")
    reasons = attrs.get("gen_ai.response.finish_reasons")
    reason = reasons[0] if isinstance(reasons, list) and reasons else "stop"
    content: Any = output[0].get("content") if len(output) == 1 else (output or None)
    out.at(node.end, ev.ModelFinished, node.path, step=node.step, call=call, attempt=1,
           latency=max(0.0, latency), content=ev.safe_value(content), tool_calls=[],
           input_tokens=tokens_in, output_tokens=tokens_out,
           total_tokens=_tokens(attrs, "gen_ai.usage.total_tokens",
                                "llm.token_count.total") or tokens_in + tokens_out,
           finish_reason=str(reason), accepted=True)


def _tool(out: _Emitter, node: _Node) -> None:
    attrs = node.span.attributes
    name = str(attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or node.span.name)
    call_id = str(attrs.get("gen_ai.tool.call.id") or node.span.span_id)
    args = attrs.get("gen_ai.tool.call.arguments", attrs.get("tool.parameters",
                                                             attrs.get("input.value")))
    out.at(node.start, ev.ToolStarted, node.path, step=node.step, name=name,
           call_id=call_id, args=ev.safe_value(args))
    error = failure(node.span)
    result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value"))
    out.at(node.end, ev.ToolFinished, node.path, step=node.step, name=name, call_id=call_id,
           status="error" if error is not None else "success",
           result=ev.safe_value(error.message if error is not None else result),
           transition=None, outcome="handled")


__all__ = ["FLOW_PREFIX", "PENDING_ROOT", "UNKNOWN_SERVICE", "Span", "clusters", "derive",
           "failure", "kind_of", "service_of", "tree"]
