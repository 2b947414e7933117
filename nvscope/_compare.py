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

import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nvscope import _table
from nvscope._optionset import OptionSet
from nvscope._scope import nv_options

__all__ = ["CompareResult", "VariantResult", "compare"]


@dataclass(frozen=True)
class VariantResult:
    """One variant: its options, run times in ms (``repeat`` of them), the output's max |diff| vs the first
    variant (0.0 for the first; None when outputs hold no numbers), and the kernel names it launched (empty when
    torch.profiler is unavailable or no kernel ran)."""

    name: str
    options: OptionSet
    times_ms: tuple[float, ...]
    max_abs_diff: float | None
    kernels: tuple[str, ...]
    timer: str

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
        lines = [_table.render(header, table, right=(1, 2, 3, 4))]
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


def _max_abs_diff(a: Any, b: Any) -> float | None:
    left, right = _leaves(a), _leaves(b)
    if len(left) != len(right):
        raise ValueError(f"variants returned different structures: {len(left)} vs {len(right)} leaves")
    worst: float | None = None
    torch = sys.modules.get("torch")
    for x, y in zip(left, right, strict=True):
        if torch is not None and isinstance(x, torch.Tensor):
            if x.numel() == 0:
                continue
            diff = float((x.detach().double() - y.detach().double()).abs().max().item())
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            diff = abs(float(x) - float(y))
        else:
            continue
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
    partition), then runs ``repeat`` timed times. Prints the table unless ``show=False``; returns the data.
    """
    if not variants:
        raise ValueError("compare() needs at least one variant, e.g. variants={'default': {}, 'x': {'enable': [...]}}")
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    scopes: dict[str, nv_options] = {}
    for name, spec in variants.items():
        unknown = set(spec) - {"enable", "disable", "inherit"}
        if unknown:
            raise TypeError(f"variant {name!r}: unknown keys {sorted(unknown)}; use enable=, disable=, inherit=")
        scopes[name] = nv_options(**spec)  # type: ignore[arg-type]

    results: dict[str, VariantResult] = {}
    reference: Any = None
    for index, (name, scope) in enumerate(scopes.items()):
        with scope as effective:
            def call() -> Any:
                return fn(*args, **kwargs)

            output = call()
            for _ in range(warmup):
                call()
            cuda = _on_cuda(output)
            times, timer = _time(call, repeat, cuda)
            names = _kernels(call, cuda) if kernels else []
        if index == 0:
            reference = output
            diff = _max_abs_diff(output, output)
        else:
            diff = _max_abs_diff(reference, output)
        results[name] = VariantResult(name, effective, tuple(times), diff, tuple(names), timer)
    result = CompareResult(results)
    if show:
        print(result.table())
    return result
