"""What `nvscope.profile` reports: one row per fusion, a ranked table, JSON and a chart.

Plain data (frozen dataclasses), so a result can be saved with ``to_json()``, loaded again with
``ProfileResult.from_json()`` and printed or plotted elsewhere. matplotlib is imported only by ``plot()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nvscope._core import OptionSet
from nvscope._measure import (
    DEFAULT_TOLERANCES,
    Compiles,
    LoadableResult,
    Numerics,
    RatioSummary,
    Segment,
    compiles_dict,
    compiles_lines,
    figure_class,
    numerics_dict,
    numerics_from,
    options_dict,
    options_from,
)

__all__ = ["ProfileResult", "ProfileRow"]

VARIANTS = ("default", "options")


@dataclass(frozen=True)
class ProfileRow:
    """One fusion of the step, by its id (``"backward/nvFusion3"``), under the defaults and under the options.

    ``default_ms``/``options_ms``: median time of this fusion per call of the step (all its executions in one call
    summed) over the rounds; ``ratio``: the per-round ratio options/default (< 1: faster under the options), with its
    interval (one of the fusions' family, simultaneous at 95%) and verdict. ``default_segments``/``options_segments``:
    nvFuser's segments of the fusion's first execution in each case (scheduler, kernel, compile time), None where
    nothing could tell (`nvscope._measure._schedulers`).
    ``default_first_ms``/``options_first_ms``: wall time of the fusion's executions in the first call of each
    variant (where the options' kernels are compiled). ``numerics``: this fusion's outputs with only it under the
    options, against its outputs under the defaults. ``error``: the fusion failed under the options (it then ran
    again with its defaults, so the step went on): the first line of the error and nvscope's note. ``reached``:
    whether the options reached it (False: the catalog says none of them can change a fusion holding its ops, so it
    kept its default kernels). ``default_repeat``: this fusion's outputs in a second call of the step under the
    defaults against the first's; where they moved, its defaults are not repeatable and ``numerics`` means nothing.
    """

    fusion: str
    phase: str
    ops: tuple[str, ...]
    calls: int
    default_ms: float | None = None
    options_ms: float | None = None
    ratio: RatioSummary | None = None
    default_segments: tuple[Segment, ...] | None = None
    options_segments: tuple[Segment, ...] | None = None
    default_first_ms: float | None = None
    options_first_ms: float | None = None
    numerics: Numerics | None = None
    error: str | None = None
    reached: bool = True
    default_repeat: Numerics | None = None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The interval of `ratio` (simultaneous 95% with the other fusions'), or None when it was not timed."""
        return None if self.ratio is None else (self.ratio.low, self.ratio.high)

    @property
    def schedulers(self) -> dict[str, tuple[str, ...] | None]:
        """The scheduler of each segment, per variant: ``{"default": ("expr_eval", "pointwise"), "options": ...}``."""
        return {"default": _names(self.default_segments), "options": _names(self.options_segments)}

    @property
    def compile_ms(self) -> dict[str, float | None]:
        """nvFuser's compile time of the fusion's segments in each variant's first call (ms; None: not measured)."""
        return {"default": _compile(self.default_segments), "options": _compile(self.options_segments)}

    @property
    def delta_ms(self) -> float | None:
        """Time per step the options save (< 0) or cost (> 0) on this fusion: its default time x (ratio - 1).

        From the paired per-round ratio, not the difference of the two medians: in a host-bound step a fusion's CUDA
        event time jumps between rounds (launch gaps fall inside it), and the medians of the two variants can land on
        different modes (0.18 vs 0.08 ms on the H200 for a fusion whose paired ratio was 0.997). Without a ratio, the
        difference of the medians."""
        if self.default_ms is None:
            return None
        if self.ratio is not None:
            return self.default_ms * (self.ratio.median - 1)
        return None if self.options_ms is None else self.options_ms - self.default_ms

    @property
    def status(self) -> str:
        """"failed", "not reached", "default not repeatable", "outputs differ", "not timed", or the timing
        verdict."""
        if self.error is not None:
            return "failed"
        if not self.reached:
            return "not reached"
        if self.default_repeat is not None and not self.default_repeat.ok:
            return "default not repeatable"
        if self.numerics is not None and not self.numerics.ok:
            return "outputs differ"
        return "not timed" if self.ratio is None else self.ratio.verdict


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


@dataclass(frozen=True)
class ProfileResult(LoadableResult):
    """The profile: one row per fusion (in first-execution order), the whole step's ratio, and how it was measured.

    ``default_compiles``/``options_compiles``: what the first call under the defaults and under the options
    compiled (distinct fusions, definitions compiled, seconds compiling)."""

    rows: tuple[ProfileRow, ...]
    options: OptionSet
    timer: str
    rounds: int
    steps_per_round: int
    warmup: int
    tolerance: float | None
    seed: int
    elapsed_s: float
    step: RatioSummary | None = None
    step_numerics: Numerics | None = None
    schedulers_from: str | None = None
    notes: tuple[str, ...] = ()
    compile_s: float | None = None  # seconds in first executions of new partitions (nvscope._exec._shared.compiling)
    default_compiles: Compiles | None = None
    options_compiles: Compiles | None = None

    def __getitem__(self, fusion: str) -> ProfileRow:
        for row in self.rows:
            if row.fusion == fusion:
                return row
        raise KeyError(f"no fusion {fusion!r}; fusions: {[r.fusion for r in self.rows]}")

    def ranked(self) -> list[ProfileRow]:
        """Timed fusions the options reached, by the time they save per step (most saved first); then those they
        did not reach; then failed or untimed ones."""
        def timed(r: ProfileRow) -> bool:  # a paired ratio: the difference of two medians ranks nothing
            return r.error is None and r.ratio is not None

        reached = sorted((r for r in self.rows if timed(r) and r.reached),
                         key=lambda r: r.delta_ms if r.delta_ms is not None else math.inf)
        return [*reached, *(r for r in self.rows if timed(r) and not r.reached),
                *(r for r in self.rows if not timed(r))]

    def table(self) -> str:
        """The ranked table, then how it was measured and the notes."""
        label = _label(self.options)
        width = min(40, max(len("fusion"), *(len(r.fusion) + 4 for r in self.rows))) if self.rows else 10
        # nvFuser's compile time where its profiler gave one; else the fusion's wall time in each first call, which
        # holds the compile (the kernel-name source has no compile time of its own).
        compiled = any(r.compile_ms["default"] is not None or r.compile_ms["options"] is not None for r in self.rows)
        first_column = "compile ms" if compiled else "1st call ms"
        sched = min(60, max(32, *(len(_scheduler_change(r)) for r in self.rows))) if self.rows else 32
        header = (f"{'fusion':<{width}} {'default':>8} {'options':>8} {'ratio':>6} {'interval':>13}  "
                  f"{'verdict':<22} {'schedulers default -> options':<{sched}} {first_column:>15}  outputs")
        lines = [f"nvscope profile: {label} against the defaults, per fusion (ms per step)", header,
                 "-" * len(header)]
        for rank, row in enumerate(self.ranked(), 1):
            name = f"{rank:>2} {row.fusion}"
            name = name if len(name) <= width else name[: width - 1] + "~"
            if row.error is not None:
                lines.append(f"{name:<{width}} {_ms(row.default_ms):>8} {'-':>8} FAILED under the options (ran with "
                             f"its defaults instead): {row.error.splitlines()[0]}")
                continue
            r = row.ratio
            cells = ("-", "", "not timed") if r is None else (f"{r.median:.3f}", f"{r.low:.3f}-{r.high:.3f}",
                                                                r.verdict if row.reached else "not reached")
            schedulers = _scheduler_change(row)
            pair = row.compile_ms if compiled else {"default": row.default_first_ms, "options": row.options_first_ms}
            compile_cell = (f"{_ms(pair['default'])}/{_ms(pair['options'])}"
                            if pair["default"] is not None or pair["options"] is not None else "-")
            n, again = row.numerics, row.default_repeat
            outputs = "-" if n is None else ("match" if n.ok else f"DIFFER: {n.detail}")
            if again is not None and not again.ok:
                outputs = f"DEFAULT NOT REPEATABLE: {again.detail}"
            lines.append(f"{name:<{width}} {_ms(row.default_ms):>8} {_ms(row.options_ms):>8} {cells[0]:>6} "
                         f"{cells[1]:>13}  {cells[2]:<22} {schedulers:<{sched}} {compile_cell:>15}  {outputs}")
        tolerance = ("per dtype: " + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_TOLERANCES.items())
                     if self.tolerance is None else f"{self.tolerance:g}")
        if self.step is not None:
            s = self.step
            numerics = "" if self.step_numerics is None else (
                "; outputs and gradients " + ("within tolerance" if self.step_numerics.ok else
                                              f"OVER TOLERANCE ({self.step_numerics.detail})"))
            lines += ["", f"whole step: ratio {s.median:.3f} ({s.low:.3f}-{s.high:.3f}), {s.verdict}{numerics}"]
        lines += [
            "",
            f"times: each fusion's {self.timer} time per step, summed over its executions, in {self.rounds} "
            f"randomized paired rounds of {self.steps_per_round} step{'s' * (self.steps_per_round != 1)} per variant "
            "(median; ratio options/default per round, its median; < 1 is faster)",
            f"interval: {self._intervals()}",
            ("compile ms (default/options): nvFuser's compile time of the fusion's segments in each variant's first "
             "call" if compiled else "1st call ms (default/options): the fusion's wall time in each variant's first "
             "call, compile included (device synchronised around it)"),
            f"schedulers: nvFuser's segments in each variant's first call (one list where the options kept the "
            f"same), from "
            f"{self.schedulers_from or 'nothing here (no CUDA or no nvFuser): ?'}",
            f"outputs: each fusion's outputs with only that fusion under the options, against the defaults; "
            f"tolerance on max|diff| / max|default| {tolerance}",
            *(["not reached: none of the options can change a fusion holding its ops (the catalog's gates), so it "
               "kept its default kernels"] if any(not r.reached for r in self.rows) else []),
            *([] if self.compile_s is None else [
                f"compile: {self.compile_s:.1f} s in the first executions of new partitions (nvFuser compiles "
                "there; a partition reused across rounds or sharing an equal fusion's definition compiles nothing)"]),
            *compiles_lines((("defaults", self.default_compiles), (label, self.options_compiles))),
            *(["default not repeatable: the fusion's outputs moved between two calls under the defaults (an output "
               "it does not write, a nondeterministic kernel, or inputs that moved upstream: the first such fusion in "
               "the step is the one to look at), so they are no reference"]
              if any(r.error is None and r.default_repeat is not None and not r.default_repeat.ok
                     for r in self.rows) else []),
            *(f"note: {note}" for note in self.notes),
        ]
        return "\n".join(lines)

    def _intervals(self) -> str:
        """How the intervals were made: the fusions' family, each interval's own confidence, the confirmation."""
        ratio = next((r.ratio for r in self.rows if r.ratio is not None), None)
        n = 0 if ratio is None else ratio.screened or ratio.comparisons  # the first rounds' family
        confidence = (f"simultaneous 95% over the {n} fusion ratios judged together (each at {100 - 5 / n:.4g}%)"
                      if n > 1 else "95% (one fusion ratio)" if n else "simultaneous 95%")
        return ("the median's, between two order statistics of the ratios (the sign test's interval, exact for any "
                f"distribution); {confidence}; each verdict timed again in fresh rounds and kept only "
                "where both agree (the row then shows the fresh rounds' ratio; a note says which): a chance 'faster' "
                "or 'slower' on any fusion needs two chance misses, however many fusions the step runs")

    def __str__(self) -> str:
        return self.table()

    # --- JSON ------------------------------------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (non-finite floats as the strings "inf", "-inf", "nan")."""
        return {
            "options": options_dict(self.options), "timer": self.timer, "rounds": self.rounds,
            "steps_per_round": self.steps_per_round, "warmup": self.warmup, "tolerance": self.tolerance,
            "seed": self.seed, "elapsed_s": self.elapsed_s, "step": _ratio_dict(self.step),
            "step_numerics": numerics_dict(self.step_numerics), "schedulers_from": self.schedulers_from,
            "notes": list(self.notes), "compile_s": self.compile_s, "default_compiles":
            compiles_dict(self.default_compiles), "options_compiles": compiles_dict(self.options_compiles),
            "rows": [_row_dict(r) for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        rows = tuple(ProfileRow(
            r["fusion"], r["phase"], tuple(r["ops"]), r["calls"], r["default_ms"], r["options_ms"],
            _ratio(r["ratio"]), _segments(r["default_segments"]), _segments(r["options_segments"]),
            r["default_first_ms"], r["options_first_ms"], numerics_from(r["numerics"]), r["error"], r["reached"],
            numerics_from(r.get("default_repeat")))
            for r in data["rows"])
        return cls(rows, options_from(data["options"]), data["timer"], data["rounds"], data["steps_per_round"],
                   data["warmup"], data["tolerance"], data["seed"], data["elapsed_s"], _ratio(data["step"]),
                   numerics_from(data["step_numerics"]), data["schedulers_from"], tuple(data["notes"]),
                   data.get("compile_s"), Compiles.from_dict(data.get("default_compiles")),
                   Compiles.from_dict(data.get("options_compiles")))

    # --- chart -----------------------------------------------------------------------------------------------------

    def plot(self, path: str, *, title: str | None = None) -> str:
        """Save a PNG: each timed fusion's ratio with its 95% interval, labelled with its schedulers; returns ``path``.

        Needs matplotlib (``pip install matplotlib``); the profile itself does not.
        """
        import textwrap

        Figure = figure_class("ProfileResult.plot", "the profile")
        rows = self.ranked()
        fig = Figure(figsize=(11, 1.4 + 0.3 * max(1, len(rows))), layout="constrained")
        ax = fig.add_subplot()
        colors = {"faster": "tab:green", "slower": "tab:red", "no difference detected": "tab:gray"}
        odd = {"outputs differ": "tab:orange", "default not repeatable": "tab:purple", "not reached": "silver"}
        ratios = [x for r in rows if r.ratio is not None and r.error is None for x in (r.ratio.low, r.ratio.high)]
        for y, r in enumerate(reversed(rows)):
            if r.ratio is None or r.error is not None:
                ax.text(0.02, y, ("failed: " + (r.error or "").splitlines()[0] if r.error else "not timed")[:90],
                        transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=7, color="tab:red")
                continue
            color = odd.get(r.status, colors.get(r.ratio.verdict, "tab:gray"))
            mid, lo, hi = (min(max(x, 0.1), 10.0) for x in (r.ratio.median, r.ratio.low, r.ratio.high))
            beyond = ">" if r.ratio.median > 10 else "<" if r.ratio.median < 0.1 else ""  # drawn at the clip
            ax.errorbar([mid], [y], xerr=[[mid - lo], [hi - mid]], fmt=beyond or "o", color=color, capsize=3,
                        fillstyle="none" if r.status == "not reached" else "full")
            if beyond:
                ax.text(mid, y + 0.3, f"{r.ratio.median:.3g}", ha="right" if beyond == ">" else "left", fontsize=7,
                        color=color)
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xscale("log")  # ratios: 0.5 and 2 equally far from 1
        if ratios:
            low, high = max(min(ratios), 0.1), min(max(ratios), 10.0)  # one wild interval must not squash the rest
            ax.set_xlim(min(low, 0.9) / 1.1, max(high, 1.1) * 1.1)
        ticks = [t for t in (0.1, 0.25, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 4, 10)
                 if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
        ax.minorticks_off()
        ax.set_ylim(-0.6, len(rows) - 0.4)
        for name, color in (*colors.items(), *odd.items()):
            ax.plot([], [], "o", color=color, label=name, fillstyle="none" if name == "not reached" else "full")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the rows: over them it hid some
        ax.set_yticks(range(len(rows)), [_plot_label(r) for r in reversed(rows)], fontsize=7)
        ax.set_xlabel(f"fusion time under the options / under the defaults, per round (< 1 is faster)\n"
                      f"median and simultaneous 95% interval over {self.rounds} rounds; log scale, clipped to 0.1-10",
                      fontsize=8)
        fig.suptitle(textwrap.fill(title or f"nvscope profile: {_label(self.options)}", 90), fontsize=9)
        fig.savefig(path, dpi=130)
        return path


def _scheduler_change(r: ProfileRow) -> str:
    """``default -> options``, or the one list where the options kept the same schedulers."""
    default, options = _schedulers(r.default_segments), _schedulers(r.options_segments)
    return default if options == default else f"{default} -> {options}"


def _plot_label(r: ProfileRow) -> str:
    return f"{r.fusion} [{_scheduler_change(r)}]"


def _label(options: OptionSet) -> str:
    from nvscope._measure import spec

    return spec(options) or "(no options)"


def _ratio(data: dict[str, Any] | None) -> RatioSummary | None:
    return None if data is None else RatioSummary.from_dict(data)


def _ratio_dict(ratio: RatioSummary | None) -> dict[str, Any] | None:
    return None if ratio is None else ratio.as_dict()


def _segments_dict(segments: tuple[Segment, ...] | None) -> list[dict[str, Any]] | None:
    return None if segments is None else [
        {"segment_id": s.segment_id, "scheduler": s.scheduler, "kernel": s.kernel, "compile_ms": s.compile_ms,
         "time_ms": s.time_ms} for s in segments]


def _segments(data: list[dict[str, Any]] | None) -> tuple[Segment, ...] | None:
    return None if data is None else tuple(Segment(**s) for s in data)


def _row_dict(r: ProfileRow) -> dict[str, Any]:
    return {
        "fusion": r.fusion, "phase": r.phase, "ops": list(r.ops), "calls": r.calls, "status": r.status,
        "default_ms": r.default_ms, "options_ms": r.options_ms, "ratio": _ratio_dict(r.ratio),
        "schedulers": {k: None if v is None else list(v) for k, v in r.schedulers.items()},
        "compile_ms": r.compile_ms, "default_segments": _segments_dict(r.default_segments),
        "options_segments": _segments_dict(r.options_segments), "default_first_ms": r.default_first_ms,
        "options_first_ms": r.options_first_ms, "numerics": numerics_dict(r.numerics), "error": r.error,
        "reached": r.reached, "default_repeat": numerics_dict(r.default_repeat),
    }
