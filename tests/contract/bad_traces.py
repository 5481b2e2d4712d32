"""Bad event traces both folds must survive alike: ``python tests/contract/bad_traces.py``.

Writes ``tests/js/bad_traces.json`` (``--check``: compares instead). The node test
``tests/js/fold_anomalies.test.mjs`` folds those traces with the browser's fold, and
``tests/contract/test_fold_anomalies.py`` with the Python fold (and checks that the
committed file is current and that both folds export the same). Every event is valid on
its own — it parses strictly; what is wrong is where it stands: a barrier never forked, a
branch never announced, a repeat or a jump in ``seq``, a fork that breaks the path rules,
an event after the ``run.interrupted`` that ended the run. Each trace lists the anomalies
both folds must record, in order, and (when it is not ``finished``) the run status they
must end with; neither may raise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the checkout is not on sys.path yet
    sys.path.insert(0, str(ROOT))

from runtime import events as ev  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "js" / "bad_traces.json"
ERR: dict[str, Any] = {"type": "E", "code": "boom", "message": "boom", "extra": {}}
FINISHED: dict[str, Any] = {"success": True, "completed": False, "message": "done",
                            "content_type": "text/plain"}


class Run:
    """A trace under construction: envelopes filled in, ``seq`` counting up by default."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[dict[str, Any]] = []
        self.add("turn.started", flow="BadFlow", message="go")
        self.add("session.loaded", new_session=True, revision=0, current_step="Top",
                 steps={"Top": {"a": 1}}, context={}, tokens={})

    def add(self, type_: str, path: str = "", seq: int | None = None, **fields: Any) -> None:
        """Append one event (``seq``: the next index unless given)."""
        n = len(self.events) if seq is None else seq
        self.events.append({"v": 1, "run_id": self.run_id, "session_id": "bad", "seq": n,
                            "time": 1798761600.0 + n / 10, "offset": n / 10, "path": path,
                            "type": type_, **fields})

    def fork(self, barrier: str, paths: list[str], path: str = "",
             base: str | None = None) -> None:
        """A ``barrier.forked`` from ``path`` (base: its caller, unless given)."""
        requests = [{"index": i, "path": p, "step": "W", "key": f"k{i}", "params": {},
                     "user_message": None} for i, p in enumerate(paths)]
        self.add("barrier.forked", path, barrier=barrier, caller_step="Top", requests=requests,
                 policy="retain-successes", checkpoint="none", max_concurrency=None,
                 branch_timeout=None, token_budget=None, base=base or path or "canonical")

    def interrupt(self, silent_for: float = 30.0) -> None:
        """The ``run.interrupted`` a dashboard records after ``silent_for`` seconds of silence."""
        last = self.events[-1]
        self.events.append(ev.interruption(
            last, now=last["time"] + silent_for, silent_for=silent_for,
            reason=f"no events or heartbeats for {silent_for:g} s").model_dump(mode="json"))

    def trace(self, about: str, anomalies: list[tuple[int, str]],
              status: str = "finished") -> dict[str, Any]:
        """The finished trace with what it is about, the anomalies it must fold to and (when
        not ``finished``) the run status."""
        return {"about": about, "events": self.events,
                "anomalies": [{"seq": seq, "message": text} for seq, text in anomalies],
                **({} if status == "finished" else {"status": status})}


def unknown_barrier() -> dict[str, Any]:
    run = Run("bad-barrier")
    named = ["join.reduced", "join.published", "join.invalidated", "checkpoint.saved",
             "checkpoint.failed", "cancel.requested", "cancel.propagated",
             "cancel.grace_expired"]
    run.add("join.reduced", barrier="b9", step="W", field="n", channel="sum", initial=0,
            inputs=[{"path": "0", "key": "k0", "value": 1}], completion_order=["0"], result=1)
    run.add("join.published", barrier="b9", target="canonical", discarded=[],
            fields=[{"step": "W", "field": "x", "value": 1, "deleted": False, "writer": "0"}])
    run.add("join.invalidated", barrier="b9", error=ERR, provenance=[])
    run.add("checkpoint.saved", barrier="b9", revision=2)
    run.add("checkpoint.failed", barrier="b9", error=ERR)
    run.add("cancel.requested", barrier="b9", reason="deadline")
    run.add("cancel.propagated", barrier="b9", running=["0"], queued=[])
    run.add("cancel.grace_expired", barrier="b9", closed=["0"])
    run.add("turn.finished", **FINISHED)
    return run.trace("every event that names a barrier, for a barrier that was never forked",
                     [(2 + i, f"{kind} for unknown barrier b9") for i, kind in enumerate(named)])


def unknown_invocation() -> dict[str, Any]:
    run = Run("bad-branch")
    run.add("branch.started", "7", barrier="b0", index=0, key="k0", step="W")
    run.add("state.replaced", "7", step="W", field="x", value=1, base=None, draft=True)
    run.add("state.contributed", "7", step="W", field="n", value=1, order=0, draft=True,
            result=1)
    run.add("state.removed", "7", step="W", field="y", base=2, draft=True)
    run.fork("7/b0", ["7.0"], path="7")  # seq 6
    run.add("branch.started", "7.0", barrier="7/b0", index=0, key="k0", step="W")
    run.add("state.replaced", "7.0", step="W", field="z", value=3, base=None, draft=True)
    run.add("branch.fulfilled", "7.0", barrier="7/b0", index=0, key="k0", output="ok")
    run.add("join.published", "7", barrier="7/b0", target="caller-scope", discarded=[],
            fields=[{"step": "W", "field": "z", "value": 3, "deleted": False,
                     "writer": "7.0"}])
    run.add("branch.fulfilled", "7", barrier="b0", index=0, key="k0", output="ok")
    run.add("branch.rejected", "8", barrier="b0", index=1, key="k1", error=ERR,
            cancelled=False, started=True)
    run.add("turn.finished", **FINISHED)
    return run.trace(
        "branch events and drafts on paths no fork announced, and a fork from one: its "
        "branch still folds, over a fork-time base the events do not tell (empty)",
        [(2, "unknown branch 7"), (3, "draft on unknown invocation 7"),
         (4, "draft on unknown invocation 7"), (5, "draft on unknown invocation 7"),
         (6, "fork from unknown invocation 7"), (11, "unknown branch 7"),
         (12, "unknown branch 8")])


def sequence() -> dict[str, Any]:
    run = Run("bad-seq")
    run.fork("b0", ["0", "1"])  # seq 2
    run.add("branch.started", "0", barrier="b0", index=0, key="k0", step="W")
    run.events.append(dict(run.events[-1]))  # seq 3 again: a resent event, ignored
    run.add("state.replaced", "0", seq=4, step="W", field="x", value=1, base=None, draft=True)
    run.add("state.replaced", "0", seq=6, step="W", field="x", value=2, base=1, draft=True)
    # seq 5 arrives after 6: ignored, so x stays 2
    run.add("state.replaced", "0", seq=5, step="W", field="x", value=99, base=1, draft=True)
    run.add("branch.fulfilled", "0", seq=9, barrier="b0", index=0, key="k0", output="ok")
    run.add("join.published", seq=10, barrier="b0", target="canonical", discarded=[],
            fields=[{"step": "W", "field": "x", "value": 2, "deleted": False, "writer": "0"}])
    run.add("turn.finished", seq=11, **FINISHED)
    return run.trace("a resent event and a late one are ignored; a jump in seq is recorded "
                     "as the events missing",
                     [(6, "events 5..5 missing"), (9, "events 7..8 missing")])


def fork_rules() -> dict[str, Any]:
    run = Run("bad-fork")
    run.fork("b0", ["0"])  # seq 2
    run.fork("b0", ["0"])  # the same barrier id and path again
    run.fork("b1", [""], base="0")  # a root barrier whose base is a branch, over the top level
    run.fork("0/b0", ["0"], path="0")  # a branch that is its own caller: a cycle of bases
    run.add("state.replaced", "0", step="W", field="x", value=1, base=None, draft=True)
    run.add("branch.fulfilled", "0", barrier="0/b0", index=0, key="k0", output="ok")
    run.add("turn.finished", **FINISHED)
    return run.trace(
        "a barrier id forked twice, a fork whose base is not its caller, and request paths "
        "that are already invocations, down to a branch that is its own caller",
        [(3, "barrier b0 forked again"), (3, "barrier b0 reuses path 0"),
         (4, "barrier b1 has base 0, not canonical"), (4, "barrier b1 reuses path "),
         (5, "barrier 0/b0 reuses path 0")])


def after_interruption() -> dict[str, Any]:
    run = Run("bad-after-interruption")
    run.fork("b0", ["0", "1"])  # seq 2
    run.add("branch.started", "0", barrier="b0", index=0, key="k0", step="W")
    run.add("branch.started", "1", barrier="b0", index=1, key="k1", step="W")
    run.add("branch.fulfilled", "0", barrier="b0", index=0, key="k0", output="ok")
    run.interrupt()  # seq 6: branch 1 was running, b0 open
    # The executor was not dead after all: what it sends now is not applied.
    run.add("state.replaced", "1", step="W", field="x", value=1, base=None, draft=True)
    run.add("branch.fulfilled", "1", barrier="b0", index=1, key="k1", output="late")
    run.add("join.published", barrier="b0", target="canonical", discarded=[],
            fields=[{"step": "W", "field": "x", "value": 1, "deleted": False, "writer": "1"}])
    run.add("turn.finished", seq=11, **FINISHED)
    run.add("run.interrupted", seq=12, reason="still silent", silent_for=60.0)  # again
    return run.trace(
        "events after the run.interrupted that ended the run (a late executor, a second "
        "interruption) are not applied: the run stays interrupted, branch 1 running",
        [(7, "state.replaced after run.interrupted"),
         (8, "branch.fulfilled after run.interrupted"),
         (9, "join.published after run.interrupted"),
         (11, "events 10..10 missing"), (11, "turn.finished after run.interrupted"),
         (12, "run.interrupted after run.interrupted")],
        status="interrupted")


def interrupted_after_the_end() -> dict[str, Any]:
    run = Run("bad-interrupted-after-the-end")
    run.add("turn.finished", **FINISHED)
    # What interruption() refuses to build, as a racing server might still store it.
    run.add("run.interrupted", reason="no events or heartbeats for 30 s", silent_for=30.0)
    return run.trace("a run.interrupted after turn.finished is not applied: the run stays "
                     "finished", [(3, "run.interrupted after turn.finished")])


def interrupted_after_a_stop() -> dict[str, Any]:
    run = Run("bad-interrupted-after-a-stop")
    run.add("turn.cancelled", reason="stop pressed", requested_by="ada", revision=0)
    # A watchdog that missed the stop (what interruption() refuses to build).
    run.add("run.interrupted", reason="no events or heartbeats for 30 s", silent_for=30.0)
    return run.trace("a run.interrupted after turn.cancelled is not applied: the run stays "
                     "cancelled", [(3, "run.interrupted after turn.cancelled")],
                     status="cancelled")


def unfoldable_contributions() -> dict[str, Any]:
    run = Run("bad-contribution")
    run.events[1]["steps"] = {"Top": {"a": 1}, "W": {
        "log": {"not": "a list"}, "big": {"truncated": True, "size": 70000, "preview": "[0, 1"}}}
    run.fork("b0", ["0"])  # seq 2
    run.add("branch.started", "0", barrier="b0", index=0, key="k0", step="W")
    for order, (name, channel, value) in enumerate(
            [("log", "append", 1), ("big", "append", 2), ("n", "median", 1), ("s", "sum", "x"),
             ("k", "keyed_by_branch", 5)], 1):
        run.add("state.contributed", "0", step="W", field=name, value=value, order=order,
                draft=True, channel=channel, result=None)  # seq 3 + order
    run.add("branch.fulfilled", "0", barrier="b0", index=0, key="k0", output="ok")
    run.add("join.reduced", barrier="b0", step="W", field="k", channel="keyed_by_branch",
            initial={}, inputs=[{"truncated": True, "size": 70000, "preview": "{\"key\""}],
            completion_order=["0"], result={"k0": 5})
    run.add("join.published", barrier="b0", target="canonical", discarded=[],
            fields=[{"step": "W", "field": "k", "value": {"k0": 5}, "deleted": False,
                     "writer": None}])
    run.add("turn.finished", **FINISHED)
    return run.trace(
        "contributions naming a channel the fold cannot reduce onto the branch's view: a "
        "list channel over an object, an unknown channel, a string summed; a field only "
        "ever carried truncated stays truncated, and a good one still folds; a reduction "
        "input recorded without its path (a foreign writer truncated the whole record) "
        "names no contributor",
        [(4, "contribution to W.log: append() channel needs a list"),
         (6, 'contribution to W.n: no fold for channel "median"'),
         (7, "contribution to W.s: sum() channel needs numbers")])


def bad_traces() -> dict[str, dict[str, Any]]:
    """Every bad trace by name."""
    return {"unknown-barrier": unknown_barrier(), "unknown-invocation": unknown_invocation(),
            "sequence": sequence(), "fork-rules": fork_rules(),
            "after-interruption": after_interruption(),
            "interrupted-after-the-end": interrupted_after_the_end(),
            "interrupted-after-a-stop": interrupted_after_a_stop(),
            "unfoldable-contributions": unfoldable_contributions()}


def dumps(traces: dict[str, dict[str, Any]]) -> str:
    """The committed text: one event per line, so a diff shows which changed."""
    lines = ["{"]
    for n, (name, trace) in enumerate(traces.items()):
        lines.append(f" {json.dumps(name)}: {{")
        lines.append(f"  \"about\": {json.dumps(trace['about'])},")
        lines.append(f"  \"anomalies\": {json.dumps(trace['anomalies'])},")
        if "status" in trace:
            lines.append(f"  \"status\": {json.dumps(trace['status'])},")
        lines.append("  \"events\": [")
        lines += [f"   {json.dumps(e)}{',' if i < len(trace['events']) - 1 else ''}"
                  for i, e in enumerate(trace["events"])]
        lines.append("  ]")
        lines.append(" }" + ("," if n < len(traces) - 1 else ""))
    return "\n".join([*lines, "}"]) + "\n"


def main(argv: list[str]) -> int:
    """Write (or, with ``--check``, compare) ``tests/js/bad_traces.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = dumps(bad_traces())
    if args.check:
        same = OUT.exists() and OUT.read_text("utf-8") == text
        print(f"{OUT.name}: {'same' if same else 'DIFFERS'}")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
