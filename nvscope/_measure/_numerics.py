"""Outputs of two variants, compared leaf by leaf (`flatten_outputs`, `pair`): judged by search
(`compare_leaves`: max |diff| relative to the output's largest finite |default|, against a tolerance per dtype) and
shown raw by compare (`raw_max_abs_diff`). Tensors and numbers compare by value, str and bytes by equality."""

from __future__ import annotations

import cmath
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from nvscope._core import cut, shown

__all__ = ["DEFAULT_TOLERANCES", "Marker", "Numerics", "Paired", "compare_leaves", "flatten_outputs", "grad_targets",
           "has_nan", "pair", "raw_max_abs_diff", "tolerance_text"]

# max|diff| / max|default| by the default's dtype: a few ulps of the largest value (more for fp32, whose long
# reductions differ in another order); integers and bools exactly.
DEFAULT_TOLERANCES: Mapping[str, float] = MappingProxyType({
    "float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2, "python float": 1e-7,
})


def tolerance_text(tolerance: float | None) -> str:
    """The tolerance a report names: the one given, else the default per dtype."""
    if tolerance is not None:
        return f"{tolerance:g}"
    return "per dtype: " + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_TOLERANCES.items())


@dataclass(frozen=True)
class Numerics:
    """A variant's outputs and gradients against the default's: the largest differences, NaN/Inf found, and
    ``ok`` (within tolerance, same NaN/Inf, structure and str), ``detail`` saying what failed."""

    max_abs_diff: float
    max_rel_diff: float
    ok: bool
    compared: int
    nonfinite: str = ""
    detail: str = ""
    uncompared: str = ""

    @property
    def verdict(self) -> str:
        """"ok", "not compared" (no value could be compared) or "over" (see ``detail``)."""
        return "over" if not self.ok else "ok" if self.compared else "not compared"


class Marker:
    """A leaf without a value to compare (None, an empty container, another object), matched by kind."""

    __slots__ = ("kind", "opaque")

    def __init__(self, kind: str, opaque: bool = False) -> None:
        self.kind, self.opaque = kind, opaque

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Marker) and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return self.kind


_NUMBERS = (bool, int, float, complex)


def flatten_outputs(value: Any, path: str) -> list[tuple[str, Any]]:
    """(path, copy) for every leaf of ``value``: tensors cloned now, else as they are or a `Marker`."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return [(path, value.detach().clone())]
    if isinstance(value, (*_NUMBERS, str, bytes)):
        return [(path, value)]
    if value is None:
        return [(path, Marker("None"))]
    if isinstance(value, Mapping):
        if not value:
            return [(path, Marker("an empty mapping"))]
        return [leaf for key in sorted(value, key=repr) for leaf in flatten_outputs(value[key], f"{path}[{key!r}]")]
    if isinstance(value, (list, tuple)):
        if not value:
            return [(path, Marker("an empty sequence"))]
        return [leaf for i, item in enumerate(value) for leaf in flatten_outputs(item, f"{path}[{i}]")]
    return [(path, Marker(_kind(value), opaque=True))]


def grad_targets(args: tuple[Any, ...], kwargs: dict[str, Any], module: Any) -> list[tuple[str, Any]]:
    """The tensors whose gradients are compared: ``module``'s parameters, then leaf arguments that require grad."""
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
    unique: dict[int, tuple[str, Any]] = {}
    for name, tensor in found:
        unique.setdefault(id(tensor), (name, tensor))  # a tensor found twice keeps its first name
    return list(unique.values())


def _tolerance(reference: Any, tolerance: float | None) -> float:
    if tolerance is not None:
        return float(tolerance)
    if isinstance(reference, (bool, int)):
        return 0.0
    if isinstance(reference, (float, complex)):
        return DEFAULT_TOLERANCES["python float"]
    dtype = str(reference.dtype).removeprefix("torch.")
    if not (reference.is_floating_point() or reference.is_complex()):
        return 0.0  # integer and bool tensors must match exactly
    return DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float16"])  # other floats (fp8, ...): the loosest


class LeafStats(NamedTuple):
    """One pair of numeric leaves: max |a-b|, max |a|, NaN/Inf patterns and counts."""

    diff: float
    scale: float
    special_mismatch: bool
    nan: int
    inf: int
    nan_anywhere: bool


class Paired(NamedTuple):
    """Two outputs' leaves paired by path: ``problem`` says why values cannot be compared ("" when they can)."""

    problem: str
    numeric: list[tuple[str, Any, LeafStats]]
    exact: int
    uncompared: list[str]


def _numbers(a: Any, b: Any) -> LeafStats:
    fa, fb = cmath.isfinite(a), cmath.isfinite(b)
    na, nb = cmath.isnan(a), cmath.isnan(b)
    mismatch = fa != fb or (not fa and not fb and not (a == b or (na and nb)))
    return LeafStats(float(abs(a - b)) if fa and fb else 0.0, float(abs(a)) if fa else 0.0, mismatch, int(nb),
                     int(not fb and not nb), na or nb)


def _tensors(a: Any, b: Any) -> LeafStats | str:
    torch = sys.modules["torch"]
    if a.shape != b.shape:  # a - b would broadcast and compare the wrong elements
        return f"shape {tuple(a.shape)} became {tuple(b.shape)}"
    if a.numel() == 0:
        return LeafStats(0.0, 0.0, False, 0, 0, False)
    wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
    x, y = a.to(wide), b.to(device=a.device, dtype=wide)
    fx, fy = torch.isfinite(x), torch.isfinite(y)
    both = fx & fy
    nan_x, nan_y = torch.isnan(x), torch.isnan(y)
    same_special = (x == y) | (nan_x & nan_y)
    mismatch = bool(((fx != fy) | (~fx & ~fy & ~same_special)).any())
    nan = int(nan_y.sum())
    inf = int((~fy).sum()) - nan
    diff = float((x - y).abs()[both].max()) if bool(both.any()) else 0.0
    scale = float(x.abs()[fx].max()) if bool(fx.any()) else 0.0
    return LeafStats(diff, scale, mismatch, nan, inf, nan > 0 or bool(nan_x.any()))


def _kind(value: Any) -> str:
    if isinstance(value, Marker):
        return value.kind
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def pair(reference: list[tuple[str, Any]], leaves: list[tuple[str, Any]],
         names: tuple[str, str] = ("the default", "this variant")) -> Paired:
    """Pair two flattened outputs (`flatten_outputs`) by path; ``names`` name them in messages."""
    paths, other = [p for p, _ in reference], [p for p, _ in leaves]
    if paths != other:
        own, theirs = set(paths), set(other)
        where = []
        for only, name in (([p for p in paths if p not in theirs], names[0]), ([p for p in other if p not in own],
                                                                               names[1])):
            if only:
                where.append(", ".join(cut(p, 80) for p in only[:2]) + (", ..." if len(only) > 2 else "") +
                             f" only in {name}")
        return Paired(f"the structure differs: {'; '.join(where) or 'the same paths, reordered'}", [], 0, [])
    torch = sys.modules.get("torch")
    numeric: list[tuple[str, Any, LeafStats]] = []
    exact, uncompared = 0, []
    for (path, a), (_, b) in zip(reference, leaves, strict=True):
        is_tensor = torch is not None and isinstance(a, torch.Tensor)
        if is_tensor != (torch is not None and isinstance(b, torch.Tensor)) or (
                not is_tensor and (isinstance(a, bool) != isinstance(b, bool)
                                   or isinstance(a, _NUMBERS) != isinstance(b, _NUMBERS)
                                   or (not isinstance(a, _NUMBERS) and _kind(a) != _kind(b)))):
            return Paired(f"{cut(path, 80)}: {_kind(a) if not is_tensor else 'a tensor'} became "
                          f"{'a tensor' if torch is not None and isinstance(b, torch.Tensor) else _kind(b)}",
                          [], 0, [])
        if is_tensor:
            stats = _tensors(a, b)
            if isinstance(stats, str):
                return Paired(f"{cut(path, 80)}: {stats}", [], 0, [])
            numeric.append((path, a, stats))
        elif isinstance(a, _NUMBERS):
            numeric.append((path, a, _numbers(a, b)))
        elif isinstance(a, (str, bytes)):
            if a != b:
                return Paired(f"{cut(path, 80)}: {shown(a, 40)} became {shown(b, 40)}", [], 0, [])
            exact += 1
        elif a.opaque:
            uncompared.append(f"{cut(path, 80)} ({a.kind})")
    return Paired("", numeric, exact, uncompared)


def compare_leaves(reference: list[tuple[str, Any]], leaves: list[tuple[str, Any]],
                   tolerance: float | None) -> Numerics:
    """The search's judgement of a variant's leaves against the default's."""
    paired = pair(reference, leaves)
    uncompared = ", ".join(paired.uncompared[:3]) + (", ..." if len(paired.uncompared) > 3 else "")
    if paired.problem:
        return Numerics(math.inf, math.inf, False, 0, "", paired.problem, uncompared)
    worst_abs = worst_rel = 0.0
    detail, special = "", []
    for path, a, (diff, scale, mismatch, nan, inf, _) in paired.numeric:
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, rel)
        special += [f"{kind} in {cut(path, 80)} ({count})" for kind, count in (("NaN", nan), ("Inf", inf)) if count]
        bound = _tolerance(a, tolerance)
        if not detail and mismatch:
            detail = f"{cut(path, 80)}: NaN/Inf where the default has none (or the reverse)"
        elif not detail and rel > bound:
            detail = f"{cut(path, 80)}: rel diff {rel:.2g} > {bound:g}"
    return Numerics(worst_abs, worst_rel, not detail, len(paired.numeric) + paired.exact, "; ".join(special[:4]),
                    detail, uncompared)


def raw_max_abs_diff(paired: Paired) -> float | None:
    """compare's number: the raw max |diff|; nan with a NaN, inf for a structure problem; None: nothing."""
    if paired.problem:
        return math.inf
    if not paired.numeric:
        return None
    if any(stats.nan_anywhere for _, _, stats in paired.numeric):
        return math.nan
    return max(math.inf if stats.special_mismatch else stats.diff for _, _, stats in paired.numeric)


def has_nan(paired: Paired) -> bool:
    """Whether the compared (second) output holds a NaN."""
    return any(stats.nan for _, _, stats in paired.numeric)
