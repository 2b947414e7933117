"""What `nvscope.search` reports: one row per variant, the recommendation, a table, JSON (saved and loaded again as
plain data) and a chart (matplotlib imported only by ``plot()``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nvscope._core import OptionSet, render
from nvscope._measure import (
    Compiles,
    LoadableResult,
    Numerics,
    RatioSummary,
    Stage,
    compiles_lines,
    dict_of,
    figure_class,
    numerics_dict,
    numerics_from,
    nv_options_line,
    options_dict,
    options_from,
    seconds,
    tolerance_text,
)

__all__ = ["SearchResult", "SearchRow", "Stage"]

@dataclass(frozen=True)
class SearchRow:
    """One variant: the default, a candidate alone, or a combination of winners (docs/search.md, "Output").

    ``first_call_s``: its first call, never timed in ``ms_per_call``; ``ratio``: per round against the default (< 1 is
    faster), a combination's ``versus`` against the set it extends; ``fusions``/``new_partitions``: in the first call.
    """

    label: str
    options: OptionSet
    stage: Stage
    first_call_s: float | None = None
    ms_per_call: float | None = None
    ratio: RatioSummary | None = None
    numerics: Numerics | None = None
    error: str | None = None
    fusions: int = 0
    new_partitions: int = 0
    versus: str | None = None
    versus_ratio: RatioSummary | None = None
    recommended: bool = False
    compiles: Compiles | None = None

    @property
    def status(self) -> str:
        """"failed", "over tolerance", "baseline" (the default), "not timed", or the timing verdict."""
        if self.error is not None:
            return "failed"
        if self.numerics is not None and not self.numerics.ok and self.stage != "default":
            return "over tolerance"
        if self.stage == "default":
            return "baseline"
        if self.ratio is None:
            return "not timed"
        return self.ratio.verdict


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


# The variant column's widest cell: longer labels (a combination of many sets) are cut with a "~".
_LABEL = 44


def _cut(name: str) -> str:
    return name if len(name) <= _LABEL else name[: _LABEL - 1] + "~"


def _cells(row: SearchRow) -> tuple[str, ...]:
    """A row's cells after its name: ratio, interval, verdict, ms/call, first call, max|diff|, max rel, numerics."""
    first = seconds(row.first_call_s)
    if row.error is not None:
        return "-", "", "failed", "-", first, "-", "-", f"FAILED: {row.error}"
    ratio = row.ratio
    timing = ("1.000", "", "baseline") if row.stage == "default" else (
        ("-", "", "not timed") if ratio is None else
        (f"{ratio.median:.3f}", f"{ratio.low:.3f}-{ratio.high:.3f}", ratio.verdict))
    ms = "-" if row.ms_per_call is None else f"{row.ms_per_call:.4g}"
    n = row.numerics
    if n is None:
        numerics = "-"
    else:
        verdict = {"ok": "repeatable" if row.stage == "default" else "ok", "not compared": "not compared"}.get(
            n.verdict, f"{'NOT REPEATABLE' if row.stage == 'default' else 'OVER'}: {n.detail}")
        numerics = verdict + (f"; {n.nonfinite}" if n.nonfinite else "") + (
            f"; not compared: {n.uncompared}" if n.uncompared else "")
    return (*timing, ms, first, _num(n.max_abs_diff if n else None), _num(n.max_rel_diff if n else None, 2),
            numerics)


@dataclass(frozen=True)
class SearchResult(LoadableResult):
    """The search: rows (default first, then candidates in the order given, then combinations), the recommended
    option set (empty: keep the defaults), and how it was measured."""

    rows: tuple[SearchRow, ...]
    recommended: OptionSet
    timer: str
    rounds: int
    steps_per_round: int  # calls per variant per round, as calibrated (at least the steps_per_round asked for)
    warmup: int
    tolerance: float | None
    seed: int
    elapsed_s: float
    notes: tuple[str, ...] = ()
    compile_s: float | None = None  # seconds in first executions of new partitions (nvscope._exec._shared.compiling)

    def __getitem__(self, label: str) -> SearchRow:
        for row in self.rows:
            if row.label == label:
                return row
        raise KeyError(f"no variant {label!r}; variants: {[r.label for r in self.rows]}")

    @property
    def default(self) -> SearchRow:
        return self.rows[0]

    def ranked(self) -> list[SearchRow]:
        """The default, then timed variants by median time ratio (fastest first), then failed or untimed ones."""
        others = [r for r in self.rows if r.stage != "default"]
        timed = sorted((r for r in others if r.error is None and r.ratio is not None),
                       key=lambda r: r.ratio.median if r.ratio is not None else math.inf)
        return [self.default, *timed, *(r for r in others if r.error is not None or r.ratio is None)]

    def recommendation(self) -> str:
        """The line to paste: ``nv_options(enable=[...], disable=[...])``, or why to keep the defaults."""
        if self.recommended:
            return nv_options_line(self.recommended)
        return "keep the defaults (no candidate was faster with its numerics within tolerance)"

    def table(self) -> str:
        """The ranked table, how it was measured, the notes, and the recommendation."""
        ranked = self.ranked()
        # The rank takes two places at least, so that the mark stands apart from it ("* 1", as "* 1" beside " 10")
        digits = max(2, len(str(sum(r.stage != "default" and r.error is None and r.ratio is not None for r in ranked))))
        header = ("variant", "ratio", "interval", "verdict", "ms/call", "first call", "max|diff|", "max rel",
                  "numerics")
        cells: list[tuple[str, ...]] = []
        rank = 0
        for row in ranked:
            mark = "*" if row.recommended else " "
            if row.stage == "default":
                place = " " * (1 + digits)
            elif row.error is None and row.ratio is not None:
                rank += 1
                place = f"{mark}{rank:>{digits}}"
            else:
                place = f"{mark}{'-':>{digits}}"
            cells.append((_cut(f"{place} {row.label}"), *_cells(row)))
            if row.versus is not None and row.versus_ratio is not None:
                v = row.versus_ratio
                cells.append((_cut(f"{' ' * (digits + 4)}vs {row.versus}"), f"{v.median:.3f}",
                              f"{v.low:.3f}-{v.high:.3f}", v.verdict, "", "", "", "",
                              "(against the set it extends, in the same rounds)"))
        tolerance = tolerance_text(self.tolerance)
        lines = [
            render(header, cells, right=(1, 2, 4, 5, 6, 7)),
            "",
            f"ratio: variant time / default time in each of {self.rounds} randomized rounds of "
            f"{self.steps_per_round} call{'s' * (self.steps_per_round != 1)} per variant (median; < 1 is faster); "
            f"timer: {self.timer}",
            f"interval: {self._intervals()}",
            f"first call: wall time of each variant's first call (its compile), after which {self.warmup} warm-up "
            f"call{'s' * (self.warmup != 1)}; never part of ms/call",
            f"numerics: first call against the default's; tolerance on max|diff| / max|default| {tolerance}; "
            "str compared for equality; 'not compared': no tensor, number or str to compare",
            *compiles_lines(((r.label, r.compiles) for r in self.rows), self.compile_s),
            *(f"note: {note}" for note in self.notes),
            f"recommended: {self.recommendation()}",
        ]
        return "\n".join(lines)

    def _intervals(self) -> str:
        """How the intervals were made: the families they belong to, and each interval's own confidence."""
        families = []
        for stage, what in (("candidate", "candidate{s}"), ("combination", "comparison{s} of the combinations")):
            ratio = next((r.ratio for r in self.rows if r.stage == stage and r.ratio is not None), None)
            if ratio is not None:
                n = ratio.comparisons
                families.append(f"the {n} {what.format(s='s' * (n != 1))} (each at {ratio.confidence * 100:.4g}%)")
        return ("the median's, between two order statistics of the ratios (the sign test's interval, exact for any "
                f"distribution); simultaneous 95% over {' and over '.join(families) or 'each family'}: a chance "
                "'faster' anywhere in a family has at most 2.5% probability, however many candidates were tried")

    __str__ = table

    # --- JSON ------------------------------------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (non-finite floats as the strings "inf", "-inf", "nan")."""
        def row(r: SearchRow) -> dict[str, Any]:
            return {
                "label": r.label, "options": options_dict(r.options), "stage": r.stage, "status": r.status,
                "first_call_s": r.first_call_s, "ms_per_call": r.ms_per_call, "ratio": dict_of(r.ratio),
                "numerics": numerics_dict(r.numerics), "error": r.error, "fusions": r.fusions,
                "new_partitions": r.new_partitions, "versus": r.versus, "versus_ratio": dict_of(r.versus_ratio),
                "recommended": r.recommended, "compiles": dict_of(r.compiles),
            }
        return {
            "rows": [row(r) for r in self.rows], "recommended": options_dict(self.recommended),
            "recommendation": self.recommendation(), "timer": self.timer, "rounds": self.rounds,
            "steps_per_round": self.steps_per_round, "warmup": self.warmup, "tolerance": self.tolerance,
            "seed": self.seed, "elapsed_s": self.elapsed_s, "notes": list(self.notes), "compile_s": self.compile_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        rows = tuple(SearchRow(
            r["label"], options_from(r["options"]), r["stage"], r["first_call_s"], r["ms_per_call"],
            RatioSummary.from_dict(r["ratio"]), numerics_from(r["numerics"]), r["error"], r["fusions"],
            r["new_partitions"], r["versus"], RatioSummary.from_dict(r["versus_ratio"]), r["recommended"],
            Compiles.from_dict(r.get("compiles"))) for r in data["rows"])
        return cls(rows, options_from(data["recommended"]), data["timer"], data["rounds"], data["steps_per_round"],
                   data["warmup"], data["tolerance"], data["seed"], data["elapsed_s"], tuple(data["notes"]),
                   data.get("compile_s"))

    # --- chart -----------------------------------------------------------------------------------------------------

    def plot(self, path: str, *, title: str | None = None) -> str:
        """Save a PNG: each timed variant's median time ratio with its 95% interval; returns ``path``. Needs
        matplotlib (``pip install matplotlib``); the search itself does not."""
        import textwrap

        Figure = figure_class("SearchResult.plot", "the search")
        rows = [r for r in self.ranked() if r.stage != "default"]
        fig = Figure(figsize=(8, 1.2 + 0.38 * max(1, len(rows))), layout="constrained")
        ax = fig.add_subplot()
        colors = {"faster": "tab:green", "slower": "tab:red", "no difference detected": "tab:gray"}
        for y, r in enumerate(reversed(rows)):
            if r.ratio is None:
                ax.text(0.02, y, f"failed: {r.error or 'not timed'}"[:90], transform=ax.get_yaxis_transform(),
                        ha="left", va="center", fontsize=7, color="tab:red",
                        bbox={"facecolor": "white", "edgecolor": "none"})
                continue
            color = "tab:orange" if r.status == "over tolerance" else colors[r.ratio.verdict]
            ax.errorbar([r.ratio.median], [y], xerr=[[r.ratio.median - r.ratio.low], [r.ratio.high - r.ratio.median]],
                        fmt="D" if r.recommended else "o", color=color, capsize=3)
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylim(-0.6, len(rows) - 0.4)
        for name, color in (*colors.items(), ("over tolerance", "tab:orange")):
            ax.plot([], [], "o", color=color, label=name)
        ax.legend(fontsize=7, loc="best")
        labels = [("* " if r.recommended else "") + r.label + (" (over tol.)" if r.status == "over tolerance" else "")
                  for r in reversed(rows)]
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.set_xlabel(f"time / default time per round (median, simultaneous 95% interval; {self.rounds} rounds); "
                      "< 1 is faster", fontsize=8)
        # Over the whole figure, wrapped: long labels narrow the axes.
        fig.suptitle(textwrap.fill(title or f"nvscope search: {self.recommendation()}", 90), fontsize=9)
        fig.savefig(path, dpi=130)
        return path
