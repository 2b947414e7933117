"""A/B in one process: run one function under several option sets and compare time, outputs and kernels.

Each option set has its own compiled cache, so the variants never share a kernel. Compare reports the raw
max |diff| and structure differences; it does not judge them."""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from nvscope._core import NvscopeWarning, OptionSet, dev_mode, first_line, nv_options, shown
from nvscope._core import _text as _texttable
from nvscope._exec import audit
from nvscope._measure import (
    MIN_SAMPLE_S,
    Compiles,
    Measure,
    Runner,
    begin,
    compile_clock,
    compiles_lines,
    compiles_of,
    count,
    flatten_outputs,
    has_nan,
    kernel_names,
    pair,
    raw_max_abs_diff,
)

__all__ = ["CompareResult", "VariantResult", "compare"]

# compare's measuring keywords, and the Measure fields they set
COMPARE = MappingProxyType({"warmup": "warmup", "repeat": "rounds", "share_defaults": "share"})


@dataclass(frozen=True)
class VariantResult:
    """One variant: its options, time samples (ms per call), max |diff| vs the first variant (None: no numbers; nan: a
    NaN; inf: structures differ, see ``mismatch``), kernels, ``has_nan``, ``error`` and what its first call compiled."""

    name: str
    options: OptionSet
    times_ms: tuple[float, ...]
    max_abs_diff: float | None
    kernels: tuple[str, ...]
    timer: str
    has_nan: bool = False
    mismatch: str = ""
    error: str | None = None
    compiles: Compiles | None = None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else math.nan

    @property
    def min_ms(self) -> float:
        return min(self.times_ms) if self.times_ms else math.nan


@dataclass(frozen=True)
class CompareResult:
    variants: dict[str, VariantResult] = field(default_factory=dict)
    calls_per_sample: int = 1

    def __getitem__(self, name: str) -> VariantResult:
        return self.variants[name]

    def table(self) -> str:
        """A plain-text table: one row per variant, time ratios against the first."""
        rows = list(self.variants.values())
        if not rows:
            return "(no variants)"
        base = rows[0].median_ms
        table: list[tuple[str, ...]] = []
        for r in rows:
            if r.error is not None and not r.times_ms:
                table.append((r.name, "-", "-", "-", "-", f"FAILED: {r.error}"))
                continue
            diff = "n/a" if r.max_abs_diff is None else f"{r.max_abs_diff:.3g}"
            ratio = r.median_ms / base if base > 0 else math.nan
            table.append((r.name, f"{r.median_ms:.4f}", f"{r.min_ms:.4f}", f"{ratio:.3f}", diff,
                          r.options.as_shell() or "(no options)"))
            table.extend(("", "", "", "", "", f"  {kernel}") for kernel in r.kernels)
        header = ("variant", "median ms", "min ms", "ratio", "max|diff|", "options / kernels")
        lines = [_texttable.render(header, table, right=(1, 2, 3, 4))]
        lines += [f"{r.name}: output differs from {rows[0].name}'s: {r.mismatch}" for r in rows if r.mismatch]
        lines += [f"{r.name}: {r.error}" for r in rows if r.error is not None and r.times_ms]
        lines += compiles_lines((r.name, r.compiles) for r in rows)
        with_nan = [r.name for r in rows if r.has_nan]
        if with_nan:
            lines.append(f"NaN in the output of: {', '.join(with_nan)} (so max|diff| against it is nan)")
        calls = self.calls_per_sample
        lines.append(f"timer: {rows[0].timer}; each time is the mean of {calls} call{'s' * (calls != 1)} "
                     f"(calibrated: a sample lasts at least {MIN_SAMPLE_S * 1e3:g} ms)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _validated(variants: object) -> dict[str, nv_options]:
    if not isinstance(variants, Mapping):
        raise TypeError("compare(variants=) takes a mapping from a variant's name to its options, e.g. "
                        f"{{'default': {{}}, 'x': {{'enable': [...]}}}}, not {type(variants).__name__}")
    if not variants:
        raise ValueError("compare() needs at least one variant, e.g. variants={'default': {}, 'x': {'enable': [...]}}")
    scopes: dict[str, nv_options] = {}
    for name, spec in variants.items():
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"compare(variants=): a variant's name is a non-empty str (it labels the table), not "
                            f"{type(name).__name__}: {shown(name)}; e.g. variants={{'default': {{}}, ...}}")
        if not isinstance(spec, Mapping):
            raise TypeError(f"variant {shown(name)}: a variant is a mapping of nv_options arguments, like "
                            f"{{'enable': [...], 'disable': [...]}}, not {type(spec).__name__}: {shown(spec)}")
        unknown = set(spec) - {"enable", "disable", "inherit"}
        if unknown:
            raise TypeError(f"variant {shown(name)}: unknown keys {shown(sorted(unknown, key=repr))}; use enable=, "
                            "disable=, inherit=")
        scopes[name] = nv_options(**spec)
    return scopes


def compare(
    fn: Callable[..., Any],
    *args: Any,
    variants: Mapping[str, Mapping[str, Iterable[str] | str | bool]],
    kernels: bool = True,
    show: bool = True,
    measure: Measure | None = None,
    **kwargs: Any,
) -> CompareResult:
    """Run ``fn(*args, **kwargs)`` under each variant's options; time it, diff outputs vs the first, list kernels.

    ``variants``: a name -> ``nv_options`` keyword arguments, each validated first. ``kernels``: list each variant's
    kernels. ``show``: print the table. ``measure`` and its keywords (``warmup=`` 3, ``repeat=`` 20,
    ``share_defaults=``): as for `nvscope.search`. Runs in development mode (docs/audit-and-compare.md).
    """
    m, _ = begin(compare, fn, measure, kwargs, Measure(rounds=20, warmup=3), COMPARE, least_rounds=False)
    repeat, warmup = count("repeat", m.rounds, 1), m.warmup or 0
    scopes = _validated(variants)
    results: dict[str, VariantResult] = {}
    reference: list[tuple[str, Any]] | None = None
    quiet = replace(m, backward=False, module=None, tolerance=None, steps=1)
    runner = Runner(fn, args, kwargs, quiet, lambda message: None, grads=False)
    timer, call = runner.timer, runner.invoke
    first = next(iter(scopes))

    # An explicit developer action, as search: no DevelopmentModeWarning (this context only).
    with dev_mode(True), runner.sharing():
        for name, scope in scopes.items():
            effective, times, names, error = scope.options, [], [], None
            compiled: Compiles | None = None
            try:
                with scope as effective:
                    began = compile_clock()
                    with audit() as log:
                        compared = flatten_outputs(call(), "out")  # copied before any other run can overwrite it
                    compiled = compiles_of(log.records, began)
                    if reference is None:
                        reference = compared
                        timer.detect()
                    for _ in range(warmup):
                        call()
                    if name == first:
                        runner.steps, _ = timer.calibrate(call)
                    times = [timer.time(call, runner.steps) for _ in range(repeat)]
                    try:
                        names = sorted(set(kernel_names(call)[0])) if kernels and timer.cuda else []
                    except Exception as failure:  # the times are kept
                        error = f"listing its kernels: {first_line(failure)}"
            except Exception as failure:
                if reference is None:
                    raise  # nothing measured yet: the caller's function fails on its own
                results[name] = VariantResult(name, effective, (), None, (), timer.name, error=first_line(failure))
                continue
            paired = pair(reference, compared, (shown(first, 30), shown(name, 30)))
            results[name] = VariantResult(name, effective, tuple(times), raw_max_abs_diff(paired), tuple(names),
                                          timer.name, has_nan(paired), paired.problem, error, compiled)
    result = CompareResult(results, runner.steps)
    if show:
        try:
            print(result.table())
        except Exception as error:  # the measurements are returned whatever happens to the printing
            warnings.warn(f"nvscope.compare: the table could not be printed ({first_line(error)}); the result is "
                          "returned", NvscopeWarning, stacklevel=2)
    return result
