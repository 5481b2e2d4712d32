"""The fork plan: requests checked and normalised into branches, before anything runs.

Every configuration error — an unknown step, a repeated step class without keys, two
requests with one key, params that are not JSON or fail the step's schema — raises here,
so a bad barrier never starts a single branch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from pydantic import ValidationError

from ..errors import ParallelConfigurationError, ParallelDuplicateKeyError
from ..jsonutil import json_copy, lone_surrogate_in
from ._host import BarrierHost, StepHost
from .types import RunStepRequest

_FIELDS = frozenset({"step", "key", "params", "user_message"})


class PlannedBranch(NamedTuple):
    """One request, validated: the registered step, its key, frozen params and message.

    A named tuple, not a dataclass: one is built per branch, on the fork's hot path."""

    step: StepHost
    name: str
    """The step's registered name (read once: every event of the branch names it)."""
    key: str
    params: Mapping[str, Any]
    message: str | None


def plan_branches(
    host: BarrierHost, requests: Sequence[RunStepRequest | Mapping[str, Any]]
) -> list[PlannedBranch]:
    """The branches of a barrier in request order; configuration errors raise."""
    if not requests:
        raise ParallelConfigurationError("run_steps() needs at least one request.")
    items = [raw if type(raw) is RunStepRequest else _request(raw) for raw in requests]
    # A fan-out names few distinct steps: each is looked up (and asked for its params
    # schema) once, not once per request.
    resolved: dict[Any, _Resolved] = {}
    steps: list[_Resolved] = []
    counts: dict[str, int] = {}
    for item in items:
        try:
            entry = resolved.get(item.step)
        except TypeError:  # not hashable: looked up each time (require_step says why not)
            entry = _resolve(host, item.step)
        else:
            if entry is None:
                entry = resolved[item.step] = _resolve(host, item.step)
        steps.append(entry)
        counts[entry.name] = counts.get(entry.name, 0) + 1
    out = []
    seen: dict[str, int] = {}
    for index, (item, entry) in enumerate(zip(items, steps, strict=True)):
        step, name = entry.step, entry.name
        key = item.key
        # A key given as non-blank text (most requests of a fan-out) is that text trimmed;
        # _key decides the rest (a missing, blank or non-text key).
        if type(key) is not str or not (key := key.strip()):
            key = _key(item, name, counts[name])
        if key in seen:
            raise ParallelDuplicateKeyError(
                f"Requests {seen[key]} and {index} share the branch key '{key}'.",
                extra={"key": key, "indices": [seen[key], index]},
            )
        seen[key] = index
        if not key.isascii():  # ASCII text cannot hold a lone surrogate
            _check_text(f"The key of request {index}", key)
        if item.user_message and not item.user_message.isascii():
            _check_text(f"The user_message of branch '{key}'", item.user_message)
        params = item.params
        frozen: Mapping[str, Any] | None
        if entry.has_schema:
            frozen = freeze(_validate_params(step, key, params))
        elif not params:
            frozen = _NO_PARAMS  # most requests: nothing to copy or check
        elif (frozen := _flat(params)) is None:
            frozen = freeze(_validate_params(step, key, params))
        # The named tuple's own __new__ is a Python frame per branch: made as it makes one.
        out.append(_new_tuple(PlannedBranch, (step, name, key, frozen, item.user_message)))
    return out


_new_tuple = tuple.__new__

_FLAT_KINDS = frozenset({str, int, float, bool, type(None)})
_TEXT = frozenset({str})


def _flat(params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A fan-out's usual params — a dict of a few ASCII texts, numbers, booleans and
    nulls — frozen as they are: the JSON round trip that checks any other params would give
    back an equal dict. None for anything else (left to that check)."""
    if type(params) is not dict or len(params) > _FLAT_ITEMS:
        return None
    # Set operations over map(type, ...): the checks run in C, once per branch of a fork.
    kinds = set(map(type, params.values()))
    if not _FLAT_KINDS.issuperset(kinds) or not _TEXT.issuperset(map(type, params)) \
            or not "".join(params).isascii():
        return None
    if str in kinds and not "".join(v for v in params.values() if type(v) is str).isascii():
        return None
    if float in kinds and not all(
            v == v and v not in (_INF, -_INF) for v in params.values() if type(v) is float):
        return None
    return MappingProxyType(dict(params))


_FLAT_ITEMS = 32
_INF = float("inf")


class _Resolved(NamedTuple):
    """A request's step as registered, its name and whether it declares a params schema."""

    step: StepHost
    name: str
    has_schema: bool


def _resolve(host: BarrierHost, target: Any) -> _Resolved:
    try:
        step = host.require_step(target)
    except Exception as exc:
        raise ParallelConfigurationError(str(exc)) from exc
    return _Resolved(step, step.name, step.parallel_params_schema() is not None)


_NO_PARAMS: Mapping[str, Any] = MappingProxyType({})
"""The params of every request without any (read-only, so one is shared)."""


def _request(raw: RunStepRequest | Mapping[str, Any]) -> RunStepRequest:
    if isinstance(raw, RunStepRequest):
        return raw
    if isinstance(raw, Mapping):
        if set(raw) - _FIELDS or "step" not in raw:
            raise ParallelConfigurationError(
                f"A run_steps() request takes step, key, params, user_message; got {sorted(raw)}."
            )
        return RunStepRequest(**raw)
    raise ParallelConfigurationError(f"Not a run_steps() request: {raw!r}.")


def _check_text(what: str, text: str) -> None:
    """Refuse text no session, event or page could hold (two keys differing only there
    would look alike everywhere they are shown)."""
    problem = lone_surrogate_in(text)  # ASCII text: one isascii()
    if problem:
        raise ParallelConfigurationError(f"{what} has {problem}.")


def _key(item: RunStepRequest, name: str, repeats: int) -> str:
    """The branch key: the request's (trimmed), else the step name when it is unique."""
    if item.key is not None and not isinstance(item.key, str):
        raise ParallelConfigurationError(
            f"A branch key must be a string, got {type(item.key).__name__} {item.key!r}.")
    key = item.key.strip() if isinstance(item.key, str) else None
    if key:
        return key
    if repeats > 1:
        raise ParallelConfigurationError(
            f"Step '{name}' appears {repeats} times in one barrier: every request of a "
            "repeated step needs a non-empty key."
        )
    return name


def _validate_params(
    step: StepHost, key: str, params: Mapping[str, Any] | None
) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json_copy(dict(params or {}), f"params of branch '{key}'")
    except Exception as exc:
        raise ParallelConfigurationError(str(exc)) from exc
    schema = step.parallel_params_schema()
    if schema is None:
        return data
    try:
        validated: dict[str, Any] = schema.model_validate(data).model_dump(mode="json")
        return validated
    except ValidationError as exc:
        raise ParallelConfigurationError(
            f"params of branch '{key}' ({step.name}) are invalid: {exc.error_count()} error(s): "
            + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()),
            extra={"key": key, "errors": exc.errors(include_url=False)},
        ) from None


def freeze(value: Any) -> Any:
    """A read-only copy: params are shared by reference with the branch, which may not
    change them."""
    kind = type(value)
    if kind is dict:
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if kind is list:
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain JSON again (for events and outputs)."""
    kind = type(value)
    # Type checks first: an isinstance against the Mapping ABC costs more than the copy
    # of a fan-out's small params.
    if kind is MappingProxyType or kind is dict:
        plain = dict(value)
        if _FLAT_KINDS.issuperset(map(type, plain.values())):
            return plain
        return {k: thaw(v) for k, v in plain.items()}
    if kind is tuple:
        return [thaw(v) for v in value]
    if kind in _FLAT_KINDS:
        return value
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value
