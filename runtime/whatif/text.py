"""The what-if in sentences: how the totals differ, and the branches that move most."""

from __future__ import annotations

from typing import Any

NAMES = {"recorded": "as recorded", "supersteps": "under graph-wide supersteps",
         "local_barriers": "under local barriers"}
MOVED_SHOWN = 3
"""Branches named per schedule: those whose start moves the most."""


def seconds(value: float) -> str:
    """``9.0 s``, ``450 ms``, ``0.8 ms``."""
    if abs(value) >= 1:
        return f"{value:.1f} s"
    if abs(value) >= 0.01:
        return f"{value * 1000:.0f} ms"
    return f"{value * 1000:.1f} ms"


def summary(report: dict[str, Any]) -> list[str]:
    """Sentences for a :meth:`~runtime.whatif.WhatIf.as_dict` report: the totals, then for
    each other schedule the branches whose start moves most against the recorded run and
    why."""
    schedules = report["schedules"]
    recorded = schedules["recorded"]
    if not recorded["operations"]:
        return ["Nothing to schedule yet: the run has no recorded turn."]
    out = [_totals(schedules)]
    for name in ("supersteps", "local_barriers"):
        out.extend(_moved(name, schedules[name], recorded))
    joins = [wait for wait in recorded["waits"] if wait["at"] == "join"]
    if joins:
        wait = joins[0]
        out.append(f"As recorded, {wait['key'] or wait['path']} waits {_wait(wait)} at the "
                   f"join of {wait['barrier']}: what follows that join waits with it.")
    return out


def _totals(schedules: dict[str, Any]) -> str:
    base = schedules["recorded"]["total"]
    parts = [f"Recorded: {seconds(base)}."]
    for name in ("supersteps", "local_barriers"):
        total = schedules[name]["total"]
        delta = total - base
        if abs(delta) < max(0.01 * base, 0.0005):
            how = "about the same"
        else:
            how = f"{seconds(abs(delta))} {'longer' if delta > 0 else 'shorter'}"
        extra = ""
        if name == "supersteps":
            extra = f", {schedules[name]['supersteps']} supersteps"
        parts.append(f"{NAMES[name].capitalize()}: {seconds(total)} ({how}{extra}).")
    return " ".join(parts)


def _moved(name: str, schedule: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    before = {op["id"]: op for op in recorded["operations"]}
    callers = {op["parent"] for op in schedule["operations"] if op["kind"] == "branch"}
    moves = []
    for op in schedule["operations"]:
        was = before.get(op["id"])
        if was is None or op["kind"] != "branch" or op["path"] in callers:
            continue
        shift = op["start"] - was["start"]
        if abs(shift) >= max(0.01 * recorded["total"], 0.0005):
            moves.append((abs(shift), op, was))
    moves.sort(key=lambda item: -item[0])
    waits = _starting_waits(schedule)
    recorded_waits = _starting_waits(recorded)
    out = []
    for _, op, was in moves[:MOVED_SHOWN]:
        text = (f"{NAMES[name].capitalize()}, {_name(op)} would start at "
                f"{seconds(op['start'])} instead of {seconds(was['start'])}")
        wait = waits.get(op["path"])
        if wait is not None:
            text += f": it waits {_wait(wait)}"
        elif op["start"] < was["start"] and op["path"] in recorded_waits:
            text += f": as recorded, it waited {_wait(recorded_waits[op['path']])}"
        out.append(text + ".")
    if len(moves) > MOVED_SHOWN:
        out.append(f"{len(moves) - MOVED_SHOWN} more branches move {NAMES[name]}.")
    return out


def _starting_waits(schedule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per branch, the longest wait that held its start (not a wait at its join)."""
    out: dict[str, dict[str, Any]] = {}
    for wait in schedule["waits"]:
        if wait["at"] != "join":
            out.setdefault(wait["path"], wait)
    return out


def _wait(wait: dict[str, Any]) -> str:
    text = seconds(wait["wait"])
    if wait["for_keys"]:
        text += f" for {', '.join(wait['for_keys'])}"
    if wait["at"] == "superstep":
        text += f" at superstep {wait['superstep']}" if wait["superstep"] else " at a superstep"
    elif wait["at"] == "slot":
        text += " for a slot of its barrier"
    return text


def _name(op: dict[str, Any]) -> str:
    return op["key"] or op["path"] or "the top level"
