"""What the tools' results share: JSON data and back, `Compiles`, the charts' loader, the lines to paste."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nvscope._core import OptionSet, exact_glob
from nvscope._measure._numerics import Numerics
from nvscope._measure._stats import RatioSummary

__all__ = [
    "Compiles",
    "compiles_lines",
    "dict_of",
    "figure_class",
    "finite",
    "numerics_dict",
    "numerics_from",
    "nv_options_line",
    "options_dict",
    "options_from",
    "run_command",
]

_Loaded = TypeVar("_Loaded", bound="LoadableResult")


class JsonResult:
    """A result saved as strict JSON from its ``as_dict()`` (non-finite floats as strings)."""

    def as_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON."""
        return json.dumps(self.as_dict(), indent=indent, allow_nan=False)


class LoadableResult(JsonResult):
    """A `JsonResult` that ``from_json`` reads back, equal to the one saved."""

    @classmethod
    def from_dict(cls: type[_Loaded], data: dict[str, Any]) -> _Loaded:
        raise NotImplementedError

    @classmethod
    def from_json(cls: type[_Loaded], text: str) -> _Loaded:
        """The result ``to_json`` wrote."""
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class Compiles:
    """What one variant's first call compiled: ``fusions`` that ran, ``definitions`` compiled through
    nvscope's partitions, ``seconds`` compiling, and ``unshared`` fusions on their own path (not seen)."""

    fusions: int
    definitions: int
    seconds: float
    unshared: int = 0

    def line(self) -> str:
        """``N fusions, M definitions compiled, S s compiling`` (and what was not counted)."""
        def plural(n: int, noun: str) -> str:
            return f"{n} {noun}{'s' * (n != 1)}"

        text = (f"{plural(self.fusions, 'fusion')}, {plural(self.definitions, 'definition')} compiled, "
                f"{self.seconds:.2f} s compiling")
        if self.unshared:
            text += f" ({self.unshared} on their own path, whose compiles are not counted)"
        return text

    __str__ = line

    def as_dict(self) -> dict[str, Any]:
        return {"fusions": self.fusions, "definitions": self.definitions, "seconds": self.seconds,
                "unshared": self.unshared, "line": self.line()}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Compiles | None:
        """What `as_dict` wrote (None: none)."""
        return None if data is None else cls(int(data["fusions"]), int(data["definitions"]), float(data["seconds"]),
                                             int(data.get("unshared", 0)))


def dict_of(value: Compiles | RatioSummary | None) -> dict[str, Any] | None:
    """An optional field of a result as JSON data: its ``as_dict()``, or None."""
    return None if value is None else value.as_dict()


def compiles_lines(variants: Iterable[tuple[str, Compiles | None]], compile_s: float | None = None) -> list[str]:
    """A report's lines on ``compile_s`` (seconds compiling new partitions; None: none) and each first call."""
    spent = [] if compile_s is None else [
        f"compile: {compile_s:.1f} s in the first executions of new partitions (nvFuser compiles there; a partition "
        "reused across rounds or sharing an equal fusion's definition compiles nothing)"]
    lines = [f"  {label}: {counts.line()}" for label, counts in variants if counts is not None]
    head = ["first call of each variant (the defaults shared unless the tool was told not to):"] if lines else []
    return spent + head + lines


def options_dict(options: OptionSet) -> dict[str, list[str]]:
    """An option set as sorted JSON data."""
    return {"enable": options.enable_list(), "disable": options.disable_list()}


def options_from(data: dict[str, list[str]]) -> OptionSet:
    """The option set that `options_dict` wrote."""
    return OptionSet(data.get("enable", ()), data.get("disable", ()))


def finite(value: float) -> float | str:
    """``value``, or "inf", "-inf" or "nan" (strict JSON has no non-finite numbers)."""
    return value if math.isfinite(value) else str(value)


def numerics_dict(n: Numerics | None) -> dict[str, Any] | None:
    """A numerics verdict as JSON data."""
    return None if n is None else {
        "max_abs_diff": finite(n.max_abs_diff), "max_rel_diff": finite(n.max_rel_diff), "ok": n.ok,
        "compared": n.compared, "nonfinite": n.nonfinite, "detail": n.detail, "uncompared": n.uncompared}


def numerics_from(data: dict[str, Any] | None) -> Numerics | None:
    """The numerics verdict that `numerics_dict` wrote."""
    return None if data is None else Numerics(float(data["max_abs_diff"]), float(data["max_rel_diff"]), data["ok"],
                                              data["compared"], data["nonfinite"], data["detail"],
                                              data.get("uncompared", ""))


def figure_class(who: str, what: str) -> Any:
    """matplotlib's ``Figure`` (no pyplot) for ``who``, or an ImportError saying ``what`` works without it."""
    import importlib

    try:
        return importlib.import_module("matplotlib.figure").Figure
    except ImportError:
        raise ImportError(f"{who} needs matplotlib: pip install matplotlib ({what} itself works without it)") from None


def nv_options_line(options: OptionSet, fusions: Iterable[str] | None = None) -> str:
    """The ``nv_options(...)`` call to paste (``fusions`` by exact glob; None: every fusion)."""
    parts = [f"{kind}={names!r}" for kind, names in options_dict(options).items() if names]
    if fusions is not None:
        parts.append(f"fusions={[exact_glob(f) for f in fusions]!r}")
    return f"nv_options({', '.join(parts)})"


def run_command(options: OptionSet, fusions: Iterable[str] | None, program: Sequence[str], *, python: str = "python",
                audit: bool = True) -> list[str]:
    """The ``python -m nvscope run`` command, as words, running ``program`` under ``options`` on ``fusions``;
    one ``--flag=value`` word per flag and ``--`` before a script, so that no argument reads as a flag."""
    words = [python, "-m", "nvscope", "run", *([] if audit else ["--no-audit"])]
    words += [f"--{kind}={','.join(names)}" for kind, names in options_dict(options).items() if names]
    words += [f"--fusions={exact_glob(f)}" for f in fusions or ()]
    return [*words, *([] if tuple(program[:1]) == ("-m",) else ["--"]), *program]
