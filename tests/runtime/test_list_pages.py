"""Per-branch lists in pages: a join's inputs, completion order, discarded branches and
provenance, and a cancellation's paths, are carried by their event's first page (with
``counts``) and ``list.continued`` events right after it, so that no event grows with a
fan-out's width; both folds read them as the same lists unpaged (the shape of every file
recorded before pages existed)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import CancelToken, ParallelConfig, Step, StepChannels
from runtime import events as ev
from runtime.events import MemorySink, dump_event, fold, read_jsonl, runs_of
from runtime.events import values as ev_values
from runtime.integrations.otel import spans_of
from tests.contract.node_fold import first_difference, node_exports
from tests.golden.export_fold import export_run
from tests.golden.goldens import BY_NAME
from tests.runtime.barrier_helpers import U, branch_step, run_body
from tests.runtime.helpers import make_engine

pytestmark = pytest.mark.anyio

WIDE = 10_000
RUNNING = 2_000
LIMIT = 64 * 1024


def _unpaged(events: list[ev.Event]) -> list[ev.Event]:
    """``events`` as a recorder without list pages writes them: each list whole on its
    event, no ``counts``, no ``list.continued``; sequence numbers from 0."""
    out: list[dict[str, Any]] = []
    for e in events:
        data = e.model_dump(mode="json")
        if isinstance(e, ev.ListContinued):
            head = out[-1]
            assert head["type"] == e.of and head["barrier"] == e.barrier
            assert len(head[e.name]) == e.first
            head[e.name].extend(e.items)
            continue
        data.pop("counts", None)
        out.append(data)
    return [ev.parse_event({**data, "seq": seq}) for seq, data in enumerate(out)]


def _without_seqs(value: Any) -> Any:
    """An export without what counts events (its seqs and offsets move with the pages)."""
    if isinstance(value, dict):
        return {k: _without_seqs(v) for k, v in value.items()
                if "seq" not in k and k not in ("snapshots", "last_seq")}
    if isinstance(value, list):
        return [_without_seqs(v) for v in value]
    return value


async def _wide_run(wide: int, running: int) -> list[ev.Event]:
    """A ``wide`` fork whose branches all contribute to one channel: ``running`` run, then
    the last of them to start cancels the rest (queued); every seventh that ran fails
    and every fifth ignores the token (closed when the grace period ends)."""
    token = CancelToken()
    started = 0

    async def work(step: Step, message: str | None) -> Any:
        nonlocal started
        inv = step.parallel_invocation()
        step.contribute_state("items", inv.index)
        started += 1
        if started == running:
            token.cancel("enough")
        if inv.index % 5 == 0:
            await anyio.sleep_forever()
        await inv.cancel.wait()
        if inv.index % 7 == 3:
            raise ValueError(f"no {inv.index}")
        return inv.index

    W = branch_step("W", work, channels={"items": StepChannels.append()})
    sink = MemorySink()

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": W, "key": f"w{i}"} for i in range(wide)],
                                     max_concurrency=running, cancel=token)

    engine, _ = make_engine()
    engine.sinks.append(sink)
    await run_body(body, [W], engine=engine, config=ParallelConfig(
        max_invocations=wide, cancellation_grace=U))
    return list(sink.events)


def _model(run: ev.RunModel) -> Any:
    """What the fold keeps of a run's barriers and branches, seqs aside."""
    return ([(b.id, b.outcome, b.discarded, sorted(b.discarded_at), b.provenance,
              [(r["inputs"], r["completion_order"], r["result"]) for r in b.reductions],
              sorted(b.applied)) for b in run.barriers.values()],
            [(i.path, i.status, i.output, i.lost_rights) for i in run.invocations.values()],
            run.state, run.conflicts, [a.message for a in run.anomalies])


async def test_a_10000_branch_cancelled_join_has_no_event_over_64_kb_and_folds_as_unpaged(
) -> None:
    events = await _wide_run(WIDE, RUNNING)
    assert max(len(dump_event(e).encode()) for e in events) <= LIMIT
    pages = [e for e in events if isinstance(e, ev.ListContinued)]
    assert {(e.of, e.name) for e in pages} >= {
        ("cancel.propagated", "running"), ("cancel.propagated", "queued"),
        ("cancel.grace_expired", "closed"), ("join.reduced", "inputs"),
        ("join.reduced", "completion_order"), ("join.published", "discarded")}
    # Every page follows its head at once: nothing comes between them.
    by_seq = {e.seq: e for e in events}
    for page in pages:
        assert by_seq[page.seq - 1].type in (page.of, "list.continued")
    whole = _unpaged(events)
    (propagated,) = [e for e in whole if isinstance(e, ev.CancelPropagated)]
    assert (len(propagated.running), len(propagated.queued)) == (RUNNING, WIDE - RUNNING)
    (published,) = [e for e in whole if isinstance(e, ev.JoinPublished)]
    assert len(published.discarded) > WIDE - RUNNING
    head = next(e for e in events if isinstance(e, ev.JoinPublished))
    assert head.counts == {"discarded": len(published.discarded)}
    assert "counts" not in published.model_dump(mode="json")
    mine, theirs = fold(events), fold(whole)
    assert not mine.anomalies
    assert _model(mine) == _model(theirs)
    assert sum(inv.lost_rights for inv in mine.invocations.values()) == len(
        next(e for e in whole if isinstance(e, ev.CancelGraceExpired)).closed) > 256


async def test_both_folds_and_the_otlp_spans_of_a_paged_join_are_those_unpaged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold exports (whose branch views list every sibling's writes, so grow with the
    square of the width) on 400 branches (over one fork page) in pages of 32 items, with
    enough of them closed at the grace period's end to page that list too."""
    monkeypatch.setattr(ev_values, "LIST_PAGE", 32)
    events = await _wide_run(400, 200)
    assert {(e.of, e.name) for e in events if isinstance(e, ev.ListContinued)} >= {
        ("cancel.propagated", "running"), ("cancel.grace_expired", "closed"),
        ("join.reduced", "inputs"), ("join.published", "discarded")}
    whole = _unpaged(events)
    mine, theirs = export_run(events, []), export_run(whole, [])
    assert "anomalies" not in mine and "anomalies" not in theirs
    assert _without_seqs(mine) == _without_seqs(theirs)
    node_paged, node_whole = node_exports([(events, []), (whole, [])])
    assert first_difference(mine, node_paged) is None
    assert first_difference(_without_seqs(node_paged), _without_seqs(node_whole)) is None

    # The OTLP export reads a paged event whole: the same spans as the unpaged record.
    def spans(record: list[ev.Event]) -> list[Any]:
        run = spans_of([e.model_dump(mode="json") for e in record])
        return sorted((s.name, sorted((k, str(v)) for k, v in s.attributes.items()))
                      for s in run.spans.values())
    assert spans(events) == spans(whole)


def test_a_list_page_holds_at_most_list_page_items_and_list_page_chars() -> None:
    assert ev.list_pages([]) == [[]]
    small = list(range(ev.LIST_PAGE * 2 + 3))
    assert [len(p) for p in ev.list_pages(small)] == [ev.LIST_PAGE, ev.LIST_PAGE, 3]
    big = [{"value": "x" * 20_000} for _ in range(5)]
    assert [len(p) for p in ev.list_pages(big)] == [2, 2, 1]
    huge = [{"value": "x" * 60_000}, {}, {}]
    assert [len(p) for p in ev.list_pages(huge)] == [1, 2]
    heads, counts, rest = ev.paged_lists({"a": [1, 2], "b": []})
    assert (heads, counts, rest) == ({"a": [1, 2], "b": []}, None, [])


def test_the_paged_goldens_fold_as_their_unpaged_twins() -> None:
    """paged_cancellation and paged_conflict are cancellation and conflict recorded with
    pages of one item."""
    for paged, twin in (("paged_cancellation", "cancellation"), ("paged_conflict",
                                                                  "conflict")):
        (run,) = runs_of(read_jsonl(BY_NAME[paged].jsonl_path)).values()
        (old,) = runs_of(read_jsonl(BY_NAME[twin].jsonl_path)).values()
        assert any(isinstance(e, ev.ListContinued) for e in run)
        assert not any(isinstance(e, ev.ListContinued) for e in old)
        mine, whole = fold(run), fold(_unpaged(run))
        assert not mine.anomalies
        for a, b in ((mine, whole), (mine, fold(old))):
            for bid, barrier in a.barriers.items():
                other = b.barriers[bid]
                assert barrier.discarded == other.discarded
                assert barrier.provenance == other.provenance
                assert [(r["inputs"], r["completion_order"]) for r in barrier.reductions] == [
                    (r["inputs"], r["completion_order"]) for r in other.reductions]
            assert [(i.path, i.lost_rights) for i in a.invocations.values()] == [
                (i.path, i.lost_rights) for i in b.invocations.values()]


def test_a_page_out_of_order_or_of_nothing_held_is_an_anomaly() -> None:
    (run,) = runs_of(read_jsonl(BY_NAME["paged_cancellation"].jsonl_path)).values()
    at = next(i for i, e in enumerate(run) if isinstance(e, ev.ListContinued)
              and e.of == "join.published")
    page = run[at].model_dump(mode="json")
    wrong = [*run[:at], ev.parse_event({**page, "first": 5}), *run[at + 1:]]
    assert "barrier b0: join.published discarded continues from 5, not 1" in [
        a.message for a in fold(wrong).anomalies]
    stray = [*run[:at], ev.parse_event({**page, "of": "join.invalidated"}), *run[at + 1:]]
    assert any("no join.invalidated" in a.message for a in fold(stray).anomalies)
