"""A fork's requests in pages: ``barrier.forked`` carries the first page and the count,
``barrier.requested`` the rest, so that no event grows with the fan-out's width; and a
fork recorded before pages existed (every request in its ``barrier.forked``, no count)
folds as it always did."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import CancelToken, ParallelConfig, Step
from runtime import events as ev
from runtime.events import MemorySink, dump_event, fold, read_jsonl, runs_of
from runtime.whatif import what_if
from runtime.whatif.operations import read
from tests.contract.node_fold import first_difference, node_exports
from tests.golden.export_fold import export_run
from tests.golden.goldens import BY_NAME
from tests.runtime.barrier_helpers import branch_step, run_body
from tests.runtime.helpers import make_engine

pytestmark = pytest.mark.anyio

WIDE = 10_000
LIMIT = 64 * 1024


def _request(index: int, params: Any, message: str | None = None) -> ev.BranchRequest:
    return ev.BranchRequest(index=index, path=str(index), step="S", key=f"k{index}",
                            params=params, user_message=message)


def _unpaged(events: list[ev.Event]) -> list[ev.Event]:
    """``events`` as a recorder without pages writes them: each fork's requests all in its
    ``barrier.forked``, no count, no ``barrier.requested``; sequence numbers from 0."""
    pages: dict[str, list[ev.BranchRequest]] = {}
    for e in events:
        if isinstance(e, ev.BarrierRequested):
            pages.setdefault(e.barrier, []).extend(e.requests)
    out: list[ev.Event] = []
    for e in events:
        if isinstance(e, ev.BarrierRequested):
            continue
        data = e.model_dump(mode="json")
        if isinstance(e, ev.BarrierForked):
            data.pop("count", None)
            data["requests"] += [r.model_dump(mode="json") for r in pages.get(e.barrier, [])]
        data["seq"] = len(out)
        out.append(ev.parse_event(data))
    return out


def _branches(run: ev.RunModel) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Every barrier's branches as the fold has them, seq numbers aside."""
    return [(b.id, [(p, (inv := run.invocations[p]).step, inv.key, inv.index, inv.status,
                     inv.output, inv.barrier) for p in b.branches])
            for b in run.barriers.values()]


async def test_a_10000_branch_fork_has_no_event_over_64_kb_and_folds_to_the_same_barrier(
) -> None:
    async def work(step: Step, message: str | None) -> Any:
        return step.parallel_invocation().index

    W = branch_step("W", work)
    sink = MemorySink()

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": W, "key": f"w{i}", "params": {"item": i}}
                                      for i in range(WIDE)])

    engine, _ = make_engine()
    engine.sinks.append(sink)
    await run_body(body, [W], engine=engine, config=ParallelConfig(max_invocations=WIDE))
    events = sink.events
    assert max(len(dump_event(e).encode()) for e in events) <= LIMIT
    (head,) = [e for e in events if isinstance(e, ev.BarrierForked)]
    pages = [e for e in events if isinstance(e, ev.BarrierRequested)]
    assert head.count == WIDE and 0 < len(head.requests) <= ev.FORK_PAGE
    # The pages follow the head at once, in order, before any branch starts.
    assert [e.seq for e in pages] == list(range(head.seq + 1, head.seq + 1 + len(pages)))
    assert [p.first for p in pages] == [len(head.requests) + sum(
        len(q.requests) for q in pages[:i]) for i in range(len(pages))]
    requests = [*head.requests, *(r for p in pages for r in p.requests)]
    assert [r.index for r in requests] == list(range(WIDE))
    started = [e.seq for e in events if isinstance(e, ev.BranchStarted)]
    assert min(started) > pages[-1].seq
    paged, whole = fold(events), fold(_unpaged(events))
    assert not paged.anomalies and not whole.anomalies
    assert _branches(paged) == _branches(whole)
    assert len(paged.barriers[head.barrier].branches) == WIDE
    assert paged.state == whole.state


async def _wide_fork_watched(monkeypatch: pytest.MonkeyPatch, cancel_at_head: bool
                             ) -> tuple[list[ev.Event], list[int], list[int]]:
    """A fork of 2,000 requests (the first hundred large, so its first page is cut by
    characters) watched by a task that wakes when its head is reported, and cancels the
    barrier then with ``cancel_at_head``: the turn's events, how many requests' params
    had been made when the head went out, and how many pages the watcher had seen."""
    from runtime.barrier import _driver

    made = [0]

    def counted(value: Any) -> Any:
        made[0] += 1
        return ev.safe_value(value)

    monkeypatch.setattr(_driver, "safe_value", counted)
    head = anyio.Event()
    token = CancelToken()
    made_at_head: list[int] = []
    pages_at_wake: list[int] = []

    class Watch(MemorySink):
        def receive(self, event: ev.Event) -> None:
            super().receive(event)
            if isinstance(event, ev.BarrierForked):
                made_at_head.append(made[0])
                head.set()

    sink = Watch()

    async def watcher() -> None:
        await head.wait()
        pages_at_wake.append(sum(isinstance(e, ev.BarrierRequested) for e in sink.events))
        if cancel_at_head:
            token.cancel("stop at the fork")

    async def work(step: Step, message: str | None) -> Any:
        return step.parallel_invocation().index

    W = branch_step("W", work)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([
            {"step": W, "key": f"w{i}", "params": {"text": "x" * (2_000 if i < 100 else 1)}}
            for i in range(2_000)], cancel=token)

    engine, _ = make_engine()
    engine.sinks.append(sink)
    async with anyio.create_task_group() as group:
        group.start_soon(watcher)
        await run_body(body, [W], engine=engine, config=ParallelConfig(max_invocations=2_000))
    return sink.events, made_at_head, pages_at_wake


async def test_a_wide_fork_s_head_goes_out_before_its_later_requests_are_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The head is cut from the first window of requests alone, and the loop turns between
    the pages: a watcher hears of a wide fork before the runtime has made the JSON of
    every request. The pages are those of the whole list, the first one cut by characters
    included, and all of them go before any branch starts."""
    events, made_at_head, pages_at_wake = await _wide_fork_watched(monkeypatch, False)
    (head,) = [e for e in events if isinstance(e, ev.BarrierForked)]
    later = [e for e in events if isinstance(e, ev.BarrierRequested)]
    assert head.count == 2_000 and len(head.requests) < ev.FORK_PAGE
    assert made_at_head == [ev.FORK_PAGE]
    assert pages_at_wake and pages_at_wake[0] < len(later)
    pages = [head.requests, *(e.requests for e in later)]
    assert pages == ev.fork_pages([r for page in pages for r in page])
    assert min(e.seq for e in events if isinstance(e, ev.BranchStarted)) > later[-1].seq


async def test_a_wide_fork_cancelled_while_its_pages_go_out_reports_them_all_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The token fires between two pages: every page is still reported, then the cancel
    request and whom it reached (every branch, queued), and no branch starts."""
    events, _, pages_at_wake = await _wide_fork_watched(monkeypatch, True)
    later = [e for e in events if isinstance(e, ev.BarrierRequested)]
    assert pages_at_wake and pages_at_wake[0] < len(later)
    requested = next(e for e in events if isinstance(e, ev.CancelRequested))
    assert requested.seq > later[-1].seq and requested.reason == "stop at the fork"
    (told,) = [e for e in events if isinstance(e, ev.CancelPropagated)]
    queued = [*told.queued, *(p for e in events if isinstance(e, ev.ListContinued)
                              and e.of == "cancel.propagated" and e.name == "queued"
                              for p in e.items)]
    assert told.running == [] and queued == [str(i) for i in range(2_000)]
    assert not any(isinstance(e, ev.BranchStarted) for e in events)
    run = fold(events)
    assert not run.anomalies
    (barrier,) = run.barriers.values()
    assert len(barrier.branches) == 2_000
    assert {run.invocations[p].status for p in barrier.branches} == {"rejected"}


async def test_two_wide_nested_forks_side_by_side_interleave_their_pages_and_fold_whole(
) -> None:
    """The loop turns between a fork's pages let its siblings run: two branches forking
    600 requests each report their pages interleaved. Each barrier's pages come in order,
    before any of its branches starts, and both folds (this one and the browser's) fold
    them whole."""
    async def leaf(step: Step, message: str | None) -> Any:
        return step.parallel_invocation().index

    Leaf = branch_step("Leaf", leaf)

    async def fork(step: Step, message: str | None) -> Any:
        batch = await step.run_steps([{"step": Leaf, "key": f"l{i}", "params": {"i": i}}
                                      for i in range(600)])
        return len(batch.fulfilled)

    Fork = branch_step("Fork", fork)
    sink = MemorySink()

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Fork, "key": "a"}, {"step": Fork, "key": "b"}])

    engine, _ = make_engine()
    engine.sinks.append(sink)
    await run_body(body, [Fork, Leaf], engine=engine,
                   config=ParallelConfig(max_invocations=2_000))
    events = sink.events
    heads = [e for e in events if isinstance(e, ev.BarrierForked) and e.count]
    assert len(heads) == 2
    order = [e.barrier for e in events if isinstance(e, ev.BarrierRequested)]
    assert order != sorted(order, key=order.index), "the pages did not interleave"
    for head in heads:
        mine = [e for e in events
                if isinstance(e, ev.BarrierRequested) and e.barrier == head.barrier]
        assert [e.first for e in mine] == sorted(e.first for e in mine)
        started = [e.seq for e in events
                   if isinstance(e, ev.BranchStarted) and e.path.startswith(head.path + ".")]
        assert len(started) == 600 and min(started) > mine[-1].seq
    run = fold(events)
    assert not run.anomalies
    assert sorted(len(b.branches) for b in run.barriers.values()) == [2, 600, 600]
    assert run.invocations["0"].output == run.invocations["1"].output == 600
    # The browser's fold agrees: after the last page of requests, and at the end.
    stops = [max(e.seq for e in events if isinstance(e, ev.BarrierRequested)), events[-1].seq]
    expected = export_run(list(events), stops)
    (got,) = node_exports([(events, stops)])
    assert got == expected, first_difference(expected, got)
    # So does the what-if, which reads the same pages.
    assert what_if([e.model_dump(mode="json") for e in events]).as_dict() == what_if(
        [e.model_dump(mode="json") for e in _unpaged(events)]).as_dict()


def test_a_page_holds_at_most_fork_page_requests_and_fork_page_chars_of_them() -> None:
    small = [_request(i, {"item": i}) for i in range(ev.FORK_PAGE * 2 + 3)]
    assert [len(p) for p in ev.fork_pages(small)] == [ev.FORK_PAGE, ev.FORK_PAGE, 3]
    assert ev.fork_pages(small[:5]) == [small[:5]]
    big = [_request(i, {"text": "x" * 20_000}, "m" * 5_000) for i in range(7)]
    pages = ev.fork_pages(big)
    assert [r for p in pages for r in p] == big
    assert [len(p) for p in pages] == [1] * 7  # two would be over FORK_PAGE_CHARS
    medium = [_request(i, {"text": "x" * 1_000}) for i in range(200)]
    pages = ev.fork_pages(medium)
    assert [r for p in pages for r in p] == medium and len(pages) > 1
    for page in pages:
        assert sum(len(r.model_dump_json()) for r in page) <= ev.FORK_PAGE_CHARS
    # One request larger than a page still goes, alone on its page.
    huge = [_request(0, {}), _request(1, {"text": "x" * 60_000}), _request(2, {})]
    assert [len(p) for p in ev.fork_pages(huge)] == [1, 1, 1]


def test_an_old_file_with_every_request_in_its_fork_folds_as_the_paged_one() -> None:
    """atomic_failure is the old shape (one barrier.forked, no count); paged_fork is the
    same flow and turn recorded with pages of two."""
    old = read_jsonl(BY_NAME["atomic_failure"].jsonl_path)
    new = read_jsonl(BY_NAME["paged_fork"].jsonl_path)
    (forked,) = [e for e in old if isinstance(e, ev.BarrierForked)]
    assert forked.count is None and len(forked.requests) == 3
    assert "count" not in forked.model_dump(mode="json")
    assert not any(isinstance(e, ev.BarrierRequested) for e in old)
    (head,) = [e for e in new if isinstance(e, ev.BarrierForked)]
    assert (head.count, len(head.requests)) == (3, 2)
    (old_run,), (new_run,) = runs_of(old).values(), runs_of(new).values()
    before, after = fold(old_run), fold(new_run)
    assert not before.anomalies and not after.anomalies
    assert _branches(before) == _branches(after)
    assert before.state == after.state
    assert _branches(fold(_unpaged(new_run))) == _branches(before)


def test_a_page_out_of_order_or_of_an_unknown_barrier_is_an_anomaly() -> None:
    (run,) = runs_of(read_jsonl(BY_NAME["paged_fork"].jsonl_path)).values()
    page = next(i for i, e in enumerate(run) if isinstance(e, ev.BarrierRequested))
    moved = run[page].model_dump(mode="json")
    wrong = [*run[:page], ev.parse_event({**moved, "first": 5}), *run[page + 1:]]
    assert [a.message for a in fold(wrong).anomalies] == ["barrier b0 requests from 5, not 2"]
    stray = [*run[:page], ev.parse_event({**moved, "barrier": "b9"}), *run[page + 1:]]
    assert "barrier.requested for unknown barrier b9" in [
        a.message for a in fold(stray).anomalies]


def test_the_what_if_of_a_paged_fork_is_that_of_the_same_fork_unpaged() -> None:
    (run,) = runs_of(read_jsonl(BY_NAME["paged_fork"].jsonl_path)).values()
    dicts = [e.model_dump(mode="json") for e in run]
    paged, whole = what_if(dicts).as_dict(), what_if(
        [e.model_dump(mode="json") for e in _unpaged(run)]).as_dict()
    assert paged == whole
    plan = read(dicts)
    assert plan.barriers["b0"].branches == ["0", "1", "2"]
    assert plan.barriers["b0"].keys == ["flight", "hotel", "car"]
