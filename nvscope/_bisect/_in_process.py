"""One probe of an in-process bisect: the step once under ``nv_options(options, fusions=[...])``, judged.

Built on the tools' harness (`nvscope._measure._harness.Runner`), so numerics and speed are judged as the search
judges them. Each probe is checked to do what it says: only its fusions ran its options, and it left no scope,
warning filter or patch behind. Runs share the default's compiled definitions (the runner's `sharing`).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from nvscope._bisect._drive import Outcome
from nvscope._core import OptionSet, _patches, catalog, current_options, exact_glob, first_line, nv_options
from nvscope._exec import audit, repro_paths
from nvscope._measure import (
    Measure,
    Runner,
    Variant,
    compare_leaves,
    compile_clock,
    compiles_of,
    install_adapters,
    summarize,
)
from nvscope._tools import no_fusion

__all__ = ["InProcess"]


class InProcess:
    """The step, its reference (the default's outputs and gradients), and `run` for one probe."""

    def __init__(self, step: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 checks: tuple[str, ...] | Callable[[Any], bool], slower_by: float, measure: Measure) -> None:
        self.checks, self.tolerance, self.slower_by = checks, measure.tolerance, slower_by
        self.rounds = measure.rounds or 0
        timed = not callable(checks) and "slower" in checks
        self.runner = Runner(step, args, kwargs, replace(measure, warmup=1 if timed else 0), lambda message: None)
        self.default = Variant("default", OptionSet(), "default")
        self.rng = random.Random(measure.seed)
        self.patches: list[str] = []

    def baseline(self) -> list[str]:
        """Run the default (twice): the reference, and the fusion ids in first-execution order. Raises if the
        default itself is not usable as a reference."""
        install_adapters()
        with audit() as log:
            self.runner.reference = self.runner.first_call(self.default)  # a default that raises: the caller's bug
        fusions = list(dict.fromkeys(r.fusion for r in log.records))
        if not fusions:
            raise ValueError(no_fusion("no nvFuser fusion ran through nvscope in the default run, so no option can "
                                       "reach one: is the function jitted (thunder.jit) or built on nvFuser's "
                                       "FusionDefinition?"))
        out = self.runner.invoke()
        again = compare_leaves(self.runner.reference, self.runner.snapshot(out), self.tolerance)
        if callable(self.checks) and self.checks(out):
            raise ValueError("check() says the default's own result is bad: the bisect needs a default that is good")
        if not callable(self.checks) and "numerics" in self.checks and not again.ok:
            raise ValueError(f"the default is not repeatable ({again.detail}): its second call differs from its "
                             "first beyond the tolerance, so numerics cannot tell a culprit; pass a larger "
                             "tolerance= or check='raises'")
        if not callable(self.checks) and "slower" in self.checks:
            self.runner.calibrate()  # calls per timed sample, as the search sets them (nvscope._measure._timer)
        self.patches = _patches.describe()
        return fusions

    def run(self, options: OptionSet, fusions: tuple[str, ...] | None) -> Outcome:
        """One probe: the step under ``options`` on ``fusions`` (None: all), judged by the checks."""
        variant = Variant("probe", options, "candidate")
        # inherit=False and on_error="raise": an enclosing scope of the caller's changes nothing a probe sees.
        variant.scope = nv_options(options.enable, options.disable, inherit=False, on_error="raise",
                                   fusions=None if fusions is None else [exact_glob(f) for f in fusions])
        error: Exception | None = None
        out: Any = None
        leaves: list[tuple[str, Any]] = []
        began = compile_clock()
        with warnings.catch_warnings(), audit() as log:
            try:
                with variant.scope:
                    out = self.runner.invoke()
                leaves = self.runner.snapshot(out)
            except Exception as caught:
                error = caught
        compiled = compiles_of(log.records, began)
        self._check_probe(options, fusions, log.records)
        outcome = self._judge(variant, error, out, leaves)
        outcome.compiles = compiled
        return outcome

    def _judge(self, variant: Variant, error: Exception | None, out: Any, leaves: list[tuple[str, Any]]) -> Outcome:
        checks = self.checks
        if error is not None:
            # Bad for a callable and for "raises"; for "slower" too: a step that raises has no time to compare, as a
            # raise while timed (`_timed`) is bad. "numerics" alone does not judge raises.
            bad = callable(checks) or "raises" in checks or "slower" in checks
            return Outcome(bad, first_line(error), repro_paths(error))
        if callable(checks):
            bad = checks(out)  # a bool: `check_arg` refuses any other verdict
            return Outcome(bad, "check() returned True" if bad else "")
        numerics = compare_leaves(self.runner.reference, leaves, self.tolerance)
        if "numerics" in checks and not numerics.ok:
            return Outcome(True, f"numerics over tolerance: {numerics.detail}")
        if "slower" in checks:
            return self._timed(variant)
        return Outcome(False, "" if numerics.ok else f"(numerics not checked: {numerics.detail})")

    def _timed(self, variant: Variant) -> Outcome:
        for _ in range(self.runner.warmup):
            with variant.scope:
                self.runner.invoke()
        try:
            times = self.runner.rounds([self.default, variant], self.rounds, self.rng)
        except Exception as error:  # the default failed while timed: nothing to compare with
            raise RuntimeError(f"the default failed while timed against a probe: {first_line(error)}") from error
        if id(variant) not in times:
            return Outcome(True, f"failed while timed: {variant.error}")
        ratio = summarize(times[id(variant)], times[id(self.default)])
        slower = ratio.low > 1 + self.slower_by
        detail = (f"time ratio {ratio.median:.3f} (95% interval {ratio.low:.3f}-{ratio.high:.3f}, {ratio.rounds} "
                  f"rounds): {'slower than' if slower else 'not slower than'} 1 + {self.slower_by:g}")
        return Outcome(slower, detail)

    def _check_probe(self, options: OptionSet, fusions: tuple[str, ...] | None, records: list[Any]) -> None:
        """The probe did what it says, and left nothing behind (else a bug in nvscope: raise, do not guess)."""
        problems = []
        selected = None if fusions is None else set(fusions)
        gate = catalog().can_affect
        for r in records:
            chosen = selected is None or r.fusion in selected
            ops = r.info.ops
            # What the catalog's gates let through to this fusion (all of it when its ops are unknown).
            wanted = options if ops is None else options.only(partial(gate, ops=ops))
            has = wanted.enable <= r.options.enable and wanted.disable <= r.options.disable
            own = r.own or (r.route == "default" and has)
            if chosen and not (has and own):
                problems.append(f"{r.fusion} ran with {r.options!r} in partition {r.route!r}, not with "
                                f"{wanted!r} in a partition of its own")
            # An unselected fusion ran options other than its own (under sharing its own options run in a partition
            # too); one the default did not run is judged by its route alone (its own options are not known).
            elif not chosen and r.route != "default" and (r.route == "fallback"
                                                          or self.runner.own.get(r.fusion) != r.options):
                problems.append(f"{r.fusion} was not selected but ran in partition {r.route!r}")
        if current_options():
            problems.append(f"a scope stayed active: {current_options()!r}")
        if _patches.describe() != self.patches:
            problems.append(f"the patches changed: {self.patches} -> {_patches.describe()}")
        if problems:
            raise RuntimeError("nvscope bisect: a probe did not run as intended (a bug in nvscope, please report "
                               "it): " + "; ".join(problems[:3]))
