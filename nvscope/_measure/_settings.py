"""`Measure`: how the tools measure, one frozen object with named presets (as Hypothesis's ``settings``).

The words, defined once:

- *step*: the user's callable that a tool runs;
- *round*: one timed sample of every variant, in a random order (compare's ``repeat=`` keyword is its older name);
- *steps*: the least calls of the step in one sample (raised when a call is too short to time);
- *warm-up*: untimed calls of each variant after its first;
- *repeat*: rescue's runs of the defaults that tell how often a flaky failure fails (no timing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvscope._core import cut, shown
from nvscope._measure import _checks

__all__ = ["TIMED", "Measure", "measure_of"]

# A tool's keywords that name a field of another name; every other keyword is the field's own name.
_ALIASES = (("steps_per_round", "steps"), ("share_defaults", "share"))


@dataclass(frozen=True)
class Measure:
    """How a tool measures. ``None`` in ``rounds``, ``steps``, ``warmup`` and ``repeat`` takes the tool's own
    default (each tool's docs page says it); ``tolerance=None`` bounds each output by its dtype's tolerance.

    ``backward``: the step returns a scalar loss and the tool calls ``.backward()``, comparing the gradients of
    ``module``'s parameters too. ``seed``: the order of the variants in each round. ``progress``: lines on stderr.
    ``share``: the step runs in ``nv_options(share=True)``, so defaults compile once per distinct definition.
    ``timeout``: seconds one child process may run (``bisect_program``, a rescue of a target).

    A tool also takes each field as a keyword (``steps_per_round=`` for ``steps``, ``share_defaults=`` for
    ``share``); a keyword given with ``measure=`` wins over that field."""

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
        for name in ("steps", "repeat"):  # rounds: each tool's least (intervals need more than compare does)
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
        """A named preset: ``"default"`` (each tool's own), ``"quick"`` (10 rounds of one call, one warm-up call:
        a first look, verdicts for up to 20 candidates) or ``"thorough"`` (60 rounds, 5 warm-up calls: narrower
        intervals, for differences of a few percent)."""
        presets = {"default": cls(), "quick": cls(rounds=10, steps=1, warmup=1), "thorough": cls(rounds=60, warmup=5)}
        if name not in presets:
            raise ValueError(f"Measure.preset() takes {', '.join(map(repr, presets))}, not {shown(name)}")
        return presets[name]

    def over(self, defaults: Measure) -> Measure:
        """``defaults`` with every field this one sets (differs from the class default) taken from this one."""
        unset = Measure()
        changed = {}
        for f in dataclasses.fields(self):
            value, default = getattr(self, f.name), getattr(unset, f.name)
            if value is not default and (type(value) is not type(default) or value != default):
                changed[f.name] = value
        return dataclasses.replace(defaults, **changed)


def measure_of(tool: str, measure: object, kwargs: dict[str, Any], defaults: Measure,
               keywords: Mapping[str, str] | tuple[str, ...]) -> Measure:
    """The Measure ``tool`` runs with: its ``defaults``, under the fields ``measure`` sets, under the ``keywords``
    given in ``kwargs`` (removed from it: the rest go to the step). ``keywords``: the tool's keyword names, or a
    mapping from each to its field. A keyword's bad value is refused under the keyword's name."""
    if measure is not None and not isinstance(measure, Measure):
        raise TypeError(f"{tool}(measure=) takes an nvscope.Measure, e.g. nvscope.Measure.preset('quick'), not "
                        f"{cut(repr(measure), 60)}")
    fields = keywords if isinstance(keywords, Mapping) else {k: dict(_ALIASES).get(k, k) for k in keywords}
    given = {fields[k]: (k, kwargs.pop(k)) for k in list(kwargs) if k in fields}
    base = defaults if measure is None else measure.over(defaults)
    try:
        return dataclasses.replace(base, **{name: value for name, (_, value) in given.items()})
    except (TypeError, ValueError) as error:  # said under the keyword's own name, not the field's
        for name, (keyword, _) in given.items():
            text = str(error)
            if text.startswith(f"{name} ") and keyword != name:
                raise type(error)(keyword + text[len(name):]) from None
        raise


TIMED = ("rounds", "steps_per_round", "warmup", "tolerance", "backward", "module", "seed", "progress",
         "share_defaults")  # the keywords of search, search_fusions and profile
