"""Search per fusion: for each fusion the candidate option set that helps it, combined into one selector map, and
measured end to end against the defaults and the best single global set (docs/search.md, "Per fusion")."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nvscope._core import OptionSet, dev_mode, first_line
from nvscope._exec import audit
from nvscope._measure import (
    Compiles,
    JsonResult,
    Measure,
    Numerics,
    RatioSummary,
    Runner,
    Variant,
    begin,
    compile_clock,
    compiles_lines,
    compiles_of,
    dict_of,
    figure_class,
    install_adapters,
    nv_options_line,
    resolve,
    spec,
    summarize,
)
from nvscope._measure import _checks as checks
from nvscope._profile import NO_FUSION, PROFILES, ProfileResult, profile
from nvscope._tools import ScopeMap, no_fusion

__all__ = ["FusionChoice", "FusionSearchResult", "search_fusions"]


@dataclass(frozen=True)
class FusionChoice:
    """One fusion's best candidate (None: no candidate helps it), with that candidate's ratio on it."""

    fusion: str
    options: OptionSet | None
    ratio: RatioSummary | None


@dataclass(frozen=True)
class FusionSearchResult(JsonResult):
    """Per fusion its best candidate; the map they form; the map against the defaults and the best global set."""

    choices: tuple[FusionChoice, ...]
    groups: tuple[tuple[OptionSet, tuple[str, ...]], ...]
    global_best: OptionSet | None
    map_vs_default: RatioSummary | None
    map_vs_global: RatioSummary | None
    global_vs_default: RatioSummary | None
    map_numerics: Numerics | None
    profiles: tuple[ProfileResult, ...]
    errors: tuple[tuple[str, str], ...]
    elapsed_s: float
    min_gain: float = 0.03  # the map must beat the best global set by this much too: not worth its scopes for a sliver
    compile_s: float | None = None  # seconds in first executions of new partitions (nvscope._exec._shared.compiling)
    compiles: tuple[tuple[str, Compiles | None], ...] = ()

    def _beats_global(self) -> bool:
        g = self.map_vs_global
        return g is not None and g.verdict == "faster" and g.median <= 1 - self.min_gain

    @property
    def better(self) -> bool:
        """Whether the per-fusion map is faster than the defaults and than the best global set, numerics ok."""
        if self.map_vs_default is None or self.map_vs_default.verdict != "faster":
            return False
        if self.map_numerics is not None and not self.map_numerics.ok:
            return False
        return self.global_best is None or self._beats_global()

    def code(self) -> str:
        """The scopes to paste (nested ``nv_options(..., fusions=[...])``), or "keep the defaults"."""
        if not self.groups:
            return "keep the defaults"
        scopes = [nv_options_line(options, fusions) for options, fusions in self.groups]
        return "with " + ", \\\n     ".join(scopes) + ":"

    def verdict(self) -> str:
        """One sentence: is the map worth it, against what."""
        if not self.groups:
            return "no candidate helps any fusion: keep the defaults"
        d, g = self.map_vs_default, self.map_vs_global
        if self.map_numerics is not None and not self.map_numerics.ok:
            return f"the per-fusion map changes the step's numerics ({self.map_numerics.detail}): do not use it"
        if d is None or d.verdict != "faster":
            return "the per-fusion map is NOT faster than the defaults end to end: keep the defaults"
        if self.global_best is not None and not self._beats_global():
            if g is None:
                return f"the per-fusion map was not timed against {spec(self.global_best)}"
            how = g.verdict if g.verdict != "faster" else f"faster by less than min_gain {self.min_gain:g}"
            return (f"the per-fusion map is NOT better than the best global set {spec(self.global_best)} "
                    f"(ratio {g.median:.3f}, {how}): use {nv_options_line(self.global_best)} instead")
        return "the per-fusion map is faster than the defaults" + (
            f" and than the best global set {spec(self.global_best)}" if self.global_best is not None else "")

    def table(self) -> str:
        width = max([len("fusion"), *(len(c.fusion) for c in self.choices)])
        lines = [f"{'fusion':<{width}}  {'best candidate':<32} {'ratio':>6}  interval", "-" * (width + 58)]
        for c in self.choices:
            if c.options is None or c.ratio is None:
                lines.append(f"{c.fusion:<{width}}  {'(defaults: no candidate helps)':<32}")
            else:
                lines.append(f"{c.fusion:<{width}}  {spec(c.options):<32} {c.ratio.median:6.3f}  "
                             f"{c.ratio.low:.3f}-{c.ratio.high:.3f}")
        lines.append("")
        for name, r in (("map vs defaults", self.map_vs_default), ("map vs global", self.map_vs_global),
                        ("global vs defaults", self.global_vs_default)):
            if r is not None:
                lines.append(f"{name:<20} ratio {r.median:.3f} ({r.low:.3f}-{r.high:.3f}), {r.verdict}")
        if self.global_best is not None:
            lines.append(f"best global set: {spec(self.global_best)}")
        chosen = next((c.ratio for c in self.choices if c.ratio is not None), None)
        if chosen is not None:  # a chosen fusion's ratio is its confirmation's (nvscope._measure._stats.confirm)
            lines.append(f"intervals: simultaneous 95% over the {chosen.screened or chosen.comparisons} ratios of "
                         "fusions x candidates, each verdict confirmed in fresh rounds (the ratio shown is theirs), "
                         "and over the map's ratios")
        lines += [f"candidate {name} not profiled: {error}" for name, error in self.errors]
        if self.compile_s is not None:
            lines.append(f"compile: {self.compile_s:.1f} s in the first executions of new partitions (candidates' "
                         "partitions are reused across the profiles and the map's timing)")
        lines += compiles_lines(self.compiles)
        lines += [f"verdict: {self.verdict()}", self.code()]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "choices": [{"fusion": c.fusion, "options": None if c.options is None else spec(c.options),
                         "ratio": dict_of(c.ratio)} for c in self.choices],
            "groups": [{"options": spec(o), "fusions": list(f)} for o, f in self.groups],
            "global_best": None if self.global_best is None else spec(self.global_best),
            "map_vs_default": dict_of(self.map_vs_default), "map_vs_global": dict_of(self.map_vs_global),
            "global_vs_default": dict_of(self.global_vs_default),
            "map_numerics_ok": None if self.map_numerics is None else self.map_numerics.ok,
            "better": self.better, "verdict": self.verdict(), "code": self.code(),
            "errors": [list(e) for e in self.errors], "elapsed_s": self.elapsed_s, "min_gain": self.min_gain,
            "compile_s": self.compile_s,
            "compiles": [{"variant": label, "counts": dict_of(counts)} for label, counts in self.compiles],
            "profiles": [p.as_dict() for p in self.profiles],
        }

    __str__ = table

    def plot(self, path: str, *, title: str | None = None) -> str:
        """Save a PNG: each chosen fusion's ratio under its candidate, then the map and the global set against the
        defaults, with their (simultaneous 95%) intervals; returns ``path``. Needs matplotlib."""
        Figure = figure_class("FusionSearchResult.plot", "the search")
        bars = [(f"{c.fusion} ({spec(c.options)})", c.ratio) for c in self.choices
                if c.options is not None and c.ratio is not None]
        bars += [(name, r) for name, r in (("per-fusion map (whole step)", self.map_vs_default),
                                           ("best global set (whole step)", self.global_vs_default)) if r is not None]
        fig = Figure(figsize=(8, 1.4 + 0.36 * max(1, len(bars))), layout="constrained")
        ax = fig.add_subplot()
        for y, (_, r) in enumerate(reversed(bars)):
            assert r is not None
            ax.errorbar([r.median], [y], xerr=[[r.median - r.low], [r.high - r.median]], fmt="o", capsize=3,
                        color="tab:green" if r.verdict == "faster" else "tab:gray")
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_yticks(range(len(bars)), [name for name, _ in reversed(bars)], fontsize=7)
        ax.set_xlabel("time / default time (median, simultaneous 95% interval); < 1 is faster", fontsize=8)
        fig.suptitle(title or f"nvscope search per fusion: {self.verdict()}"[:120], fontsize=9)
        fig.savefig(path, dpi=130)
        return path


def search_fusions(step: Callable[..., Any], /, *args: Any, candidates: Iterable[object] | None = None,
                   min_gain: float = 0.03, measure: Measure | None = None, **kwargs: Any) -> FusionSearchResult:
    """Recommend an option set per fusion (docs/search.md, "Per fusion"). Parameters as for `nvscope.search` (default
    measure: 20 rounds of at least one call, 2 warm-up calls). ``min_gain``: the least a candidate must save on a
    fusion (median ratio <= 1 - min_gain) to be chosen for it."""
    m, say = begin(search_fusions, step, measure, kwargs, Measure(rounds=20, steps=1, warmup=2), printer="search")
    min_gain = checks.fraction("min_gain", min_gain)
    options = resolve(candidates)
    began, compiled = time.perf_counter(), compile_clock()

    # The default once, before any candidate: a step that fails with its defaults is the caller's bug (it propagates,
    # where a candidate's failure is only that candidate's), and one that runs no fusion through nvscope has nothing
    # to choose per fusion.
    defaults = _default_runs(step, args, kwargs, m)
    compiles: list[tuple[str, Compiles | None]] = [("defaults", defaults)]
    profiles: list[ProfileResult] = []
    errors: list[tuple[str, str]] = []
    # Every candidate's per-fusion verdicts are one family (fusions x candidates): a fusion's choice is the best of
    # all of them, so a chance "faster" anywhere would be chosen.
    family = PROFILES.set(len(options))
    try:
        for i, candidate in enumerate(options, 1):
            say(f"[{i}/{len(options)}] profiling {spec(candidate)} per fusion")
            try:
                profiles.append(profile(step, *args, enable=candidate.enable_list(), disable=candidate.disable_list(),
                                        measure=m, **kwargs))
                compiles.append((spec(candidate), profiles[-1].options_compiles))
            except Exception as error:  # a candidate that breaks the step outside a fusion: skipped, said
                errors.append((spec(candidate), first_line(error)))
    finally:
        PROFILES.reset(family)
    choices: list[FusionChoice] = []
    fusions = list(dict.fromkeys(row.fusion for p in profiles for row in p.rows))
    for fusion in fusions:
        best: tuple[float, OptionSet, RatioSummary] | None = None
        for p in profiles:
            row = next((r for r in p.rows if r.fusion == fusion), None)
            if row is None or row.ratio is None or row.error is not None or not row.reached:
                continue
            if row.ratio.verdict != "faster" or row.ratio.median > 1 - min_gain or (
                    row.numerics is not None and not row.numerics.ok):
                continue
            if best is None or row.ratio.median < best[0]:
                best = (row.ratio.median, p.options, row.ratio)
        choices.append(FusionChoice(fusion, None if best is None else best[1], None if best is None else best[2]))
    groups = [(o, [c.fusion for c in choices if c.options == o]) for o in dict.fromkeys(
        c.options for c in choices if c.options is not None)]
    good = [p for p in profiles if p.step is not None and p.step.verdict == "faster"
            and (p.step_numerics is None or p.step_numerics.ok)]
    global_best = min(good, key=lambda p: p.step.median if p.step else 1.0).options if good else None
    vs_default = vs_global = global_ratio = None
    numerics = None
    if groups:
        say(f"timing the per-fusion map ({len(groups)} scopes) against the defaults"
            + (f" and {spec(global_best)}" if global_best is not None else ""))
        runner = Runner(step, args, kwargs, m, say)
        with dev_mode(True), runner.sharing():
            install_adapters()
            default = Variant("default", OptionSet(), "default")
            runner.reference = runner.first_call(default)
            runner.calibrate()  # calls per timed sample, as the search sets them (nvscope._measure._timer)
            mapped = Variant("per-fusion map", OptionSet(), "combination")
            mapped.scope = ScopeMap([(o, f) for o, f in groups])
            variants = [default, mapped]
            if global_best is not None:
                variants.append(Variant(spec(global_best), global_best, "candidate"))
            for v in variants[1:]:
                runner.prepare(v, "[per fusion]")
            times = runner.rounds(variants, m.rounds or 0, random.Random(m.seed))
        compiles += [(v.label, v.compiles) for v in variants[1:]]
        numerics = mapped.numerics
        judged = 1 if global_best is None else 3  # the map's ratios are one family too
        if id(mapped) in times:
            vs_default = summarize(times[id(mapped)], times[id(default)], comparisons=judged)
            if global_best is not None and id(variants[2]) in times:
                vs_global = summarize(times[id(mapped)], times[id(variants[2])], comparisons=judged)
        if global_best is not None and id(variants[2]) in times:
            global_ratio = summarize(times[id(variants[2])], times[id(default)], comparisons=judged)
    result = FusionSearchResult(tuple(choices), tuple((o, tuple(f)) for o, f in groups), global_best, vs_default,
                                vs_global, global_ratio, numerics, tuple(profiles), tuple(errors),
                                time.perf_counter() - began, min_gain, compile_clock() - compiled,
                                tuple(compiles))
    say(f"done in {result.elapsed_s:.1f} s: {result.verdict()}")
    return result


def _default_runs(step: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], m: Measure) -> Compiles:
    """One call of the step with its defaults, audited: what it raises propagates; no fusion is a `ValueError`.
    Returns what it compiled (the profiles' defaults then run what it compiled, shared)."""
    runner = Runner(step, args, kwargs, dataclasses.replace(m, tolerance=None, steps=1, warmup=0), lambda message: None)
    with dev_mode(True), runner.sharing():
        install_adapters()
        began = compile_clock()
        with audit() as log:
            runner.invoke()
    if not log.records:
        raise ValueError(no_fusion(NO_FUSION.format(tool="search_fusions")))
    return compiles_of(log.records, began)
