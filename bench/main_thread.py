"""What a chromium trace says of the page's main thread: its tasks, by the wall clock and by
the thread's own CPU time, and the JavaScript collector's pauses on it.

A task's wall time counts the time its thread was not running: on a machine whose cores the
server, its worker and the browser share, the system can suspend the page's thread mid-task,
and a ``longtask`` observer then reports a long task the page's work did not make. The
trace's thread time (``tdur``) tells the two apart. The collector's pauses are the trace's
``MinorGC`` (young generation) and ``MajorGC`` events; the forced collection a benchmark
makes to weigh the heap (``V8.GCLowMemoryNotification``) is left out, with its task.

    with traced(page) as trace: ...      # then summary(trace.events)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import Page

CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "v8", "v8.gc"]
LONG_MS = 50.0


@dataclass
class Trace:
    events: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def traced(page: Page) -> Iterator[Trace]:
    """Record a chromium trace of ``page``'s browser while the block runs."""
    browser = page.context.browser
    assert browser is not None
    trace = Trace()
    browser.start_tracing(page=page, categories=CATEGORIES)
    try:
        yield trace
    finally:
        data = json.loads(browser.stop_tracing())
        trace.events = data["traceEvents"] if isinstance(data, dict) else data


def summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The renderers' main-thread tasks and collector pauses in ``events`` (a trace's)."""
    threads = {(e["pid"], e["tid"]) for e in events
               if e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"}
    spans = [e for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) in threads]
    forced = [e for e in spans if e["name"] == "V8.GCLowMemoryNotification"]

    def weighing(task: dict[str, Any]) -> bool:
        return any(task["pid"] == f["pid"] and task["tid"] == f["tid"]
                   and task["ts"] <= f["ts"] < task["ts"] + task["dur"] for f in forced)

    tasks = [e for e in spans if e["name"] == "RunTask" and not weighing(e)]
    wall = sorted((e["dur"] / 1000 for e in tasks), reverse=True)
    cpu = sorted((e.get("tdur", 0) / 1000 for e in tasks), reverse=True)
    minor = [e["dur"] / 1000 for e in spans if e["name"] == "MinorGC"]
    major = [e["dur"] / 1000 for e in spans if e["name"] == "MajorGC"
             and "low memory" not in str(e.get("args", {}).get("type", ""))]
    return {
        "tasks": len(tasks),
        "long_wall": sum(1 for ms in wall if ms > LONG_MS),
        "long_cpu": sum(1 for ms in cpu if ms > LONG_MS),
        "top_wall": wall[:3], "top_cpu": cpu[:3],
        "minor_count": len(minor), "minor_total": sum(minor), "minor_max": max(minor, default=0.0),
        "major_count": len(major), "major_max": max(major, default=0.0),
    }


def described(s: dict[str, Any]) -> str:
    """``summary`` in two lines of the benchmark's report."""
    def ms(values: list[float]) -> str:
        return ", ".join(f"{v:.0f}" for v in values)

    return (f"  main thread (trace): {s['tasks']:,} tasks, {s['long_wall']} over {LONG_MS:.0f} ms "
            f"by the wall clock (longest {ms(s['top_wall'])} ms), {s['long_cpu']} by its own "
            f"CPU time (longest {ms(s['top_cpu'])} ms)\n"
            f"  collector pauses: {s['minor_count']} young-generation, {s['minor_total']:.0f} ms "
            f"in all, longest {s['minor_max']:.0f} ms; {s['major_count']} old-generation, "
            f"longest {s['major_max']:.0f} ms")
