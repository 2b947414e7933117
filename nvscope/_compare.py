"""A/B in one process: run one function under several option sets and compare time, outputs and kernels.

    result = nvscope.compare(jitted_model, x, variants={
        "aten": {},
        "codegen": {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]},
    })

One process suffices because nvscope gives each option set its own compiled cache: the variants never share a
kernel. Times are CUDA events when the outputs live on a GPU (one event pair per run, so host overhead counts, as
it does for a user), ``time.perf_counter`` otherwise.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nvscope import _texttable
from nvscope._optionset import OptionSet
from nvscope._scope import nv_options

__all__ = ["CompareResult", "VariantResult", "compare"]


@dataclass(frozen=True)
class VariantResult:
    """One variant: its options, run times in ms (``repeat`` of them), the output's max |diff| vs the first
    variant (0.0 for the first; None when outputs hold no numbers; nan when either output has a NaN where the other
    does not hold the same value, which a NaN never is), the kernel names it launched (empty when torch.profiler is
    unavailable or no kernel ran), and whether its output has a NaN."""

    name: str
    options: OptionSet
    times_ms: tuple[float, ...]
    max_abs_diff: float | None
    kernels: tuple[str, ...]
    timer: str
    has_nan: bool = False

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def min_ms(self) -> float:
        return min(self.times_ms)


@dataclass(frozen=True)
class CompareResult:
    variants: dict[str, VariantResult] = field(default_factory=dict)

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
            diff = "n/a" if r.max_abs_diff is None else f"{r.max_abs_diff:.3g}"
            ratio = r.median_ms / base if base > 0 else float("nan")
            table.append((r.name, f"{r.median_ms:.4f}", f"{r.min_ms:.4f}", f"{ratio:.3f}", diff,
                          r.options.as_shell() or "(no options)"))
            table.extend(("", "", "", "", "", f"  {kernel}") for kernel in r.kernels)
        header = ("variant", "median ms", "min ms", "ratio", "max|diff|", "options / kernels")
        lines = [_texttable.render(header, table, right=(1, 2, 3, 4))]
        with_nan = [r.name for r in rows if r.has_nan]
        if with_nan:
            lines.append(f"NaN in the output of: {', '.join(with_nan)} (so max|diff| against it is nan)")
        lines.append(f"timer: {rows[0].timer}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for key in sorted(value, key=repr) for leaf in _leaves(value[key])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _snapshot(value: Any) -> list[Any]:
    """The output's leaves, copied: the next run may overwrite a buffer the function returns again (a preallocated
    output, a cache). Tensors are cloned; numbers are immutable; other leaves are not compared, so kept as they are.
    Flattening copies the containers too, which is what ``copy.deepcopy`` of a list of numbers would buy."""
    torch = sys.modules.get("torch")
    return [leaf.detach().clone() if torch is not None and isinstance(leaf, torch.Tensor) else leaf
            for leaf in _leaves(value)]


def _has_nan(leaves: list[Any]) -> bool:
    torch = sys.modules.get("torch")
    for leaf in leaves:
        if torch is not None and isinstance(leaf, torch.Tensor):
            if (leaf.is_floating_point() or leaf.is_complex()) and bool(torch.isnan(leaf).any()):
                return True
        elif isinstance(leaf, float) and math.isnan(leaf):
            return True
    return False


def _leaf_diff(index: int, x: Any, y: Any) -> float | None:
    """max |x - y| for one pair of leaves (nan if a NaN is involved; 0 where both hold the same infinity)."""
    torch = sys.modules.get("torch")
    if torch is not None and (isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor)):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            raise ValueError(f"variants returned different structures: leaf {index} is a tensor in one output only")
        if x.shape != y.shape:  # x - y would broadcast and compare the wrong elements
            raise ValueError(f"variants returned different structures: leaf {index} has shape {tuple(x.shape)} vs "
                             f"{tuple(y.shape)}")
        if x.numel() == 0:
            return None
        wide = torch.complex128 if x.is_complex() or y.is_complex() else torch.float64
        a, b = x.detach().to(wide), y.detach().to(wide)
        diff = torch.where(a == b, 0.0, (a - b).abs())  # inf == inf is no difference; NaN != NaN is
        return float(diff.max().item())  # torch's max propagates NaN, whatever its position
    if _is_number(x) and _is_number(y):
        return 0.0 if x == y else abs(float(x) - float(y))
    return None


def _max_abs_diff(left: list[Any], right: list[Any]) -> float | None:
    if len(left) != len(right):
        raise ValueError(f"variants returned different structures: {len(left)} vs {len(right)} leaves")
    worst: float | None = None
    for index, (x, y) in enumerate(zip(left, right, strict=True)):
        diff = _leaf_diff(index, x, y)
        if diff is None:
            continue
        if math.isnan(diff):
            return diff  # not max(): max(0.0, nan) is 0.0 but max(nan, 0.0) is nan
        worst = diff if worst is None else max(worst, diff)
    return worst


def _on_cuda(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and any(isinstance(x, torch.Tensor) and x.is_cuda for x in _leaves(value))


def _time(call: Callable[[], Any], repeat: int, cuda: bool) -> tuple[list[float], str]:
    if cuda:
        import torch

        times = []
        for _ in range(repeat):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return times, "CUDA events"
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, "time.perf_counter"


def _kernels(call: Callable[[], Any], cuda: bool) -> list[str]:
    if not cuda:
        return []
    from nvscope._kernels import kernel_names

    return sorted(set(kernel_names(call)[0]))


def compare(
    fn: Callable[..., Any],
    *args: Any,
    variants: Mapping[str, Mapping[str, Iterable[str] | str | bool]],
    warmup: int = 3,
    repeat: int = 20,
    kernels: bool = True,
    show: bool = True,
    **kwargs: Any,
) -> CompareResult:
    """Run ``fn(*args, **kwargs)`` under each variant's options; time it, diff outputs vs the first, list kernels.

    ``variants`` maps a name to ``nv_options`` keyword arguments (``enable``, ``disable``, ``inherit``); every
    variant is validated before anything runs. Each variant warms up ``warmup`` times (compiling its own
    partition), then runs ``repeat`` timed times. The output of each variant's first call is copied at once (a
    function may return a buffer it overwrites later) and compared with the first variant's, leaf by leaf; a NaN
    makes max|diff| nan and is named under the table. Prints the table unless ``show=False``; returns the data.
    """
    if not variants:
        raise ValueError("compare() needs at least one variant, e.g. variants={'default': {}, 'x': {'enable': [...]}}")
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    if not isinstance(variants, Mapping):
        raise TypeError("compare(variants=) takes a mapping from a variant's name to its options, e.g. "
                        f"{{'default': {{}}, 'x': {{'enable': [...]}}}}, not {type(variants).__name__}")
    scopes: dict[str, nv_options] = {}
    for name, spec in variants.items():
        if not isinstance(spec, Mapping):
            shown = repr(spec) if len(repr(spec)) <= 60 else repr(spec)[:57] + "..."
            raise TypeError(f"variant {name!r}: a variant is a mapping of nv_options arguments, like "
                            f"{{'enable': [...], 'disable': [...]}}, not {type(spec).__name__}: {shown}")
        unknown = set(spec) - {"enable", "disable", "inherit"}
        if unknown:
            raise TypeError(f"variant {name!r}: unknown keys {sorted(unknown)}; use enable=, disable=, inherit=")
        scopes[name] = nv_options(**spec)  # type: ignore[arg-type]

    results: dict[str, VariantResult] = {}
    reference: list[Any] | None = None
    for name, scope in scopes.items():
        with scope as effective:
            def call() -> Any:
                return fn(*args, **kwargs)

            output = call()
            compared = _snapshot(output)  # before any other run can overwrite it
            for _ in range(warmup):
                call()
            cuda = _on_cuda(output)
            times, timer = _time(call, repeat, cuda)
            names = _kernels(call, cuda) if kernels else []
        if reference is None:
            reference = compared
        diff = _max_abs_diff(reference, compared)
        results[name] = VariantResult(name, effective, tuple(times), diff, tuple(names), timer, _has_nan(compared))
    result = CompareResult(results)
    if show:
        print(result.table())
    return result
