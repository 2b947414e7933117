"""`Measure`: how the tools measure, one frozen object with named presets, and the fold of a tool's keywords into it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvscope._core import cut, shown
from nvscope._measure import _checks

__all__ = ["TIMED", "Measure", "measure_of"]

_ALIASES = (("steps_per_round", "steps"), ("share_defaults", "share"))


@dataclass(frozen=True)
class Measure:
    """How a tool measures (docs/search.md, "The call"). A *round* is one timed sample of every variant, in a random
    order (compare's ``repeat=``); ``steps``: the least calls of the step per sample; ``warmup``: untimed calls;
    ``repeat``: rescue's runs of the defaults; None: the tool's default. ``tolerance`` (None: by dtype), ``backward``,
    ``module``, ``seed``, ``share``, ``timeout``: as the docs say. Each field is also a tool keyword
    (``steps_per_round=``, ``share_defaults=``), which wins over ``measure=``."""

    rounds: int | None = None
    steps: int | None = None
    warmup: int | None = None
    tolerance: float | None = None
    backward: bool = False
    module: Any = None
    seed: int = 0
    progress: bool = True
    share: bool = True
    repeat: int | None = None
    timeout: float = 600.0

    def __post_init__(self) -> None:
        for name in ("steps", "repeat"):  # rounds: checked by each tool (its least differs)
            if getattr(self, name) is not None:
                _checks.count(name, getattr(self, name), 1)
        if self.warmup is not None:
            _checks.count("warmup", self.warmup)
        _checks.number("tolerance", self.tolerance, none=True)
        _checks.integer("seed", self.seed)
        _checks.number("timeout", self.timeout, above=True)
        if not isinstance(self.share, bool):
            raise TypeError(f"share_defaults= takes True or False, not {cut(repr(self.share), 40)}")

    @classmethod
    def preset(cls, name: str) -> Measure:
        """``"default"`` (each tool's own), ``"quick"`` (10 rounds of one call, one warm-up call: a first look)
        or ``"thorough"`` (60 rounds, 5 warm-up calls: narrower intervals)."""
        presets = {"default": cls(), "quick": cls(rounds=10, steps=1, warmup=1), "thorough": cls(rounds=60, warmup=5)}
        if name not in presets:
            raise ValueError(f"Measure.preset() takes {', '.join(map(repr, presets))}, not {shown(name)}")
        return presets[name]

    def over(self, defaults: Measure) -> Measure:
        """``defaults`` with every field this one sets (not the class default) taken from this one."""
        unset = Measure()
        changed = {}
        for f in dataclasses.fields(self):
            value, default = getattr(self, f.name), getattr(unset, f.name)
            if value is not default and (type(value) is not type(default) or value != default):
                changed[f.name] = value
        return dataclasses.replace(defaults, **changed)


def measure_of(tool: str, measure: object, kwargs: dict[str, Any], defaults: Measure,
               keywords: Mapping[str, str] | tuple[str, ...]) -> Measure:
    """The Measure ``tool`` runs with: ``defaults``, under ``measure``'s set fields, under the ``keywords``
    taken out of ``kwargs`` (a bad one said by its name)."""
    if measure is not None and not isinstance(measure, Measure):
        raise TypeError(f"{tool}(measure=) takes an nvscope.Measure, e.g. nvscope.Measure.preset('quick'), not "
                        f"{cut(repr(measure), 60)}")
    fields = keywords if isinstance(keywords, Mapping) else {k: dict(_ALIASES).get(k, k) for k in keywords}
    given = {fields[k]: (k, kwargs.pop(k)) for k in list(kwargs) if k in fields}
    base = defaults if measure is None else measure.over(defaults)
    try:
        return dataclasses.replace(base, **{name: value for name, (_, value) in given.items()})
    except (TypeError, ValueError) as error:
        for name, (keyword, _) in given.items():
            text = str(error)
            if text.startswith(f"{name} ") and keyword != name:
                raise type(error)(keyword + text[len(name):]) from None
        raise


TIMED = ("rounds", "steps_per_round", "warmup", "tolerance", "backward", "module", "seed", "progress",
         "share_defaults")  # search's, profile's
