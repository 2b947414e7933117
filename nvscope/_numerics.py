"""The search's numerics: which outputs and gradients of a variant are copied, and how they are judged against
the default's (max abs and relative difference, NaN/Inf, a tolerance per dtype).

Relative to each tensor's scale (its largest finite ``|default|``), not elementwise, which explodes near zero.
`nvscope.compare` reports the raw max|diff| instead (NaN propagating): it shows differences, it does not judge them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_TOLERANCES", "Numerics", "compare_leaves", "flatten_outputs", "grad_targets"]

# Bounds on max|candidate - default| / max|default| per output or gradient, by the default's dtype, when the user
# gives no tolerance: a few units in the last place of the largest value for bf16 (8 significant bits) and fp16,
# more for fp32, whose reductions over thousands of terms legitimately differ by more than one ulp in another order.
# A wrong kernel is off by far more. Integer and bool outputs must match exactly.
DEFAULT_TOLERANCES: dict[str, float] = {
    "float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2, "python float": 1e-7,
}


@dataclass(frozen=True)
class Numerics:
    """A variant's outputs (and gradients) against the default's.

    ``max_abs_diff`` is the largest ``|candidate - default|`` over every compared value where both are finite;
    ``max_rel_diff`` the largest, over outputs/gradients, of that difference divided by the output's largest
    ``|default|`` (relative to the tensor's scale, not elementwise, which explodes near zero). ``nonfinite`` names
    where the variant has NaN/Inf; ``ok`` is False when a difference exceeds the tolerance, NaN/Inf appear where the
    default has finite values (or the reverse), or the structure differs; ``detail`` says which.
    """

    max_abs_diff: float
    max_rel_diff: float
    ok: bool
    compared: int
    nonfinite: str = ""
    detail: str = ""


def flatten_outputs(value: Any, path: str) -> list[tuple[str, Any]]:
    """(path, copy) for every tensor and number in ``value`` (nested lists, tuples, dicts); other leaves are not
    compared. Tensors are detached and cloned: the copy is the value at this moment."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return [(path, value.detach().clone())]
    if isinstance(value, (bool, int, float)):
        return [(path, value)]
    if isinstance(value, Mapping):
        return [leaf for key in sorted(value, key=repr) for leaf in flatten_outputs(value[key], f"{path}[{key!r}]")]
    if isinstance(value, (list, tuple)):
        return [leaf for i, item in enumerate(value) for leaf in flatten_outputs(item, f"{path}[{i}]")]
    return []


def grad_targets(args: tuple[Any, ...], kwargs: dict[str, Any], module: Any) -> list[tuple[str, Any]]:
    """The tensors whose gradients are compared: ``module``'s parameters, then leaf tensors in the arguments that
    require grad (each once)."""
    torch = sys.modules.get("torch")
    found: list[tuple[str, Any]] = []
    if module is not None:
        named = getattr(module, "named_parameters", None)
        if not callable(named) and (isinstance(module, (str, bytes)) or not hasattr(module, "__iter__")):
            raise TypeError(f"module= takes an nn.Module (or anything with named_parameters()) or an iterable of "
                            f"tensors, not {type(module).__name__}: {module!r:.80}")
        pairs = list(named()) if callable(named) else [(f"param{i}", t) for i, t in enumerate(module)]
        for name, tensor in pairs:
            if torch is None or not isinstance(tensor, torch.Tensor):
                raise TypeError(f"module= takes an nn.Module (or anything with named_parameters()) or an iterable "
                                f"of tensors; {name} is a {type(tensor).__name__}")
            if tensor.requires_grad:
                found.append((f"grad[{name}]", tensor))
    if torch is not None:
        leaves = [(f"grad[arg{i}]", a) for i, a in enumerate(args)] + [(f"grad[{k}=]", a) for k, a in kwargs.items()]
        for name, value in leaves:
            if isinstance(value, torch.Tensor) and value.requires_grad and value.is_leaf:
                found.append((name, value))
    seen: set[int] = set()
    unique = []
    for name, tensor in found:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            unique.append((name, tensor))
    return unique


def _tolerance(reference: Any, tolerance: float | None) -> float:
    if tolerance is not None:
        return float(tolerance)
    if isinstance(reference, bool) or isinstance(reference, int):
        return 0.0
    if isinstance(reference, float):
        return DEFAULT_TOLERANCES["python float"]
    dtype = str(reference.dtype).removeprefix("torch.")
    if not (reference.is_floating_point() or reference.is_complex()):
        return 0.0  # integer and bool tensors must match exactly
    return DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float16"])  # other floats (fp8, ...): the loosest


def _leaf_diff(a: Any, b: Any) -> tuple[float, float, bool, int, int] | str:
    """(max |a-b| where both finite, max |a| where finite, NaN/Inf pattern differs, NaNs in b, Infs in b), or why
    the two cannot be compared."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"a tensor became {type(b).__name__}"
        if a.shape != b.shape:
            return f"shape {tuple(a.shape)} became {tuple(b.shape)}"
        if a.numel() == 0:
            return 0.0, 0.0, False, 0, 0
        wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
        x, y = a.to(wide), b.to(device=a.device, dtype=wide)
        fx, fy = torch.isfinite(x), torch.isfinite(y)
        both = fx & fy
        same_special = (x == y) | (torch.isnan(x) & torch.isnan(y))
        mismatch = bool(((fx != fy) | (~fx & ~fy & ~same_special)).any())
        nan = int(torch.isnan(y).sum())
        inf = int((~fy).sum()) - nan
        diff = float((x - y).abs()[both].max()) if bool(both.any()) else 0.0
        scale = float(x.abs()[fx].max()) if bool(fx.any()) else 0.0
        return diff, scale, mismatch, nan, inf
    if not isinstance(b, (bool, int, float)) or isinstance(b, bool) != isinstance(a, bool):
        return f"a {type(a).__name__} became {type(b).__name__}"
    fa, fb = math.isfinite(a), math.isfinite(b)
    mismatch = fa != fb or (not fa and not fb and not (a == b or (math.isnan(a) and math.isnan(b))))
    return (abs(a - b) if fa and fb else 0.0, abs(a) if fa else 0.0, mismatch, int(math.isnan(b)),
            int(math.isinf(b)))


def compare_leaves(reference: list[tuple[str, Any]], leaves: list[tuple[str, Any]],
                   tolerance: float | None) -> Numerics:
    """A variant's copied leaves against the default's: differences, NaN/Inf, and whether all are within tolerance."""
    if [p for p, _ in reference] != [p for p, _ in leaves]:
        missing = sorted({p for p, _ in reference} ^ {p for p, _ in leaves})
        return Numerics(math.inf, math.inf, False, 0, "",
                        f"outputs/gradients differ in structure ({', '.join(missing[:3]) or 'order'})")
    worst_abs = worst_rel = 0.0
    detail, special = "", []
    for (path, a), (_, b) in zip(reference, leaves, strict=True):
        result = _leaf_diff(a, b)
        if isinstance(result, str):
            return Numerics(math.inf, math.inf, False, len(reference), "", f"{path}: {result}")
        diff, scale, mismatch, nan, inf = result
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, rel)
        special += [f"{kind} in {path} ({count})" for kind, count in (("NaN", nan), ("Inf", inf)) if count]
        bound = _tolerance(a, tolerance)
        if not detail and mismatch:
            detail = f"{path}: NaN/Inf where the default has none (or the reverse)"
        elif not detail and rel > bound:
            detail = f"{path}: rel diff {rel:.2g} > {bound:g}"
    return Numerics(worst_abs, worst_rel, not detail, len(reference), "; ".join(special[:4]), detail)
