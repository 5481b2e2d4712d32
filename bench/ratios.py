"""Ratios of interleaved benchmark rounds, shared by the benchmarks that print them.

Every variant runs once per round, so drift on a shared machine hits both sides of a
round's ratio alike: a ratio is the median of the per-round ratios, and its spread (the
quartiles of those ratios) says how far one run can be trusted.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio


def per_round(samples: Mapping[str, Sequence[float]], top: str, bottom: str) -> list[float]:
    """``top / bottom`` for each round."""
    return [a / b for a, b in zip(samples[top], samples[bottom], strict=True)]


def ratio(samples: Mapping[str, Sequence[float]], top: str, bottom: str) -> float:
    """Median of the per-round ratios."""
    return statistics.median(per_round(samples, top, bottom))


def spread(samples: Mapping[str, Sequence[float]], top: str, bottom: str,
           digits: int = 2) -> str:
    """The per-round ratios' quartiles, ``[q1-q3]`` (the whole range under four rounds)."""
    values = per_round(samples, top, bottom)
    low, high = (statistics.quantiles(values, n=4)[::2] if len(values) >= 4
                 else (min(values), max(values)))
    return f"[{low:.{digits}f}-{high:.{digits}f}]"


def interleaved(reps: int, variants: Mapping[str, Callable[[], Awaitable[float]]],
                ) -> dict[str, list[float]]:
    """Every variant once per round (each an async function answering its own elapsed
    seconds), rounds repeated: drift on a shared machine hits all variants alike, so
    per-round ratios stay comparable. Two warm-up rounds; a collection before each variant,
    so none pays for the garbage of the one before."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(reps + 2):
        for name, fn in variants.items():
            gc.collect()
            elapsed = anyio.run(fn)
            if round_ >= 2:
                samples[name].append(elapsed)
    return samples
