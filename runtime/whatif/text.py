"""The what-if in sentences: how the totals differ, and the branches that move most."""

from __future__ import annotations

from typing import Any

NAMES = {"recorded": "as recorded", "supersteps": "under graph-wide supersteps",
         "local_barriers": "under local barriers"}
SAME = 0.025
"""Totals and starts closer than this share of the recorded total are "about the same"."""
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
    """Sentences for a :meth:`~runtime.whatif.WhatIf.as_dict` report: the totals, then the
    branches whose start moves most from the model the run was recorded under (local
    barriers; supersteps for a LangGraph run) to the other one, and why."""
    schedules = report["schedules"]
    recorded = schedules["recorded"]
    if not recorded["operations"]:
        return ["Nothing to schedule yet: the run has no recorded turn."]
    out = [_totals(schedules)]
    base, other = "local_barriers", "supersteps"
    if str(report.get("flow", "")).startswith("LangGraph"):
        base, other = other, base
    out.extend(_moved(schedules, base, other))
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
        if abs(delta) < max(SAME * base, 0.0005):
            how = "about the same"
        else:
            how = f"{seconds(abs(delta))} {'longer' if delta > 0 else 'shorter'}"
        extra = ""
        if name == "supersteps":
            extra = f", {schedules[name]['supersteps']} supersteps"
        parts.append(f"{NAMES[name].capitalize()}: {seconds(total)} ({how}{extra}).")
    return " ".join(parts)


def _moved(schedules: dict[str, Any], base: str, name: str) -> list[str]:
    """Branches whose start moves from schedule ``base`` to ``name``, most first. Both are
    computed from the same durations, so a move is the models' difference, not noise."""
    schedule = schedules[name]
    before = {op["id"]: op for op in schedules[base]["operations"]}
    callers = {op["parent"] for op in schedule["operations"] if op["kind"] == "branch"}
    moves = []
    for op in schedule["operations"]:
        was = before.get(op["id"])
        if was is None or op["kind"] != "branch" or op["path"] in callers:
            continue
        shift = max(abs(op["start"] - was["start"]), abs(op["end"] - was["end"]))
        if shift >= max(SAME * schedules["recorded"]["total"], 0.0005):
            moves.append((shift, op, was))
    moves.sort(key=lambda item: -item[0])
    waits, base_waits = _starting_waits(schedule), _starting_waits(schedules[base])
    out = []
    for shift, op, was in moves[:MOVED_SHOWN]:
        edge = "start" if abs(op["start"] - was["start"]) >= shift / 2 else "end"
        text = (f"{NAMES[name].capitalize()}, {_name(op)} would {edge} at "
                f"{seconds(op[edge])} instead of {seconds(was[edge])}")
        wait = waits.get(op["path"])
        if wait is not None:
            text += f": it waits {_wait(wait)}"
        elif op["path"] in base_waits:
            text += f": {NAMES[base]} it waits {_wait(base_waits[op['path']])}"
        out.append(text + ".")
    if len(moves) > MOVED_SHOWN:
        out.append(f"{len(moves) - MOVED_SHOWN} more branches start or end at another time "
                   f"{NAMES[name]}.")
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
