"""Ratios of interleaved benchmark rounds, shared by the benchmarks that print them.

Every variant runs once per round, so drift on a shared machine hits both sides of a
round's ratio alike: a ratio is the median of the per-round ratios, and its spread (the
quartiles of those ratios) says how far one run can be trusted.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence


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
