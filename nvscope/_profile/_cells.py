"""Cells and JSON pieces of `nvscope._profile._report`'s rows: plain functions over a row's fields."""

from __future__ import annotations

import dataclasses
from typing import Any

from nvscope._core import OptionSet
from nvscope._measure import Numerics, RatioSummary, Segment, dict_of, numerics_dict, spec

__all__: list[str] = []


def _names(segments: tuple[Segment, ...] | None) -> tuple[str, ...] | None:
    return None if segments is None else tuple(s.scheduler for s in segments)


def _compile(segments: tuple[Segment, ...] | None) -> float | None:
    times = [s.compile_ms for s in segments or () if s.compile_ms is not None]
    return sum(times) if times else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _schedulers(segments: tuple[Segment, ...] | None) -> str:
    if segments is None:
        return "?"
    return "+".join(s.scheduler for s in segments) or "(none)"


def _timed_cells(ms: float | None, r: RatioSummary | None, instead: str | None) -> str:
    """A variant's cells of a row: its ms, ratio, interval and verdict (``instead`` of the verdict: why none)."""
    if instead is not None and instead[0].isupper():
        return f"{_ms(ms):>8} {'-':>6} {'':>13}  {instead:<22} "
    if r is None:
        return f"{_ms(ms):>8} {'-':>6} {'':>13}  {'not timed':<22} "
    return f"{_ms(ms):>8} {r.median:>6.3f} {f'{r.low:.3f}-{r.high:.3f}':>13}  {instead or r.verdict:<22} "


def _outputs_cell(row: Any, n: Numerics | None) -> str:
    again = row.default_repeat
    if again is not None and not again.ok:
        return f"DEFAULT NOT REPEATABLE: {again.detail}"
    return "-" if n is None else ("match" if n.ok else f"DIFFER: {n.detail}")


def _scheduler_change(r: Any) -> str:
    """``default -> options``, or the one list where the options kept the same schedulers."""
    default, options = _schedulers(r.default_segments), _schedulers(r.options_segments)
    return default if options == default else f"{default} -> {options}"


def _label(options: OptionSet) -> str:
    return spec(options) or "(no options)"


def _segments_dict(segments: tuple[Segment, ...] | None) -> list[dict[str, Any]] | None:
    return None if segments is None else [dataclasses.asdict(s) for s in segments]


def _segments(data: list[dict[str, Any]] | None) -> tuple[Segment, ...] | None:
    return None if data is None else tuple(Segment(**s) for s in data)


def _row_dict(r: Any) -> dict[str, Any]:
    return {
        "fusion": r.fusion, "phase": r.phase, "ops": list(r.ops), "calls": r.calls, "status": r.status,
        "default_ms": r.default_ms, "options_ms": r.options_ms, "ratio": dict_of(r.ratio),
        "schedulers": {k: None if v is None else list(v) for k, v in r.schedulers.items()},
        "compile_ms": r.compile_ms, "default_segments": _segments_dict(r.default_segments),
        "options_segments": _segments_dict(r.options_segments), "default_first_ms": r.default_first_ms,
        "options_first_ms": r.options_first_ms, "numerics": numerics_dict(r.numerics), "error": r.error,
        "reached": r.reached, "default_repeat": numerics_dict(r.default_repeat),
        "options_profiled": r.options_profiled, "torch_profiled": r.torch_profiled,
        "torch_status": r.torch_status, "torch_ms": r.torch_ms, "torch_ratio": dict_of(r.torch_ratio),
        "torch_numerics": numerics_dict(r.torch_numerics), "torch_error": r.torch_error,
    }


def _intervals(self: Any) -> str:
    """How the intervals were made: the fusions' family, each interval's own confidence, the confirmation."""
    families = []
    columns = (("options", [r.ratio for r in self.rows]), ("PyTorch", [r.torch_ratio for r in self.rows]))
    for column, ratios in columns:
        ratio = next((x for x in ratios if x is not None), None)
        n = 0 if ratio is None else ratio.screened or ratio.comparisons  # the first rounds' family
        if ratio is not None or (column == "options" and not self.torch):
            families.append((column, n))
    named = len(families) > 1
    confidence = "; ".join(
        (f"{column}: " if named else "")
        + (f"simultaneous 95% over the {n} fusion ratios judged together (each at {100 - 5 / n:.4g}%)"
           if n > 1 else "95% (one fusion ratio)" if n else "simultaneous 95%") for column, n in families) \
        or "simultaneous 95%"
    return ("the median's, between two order statistics of the ratios (the sign test's interval, exact for any "
            f"distribution); {confidence}; each verdict timed again in fresh rounds and kept only "
            "where both agree (the row then shows the fresh rounds' ratio; a note says which): a chance 'faster' "
            "or 'slower' on any fusion needs two chance misses, however many fusions the step runs")
