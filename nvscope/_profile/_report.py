"""What `nvscope.profile` reports: one row per fusion, a ranked table, JSON (saved and loaded again as plain
data) and a chart (matplotlib imported only by ``plot()``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nvscope._core import OptionSet
from nvscope._measure import (
    Compiles,
    LoadableResult,
    Numerics,
    RatioSummary,
    Segment,
    compiles_lines,
    dict_of,
    figure_class,
    numerics_dict,
    numerics_from,
    options_dict,
    options_from,
    tolerance_text,
)
from nvscope._profile._cells import (
    _compile,
    _intervals,
    _label,
    _ms,
    _names,
    _outputs_cell,
    _row_dict,
    _scheduler_change,
    _schedulers,
    _segments,
    _timed_cells,
)

__all__ = ["ProfileResult", "ProfileRow"]


@dataclass(frozen=True)
class ProfileRow:
    """One fusion of the step, by id, under the defaults and under the options (docs/profile.md, "The table").

    ``*_ms``: median time per call; ``ratio``: options/default per round, with interval and verdict; ``*_segments``:
    nvFuser's segments (None: unknown); ``numerics``: its outputs with only it under the options; ``error``: it failed
    under the options; ``reached``: the options could change it; ``default_repeat``: a second default call against the
    first. ``torch_*``: the same for its region in PyTorch.
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
    torch_profiled: bool = False
    torch_ms: float | None = None
    torch_ratio: RatioSummary | None = None
    torch_numerics: Numerics | None = None
    torch_error: str | None = None
    options_profiled: bool = True

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
        """Time per step the options save (< 0) or cost (> 0) on this fusion: its default time x (ratio - 1), from the
        paired ratio (the two medians can land on different modes); without a ratio, the medians' difference."""
        if self.default_ms is None:
            return None
        if self.ratio is not None:
            return self.default_ms * (self.ratio.median - 1)
        return None if self.options_ms is None else self.options_ms - self.default_ms

    @property
    def torch_interval(self) -> tuple[float, float] | None:
        """The interval of `torch_ratio`, or None when it was not timed."""
        return None if self.torch_ratio is None else (self.torch_ratio.low, self.torch_ratio.high)

    @property
    def torch_delta_ms(self) -> float | None:
        """Time per step PyTorch saves (< 0) or costs (> 0) on this fusion against nvFuser's defaults."""
        if self.default_ms is None or self.torch_ratio is None:
            return None
        return self.default_ms * (self.torch_ratio.median - 1)

    @property
    def torch_status(self) -> str | None:
        """In PyTorch: "no PyTorch form", "failed", "default not repeatable", "outputs differ", "not timed", or the
        timing verdict (PyTorch against nvFuser's defaults); None where PyTorch was not profiled."""
        if not self.torch_profiled:
            return None
        if self.torch_error is not None:
            return "no PyTorch form" if self.torch_error.startswith("no PyTorch form") else "failed"
        return self._judged(self.torch_numerics, self.torch_ratio)

    @property
    def status(self) -> str:
        """"failed", "not reached", "default not repeatable", "outputs differ", "not timed", or the timing
        verdict; "no options" in a profile of PyTorch alone."""
        if not self.options_profiled:
            return "no options"
        if self.error is not None:
            return "failed"
        if not self.reached:
            return "not reached"
        return self._judged(self.numerics, self.ratio)

    def _judged(self, numerics: Numerics | None, ratio: RatioSummary | None) -> str:
        if self.default_repeat is not None and not self.default_repeat.ok:
            return "default not repeatable"
        if numerics is not None and not numerics.ok:
            return "outputs differ"
        return "not timed" if ratio is None else ratio.verdict


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
    torch: bool = False  # each fusion's region in PyTorch profiled too (`ProfileRow.torch_ms` and the rest)
    torch_step: RatioSummary | None = None  # the whole step with the fusions that can in PyTorch, against the default
    torch_step_numerics: Numerics | None = None

    def __getitem__(self, fusion: str) -> ProfileRow:
        for row in self.rows:
            if row.fusion == fusion:
                return row
        raise KeyError(f"no fusion {fusion!r}; fusions: {[r.fusion for r in self.rows]}")

    def ranked(self) -> list[ProfileRow]:
        """Timed fusions the options reached, by the time they save per step (most saved first); then those they
        did not reach; then failed or untimed ones. Without options, by the time PyTorch saves per step (where
        nvFuser loses most first), then the fusions PyTorch could not run or that were not timed."""
        if not self.options:
            timed_in_torch = sorted((r for r in self.rows if r.torch_error is None and r.torch_ratio is not None),
                                    key=lambda r: r.torch_delta_ms if r.torch_delta_ms is not None else math.inf)
            return [*timed_in_torch, *(r for r in self.rows if r not in timed_in_torch)]

        def timed(r: ProfileRow) -> bool:  # a paired ratio: the difference of two medians ranks nothing
            return r.error is None and r.ratio is not None

        reached = sorted((r for r in self.rows if timed(r) and r.reached),
                         key=lambda r: r.delta_ms if r.delta_ms is not None else math.inf)
        return [*reached, *(r for r in self.rows if timed(r) and not r.reached),
                *(r for r in self.rows if not timed(r))]

    def table(self) -> str:
        """The ranked table, then how it was measured and the notes."""
        label = _label(self.options)
        opts, torch = bool(self.options), self.torch
        width = min(40, max(len("fusion"), *(len(r.fusion) + 4 for r in self.rows))) if self.rows else 10
        # nvFuser's compile time where its profiler gave one; else the first call's wall time, which holds it.
        compiled = any(r.compile_ms["default"] is not None or r.compile_ms["options"] is not None for r in self.rows)
        first_column = "compile ms" if compiled else "1st call ms"
        sched = min(60, max(32, *(len(_scheduler_change(r)) for r in self.rows))) if self.rows else 32
        header = (f"{'fusion':<{width}} {'default':>8} "
                  + (f"{'options':>8} {'ratio':>6} {'interval':>13}  {'verdict':<22} " if opts else "")
                  + (f"{'torch':>8} {'ratio':>6} {'interval':>13}  {'verdict':<22} " if torch else "")
                  + f"{'schedulers default -> options' if opts else 'schedulers':<{sched}} {first_column:>15}  "
                    "outputs")
        what = f"{label} and PyTorch" if opts and torch else label if opts else "PyTorch"
        lines = [f"nvscope profile: {what} against {'the' if opts else 'nvFuser' + chr(39) + 's'} defaults, per "
                 "fusion (ms per step)", header, "-" * len(header)]
        for rank, row in enumerate(self.ranked(), 1):
            name = f"{rank:>2} {row.fusion}"
            name = name if len(name) <= width else name[: width - 1] + "~"
            failed = None if row.error is None else (f"FAILED under the options (ran with its defaults instead): "
                                                     f"{row.error.splitlines()[0]}")
            if failed is not None and not torch:
                lines.append(f"{name:<{width}} {_ms(row.default_ms):>8} {'-':>8} {failed}")
                continue
            cells = ""
            if opts:
                cells += _timed_cells(row.options_ms, row.ratio, "FAILED" if failed else
                                      None if row.reached else "not reached")
            if torch:
                cells += _timed_cells(row.torch_ms, row.torch_ratio, None if row.torch_error is None else
                                      "NO PYTORCH FORM" if row.torch_status == "no PyTorch form" else
                                      "FAILED in PyTorch")
            schedulers = _scheduler_change(row) if opts else _schedulers(row.default_segments)
            pair = row.compile_ms if compiled else {"default": row.default_first_ms, "options": row.options_first_ms}
            compile_cell = (f"{_ms(pair['default'])}" + (f"/{_ms(pair['options'])}" if opts else "")
                            if pair["default"] is not None or pair["options"] is not None else "-")
            outputs = [failed or _outputs_cell(row, row.numerics)] if opts else []
            if torch:
                cell = row.torch_error if row.torch_error is not None else _outputs_cell(row, row.torch_numerics)
                outputs.append(f"torch: {cell.splitlines()[0]}" if opts else cell.splitlines()[0])
            lines.append(f"{name:<{width}} {_ms(row.default_ms):>8} {cells}{schedulers:<{sched}} "
                         f"{compile_cell:>15}  {'; '.join(outputs)}")
        tolerance = tolerance_text(self.tolerance)
        for step, step_numerics, where in ((self.step, self.step_numerics, ""),
                                           (self.torch_step, self.torch_step_numerics, " in PyTorch")):
            if step is not None:
                numerics = "" if step_numerics is None else (
                    "; outputs and gradients " + ("within tolerance" if step_numerics.ok else
                                                  f"OVER TOLERANCE ({step_numerics.detail})"))
                lines += ["", f"whole step{where}: ratio {step.median:.3f} ({step.low:.3f}-{step.high:.3f}), "
                              f"{step.verdict}{numerics}"]
        pairs = "default/options" if opts else "default"
        ratio_of = " and ".join((["options/default"] if opts else []) + (["torch/default"] if torch else []))
        lines += [
            "",
            f"times: each fusion's {self.timer} time per step, summed over its executions, in {self.rounds} "
            f"randomized paired rounds of {self.steps_per_round} step{'s' * (self.steps_per_round != 1)} per variant "
            f"(median; ratio {ratio_of} per round, its median; < 1 is faster)",
            f"interval: {_intervals(self)}",
            (f"compile ms ({pairs}): nvFuser's compile time of the fusion's segments in each variant's first "
             "call" if compiled else f"1st call ms ({pairs}): the fusion's wall time in each variant's first "
             "call, compile included (device synchronised around it)"),
            f"schedulers: nvFuser's segments in each variant's first call (one list where the options kept the "
            f"same), from "
            f"{self.schedulers_from or 'nothing here (no CUDA or no nvFuser): ?'}",
            *([f"outputs: each fusion's outputs with only that fusion under the options, against the defaults; "
               f"tolerance on max|diff| / max|default| {tolerance}"] if opts else []),
            *([f"torch: the fusion's region run in PyTorch (nv_options(run='torch'), Thunder's PyTorch executor, "
               f"eager); its outputs with only that fusion in PyTorch, against the defaults; tolerance {tolerance}; "
               "a ratio > 1 is where nvFuser's defaults beat PyTorch, < 1 where nvFuser loses to eager"]
              if torch else []),
            *(["not reached: none of the options can change a fusion holding its ops (the catalog's gates), so it "
               "kept its default kernels"] if any(not r.reached for r in self.rows) else []),
            *compiles_lines((("defaults", self.default_compiles), (label, self.options_compiles)), self.compile_s),
            *(["default not repeatable: the fusion's outputs moved between two calls under the defaults (an output "
               "it does not write, a nondeterministic kernel, or inputs that moved upstream: the first such fusion in "
               "the step is the one to look at), so they are no reference"]
              if any(r.error is None and r.default_repeat is not None and not r.default_repeat.ok
                     for r in self.rows) else []),
            *(f"note: {note}" for note in self.notes),
        ]
        return "\n".join(lines)

    __str__ = table

    # --- JSON ------------------------------------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (non-finite floats as the strings "inf", "-inf", "nan")."""
        return {
            "options": options_dict(self.options), "timer": self.timer, "rounds": self.rounds,
            "steps_per_round": self.steps_per_round, "warmup": self.warmup, "tolerance": self.tolerance,
            "seed": self.seed, "elapsed_s": self.elapsed_s, "step": dict_of(self.step),
            "step_numerics": numerics_dict(self.step_numerics), "schedulers_from": self.schedulers_from,
            "notes": list(self.notes), "compile_s": self.compile_s, "default_compiles":
            dict_of(self.default_compiles), "options_compiles": dict_of(self.options_compiles),
            "torch": self.torch, "torch_step": dict_of(self.torch_step),
            "torch_step_numerics": numerics_dict(self.torch_step_numerics),
            "rows": [_row_dict(r) for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        rows = tuple(ProfileRow(
            r["fusion"], r["phase"], tuple(r["ops"]), r["calls"], r["default_ms"], r["options_ms"],
            RatioSummary.from_dict(r["ratio"]), _segments(r["default_segments"]), _segments(r["options_segments"]),
            r["default_first_ms"], r["options_first_ms"], numerics_from(r["numerics"]), r["error"], r["reached"],
            numerics_from(r.get("default_repeat")), r.get("torch_profiled", False), r.get("torch_ms"),
            RatioSummary.from_dict(r.get("torch_ratio")), numerics_from(r.get("torch_numerics")), r.get("torch_error"),
            r.get("options_profiled", True))
            for r in data["rows"])
        return cls(rows, options_from(data["options"]), data["timer"], data["rounds"], data["steps_per_round"],
                   data["warmup"], data["tolerance"], data["seed"], data["elapsed_s"],
                   RatioSummary.from_dict(data["step"]), numerics_from(data["step_numerics"]), data["schedulers_from"],
                   tuple(data["notes"]), data.get("compile_s"), Compiles.from_dict(data.get("default_compiles")),
                   Compiles.from_dict(data.get("options_compiles")), data.get("torch", False),
                   RatioSummary.from_dict(data.get("torch_step")), numerics_from(data.get("torch_step_numerics")))

    # --- chart -----------------------------------------------------------------------------------------------------

    def plot(self, path: str, *, title: str | None = None) -> str:
        """Save a PNG: each timed fusion's ratio with its 95% interval, labelled with its schedulers; returns ``path``.
        Needs matplotlib (``pip install matplotlib``); the profile itself does not."""
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
        ax.set_yticks(range(len(rows)), [f"{r.fusion} [{_scheduler_change(r)}]" for r in reversed(rows)], fontsize=7)
        ax.set_xlabel(f"fusion time under the options / under the defaults, per round (< 1 is faster)\n"
                      f"median and simultaneous 95% interval over {self.rounds} rounds; log scale, clipped to 0.1-10",
                      fontsize=8)
        fig.suptitle(textwrap.fill(title or f"nvscope profile: {_label(self.options)}", 90), fontsize=9)
        fig.savefig(path, dpi=130)
        return path
