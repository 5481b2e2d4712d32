"""Hand-made runs for the what-if's tests: the events a turn with given timings records."""

from __future__ import annotations

from typing import Any


class Timeline:
    """Events of one turn, written in any order and sorted by time (ties keep their
    writing order, so write a fork before its branches)."""

    def __init__(self, flow: str = "Handmade") -> None:
        self.events: list[dict[str, Any]] = []
        self.flow = flow
        self._calls = 0
        self._add(0.0, "", "turn.started", flow=flow, message=None)

    def _add(self, at: float, path: str, kind: str, **fields: Any) -> None:
        self.events.append({"run_id": "handmade", "session_id": "s", "offset": at,
                            "time": 1_000.0 + at, "path": path, "type": kind, **fields})

    def fork(self, at: float, caller: str, barrier: str, branches: list[tuple[str, str]],
             *, limit: int | None = None, after: dict[str, list[str]] | None = None,
             step: str = "Stage") -> Timeline:
        requests = []
        for index, (path, key) in enumerate(branches):
            request: dict[str, Any] = {"index": index, "path": path, "step": step, "key": key,
                                       "params": None, "user_message": None}
            if after is not None and key in after:
                request["after"] = after[key]
            requests.append(request)
        self._add(at, caller, "barrier.forked", barrier=barrier, caller_step="Root",
                  requests=requests, policy="retain-successes", checkpoint="none",
                  max_concurrency=limit, branch_timeout=None, token_budget=None,
                  base="canonical")
        return self

    def branch(self, path: str, key: str, barrier: str, start: float, end: float,
               calls: list[tuple[str, float, float]] | None = None,
               *, rejected: bool = False) -> Timeline:
        """A branch running ``start``..``end``; ``calls`` (kind, start, end) default to one
        model call over the whole of it."""
        self._add(start, path, "branch.started", barrier=barrier, index=0, key=key,
                  step="Stage")
        for kind, begin, finish in calls if calls is not None else [("model", start, end)]:
            self.call(path, kind, begin, finish)
        if rejected:
            self._add(end, path, "branch.rejected", barrier=barrier, index=0, key=key,
                      error={"type": "E", "code": "internal", "message": "x", "extra": {}},
                      cancelled=False, started=True)
        else:
            self._add(end, path, "branch.fulfilled", barrier=barrier, index=0, key=key,
                      output=key)
        return self

    def call(self, path: str, kind: str, start: float, end: float) -> Timeline:
        self._calls += 1
        if kind == "model":
            self._add(start, path, "model.started", step="Stage", call=self._calls, attempt=1,
                      model={}, messages=[], tools=[])
            self._add(end, path, "model.finished", step="Stage", call=self._calls, attempt=1,
                      latency=end - start, content="", tool_calls=[], input_tokens=1,
                      output_tokens=1, total_tokens=2, finish_reason="stop", accepted=True)
        else:
            call_id = f"t{self._calls}"
            self._add(start, path, "tool.started", step="Stage", name="tool", call_id=call_id,
                      args={})
            self._add(end, path, "tool.finished", step="Stage", name="tool", call_id=call_id,
                      status="success", outcome="handled", result=None)
        return self

    def join(self, at: float, caller: str, barrier: str) -> Timeline:
        self._add(at, caller, "join.published", barrier=barrier, target="canonical",
                  fields=[], discarded=[])
        return self

    def finish(self, at: float) -> list[dict[str, Any]]:
        self._add(at, "", "turn.finished", completed=True, reply=None)
        self.events.sort(key=lambda event: event["offset"])
        for seq, event in enumerate(self.events):
            event["seq"] = seq
        return self.events


def seed_pipelined() -> list[dict[str, Any]]:
    """The seed's PicoFlow version: two coordinator workers, A1→A2 and B1→B2."""
    t = Timeline().fork(0, "", "b0", [("0", "A"), ("1", "B")], step="Worker")
    t.branch("0", "A", "b0", 0, 2, calls=[])
    t.fork(0, "0", "0/b0", [("0.0", "A1")]).branch("0.0", "A1", "0/b0", 0, 1).join(1, "0", "0/b0")
    t.fork(1, "0", "0/b1", [("0.1", "A2")]).branch("0.1", "A2", "0/b1", 1, 2).join(2, "0", "0/b1")
    t.branch("1", "B", "b0", 0, 11, calls=[])
    t.fork(0, "1", "1/b0", [("1.0", "B1")]).branch("1.0", "B1", "1/b0", 0, 10)
    t.join(10, "1", "1/b0")
    t.fork(10, "1", "1/b1", [("1.1", "B2")]).branch("1.1", "B2", "1/b1", 10, 11)
    t.join(11, "1", "1/b1")
    return t.join(11, "", "b0").finish(11)


def seed_batched() -> list[dict[str, Any]]:
    """The seed's remark: A1 and B1 in one barrier, then A2 and B2."""
    t = Timeline().fork(0, "", "b0", [("0", "A1"), ("1", "B1")])
    t.branch("0", "A1", "b0", 0, 1).branch("1", "B1", "b0", 0, 10).join(10, "", "b0")
    t.fork(10, "", "b1", [("1:0", "A2"), ("1:1", "B2")])
    t.branch("1:0", "A2", "b1", 10, 11).branch("1:1", "B2", "b1", 10, 11).join(11, "", "b1")
    return t.finish(11)


def langgraph_flat(*, edges: bool) -> list[dict[str, Any]]:
    """The seed's flat LangGraph graph as the tracer records it: one barrier per superstep;
    with ``edges``, each task names the task it followed."""
    t = Timeline(flow="LangGraph").fork(0, "", "s1", [("0", "A1"), ("1", "B1")])
    t.branch("0", "A1", "s1", 0, 1).branch("1", "B1", "s1", 0, 10).join(10, "", "s1")
    after = {"A2": ["A1"], "B2": ["B1"]} if edges else None
    t.fork(10, "", "s2", [("1:0", "A2"), ("1:1", "B2")], after=after)
    t.branch("1:0", "A2", "s2", 10, 11).branch("1:1", "B2", "s2", 10, 11).join(11, "", "s2")
    return t.finish(11)
