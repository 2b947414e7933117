"""What `nvscope.bisect` reports: the culprit options and fusions, the line that reproduces them, every probe.

Plain data (frozen dataclasses) with ``to_json()``/``from_json()``, like the search's and the profile's results.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from nvscope import OptionSet
from nvscope._search_report import _options, _options_dict

__all__ = ["BisectResult", "Probe", "exact_glob"]


def exact_glob(fusion_id: str) -> str:
    """A glob (``fusions=``) that matches exactly ``fusion_id``: ``*``, ``?`` and ``[`` in brackets."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in fusion_id)


@dataclass(frozen=True)
class Probe:
    """One run of the step under ``options`` on ``fusions`` (None: every fusion), in ``stage`` ("confirm",
    "options", "fusions", "rest"): whether it went wrong (``bad``), and how (``detail``)."""

    number: int
    stage: str
    options: OptionSet
    fusions: tuple[str, ...] | None
    bad: bool
    detail: str
    seconds: float


def nv_options_line(options: OptionSet, fusions: tuple[str, ...] | None) -> str:
    """``nv_options(enable=[...], disable=[...], fusions=[...])``: the scope that reproduces."""
    parts = []
    if options.enable:
        parts.append(f"enable={options.enable_list()!r}")
    if options.disable:
        parts.append(f"disable={options.disable_list()!r}")
    if fusions is not None:
        parts.append(f"fusions={[exact_glob(f) for f in fusions]!r}")
    return f"nv_options({', '.join(parts)})"


def run_command(options: OptionSet, fusions: tuple[str, ...] | None, program: list[str]) -> str:
    """The ``python -m nvscope run`` line that runs ``program`` (script and arguments) under the culprit."""
    words = ["python", "-m", "nvscope", "run"]
    if options.enable:
        words += ["--enable", ",".join(options.enable_list())]
    if options.disable:
        words += ["--disable", ",".join(options.disable_list())]
    for fusion in fusions or ():
        words += ["--fusions", exact_glob(fusion)]
    return shlex.join([*words, *program])


@dataclass(frozen=True)
class BisectResult:
    """A minimal culprit of a step that goes wrong under ``given``.

    ``options``: a 1-minimal subset of ``given`` (removing any one option makes the problem go away, with the culprit
    fusions); ``fusions``: a 1-minimal set of fusion ids whose options reproduce it (the other fusions ran with their
    defaults); ``probes``: how many runs of the step under options it took (the baseline runs apart). ``problem``:
    what went wrong in the last run that reproduced it; ``repro_scripts``: the repro scripts nvscope wrote for the
    failing fusions of that run (paths; empty unless a fusion raised). ``others_clean``: whether the step ran clean
    with ``given`` on every fusion except the culprits (None: not checked). ``reproduced`` is False when the step did
    not go wrong under ``given`` at all: there is then no culprit.
    """

    given: OptionSet
    options: OptionSet
    fusions: tuple[str, ...]
    all_fusions: tuple[str, ...]
    log: tuple[Probe, ...]
    check: str
    problem: str
    reproduced: bool
    repro_scripts: tuple[str, ...] = ()
    others_clean: bool | None = None
    mode: str = "in-process"
    program: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def probes(self) -> int:
        return len(self.log)

    def line(self) -> str:
        """The ``nv_options(...)`` call that reproduces the problem (the culprit options on the culprit fusions)."""
        return nv_options_line(self.options, self.fusions)

    def command(self) -> str | None:
        """For a bisect of a program (subprocess mode): the ``python -m nvscope run ...`` line that reproduces."""
        return run_command(self.options, self.fusions, list(self.program)) if self.program else None

    def report(self) -> str:
        """The result in words: the culprit, the line to reproduce it, the repro scripts, the probes."""
        from nvscope._candidates import spec

        lines = [f"nvscope bisect: {spec(self.given) or '(no options)'} on {len(self.all_fusions)} fusions "
                 f"({self.mode}); check: {self.check}"]
        for p in self.log:
            where = "every fusion" if p.fusions is None else f"{len(p.fusions)} fusion{'s' * (len(p.fusions) != 1)}"
            detail = p.detail.splitlines()[0][:100] if p.detail else ""
            lines.append(f"  probe {p.number:>2} {p.stage:<8} {spec(p.options) or '(none)':<36} {where:<14} "
                         f"{'BAD' if p.bad else 'ok '}  {p.seconds:6.2f} s  {detail}")
        if not self.reproduced:
            lines.append(f"not reproduced: the step does not go wrong under {spec(self.given)} ({self.problem})")
            lines += [f"note: {note}" for note in self.notes]
            return "\n".join(lines)
        budget = len(self.given.enable) + len(self.given.disable)
        lines += [
            f"culprit options: {spec(self.options)} (1-minimal: without any one of them it runs clean)",
            f"culprit fusions: {', '.join(self.fusions)} (of {len(self.all_fusions)})",
            f"problem: {self.problem.splitlines()[0] if self.problem else '?'}",
            f"reproduce: with {self.line()}:",
        ]
        command = self.command()
        if command is not None:
            lines.append(f"reproduce the program: {command}")
        lines += [f"repro script: {path}" for path in self.repro_scripts]
        if self.others_clean is not None:
            lines.append(f"the given options on every other fusion: {'clean' if self.others_clean else 'NOT clean'}")
        lines.append(f"{self.probes} probes for {budget} options x {len(self.all_fusions)} fusions "
                     f"({budget * len(self.all_fusions)} option-fusion pairs); {self.elapsed_s:.1f} s")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()

    def as_dict(self) -> dict[str, Any]:
        return {
            "given": _options_dict(self.given), "options": _options_dict(self.options), "fusions": list(self.fusions),
            "all_fusions": list(self.all_fusions), "probes": self.probes, "check": self.check,
            "problem": self.problem, "reproduced": self.reproduced, "line": self.line() if self.reproduced else None,
            "command": self.command() if self.reproduced else None, "repro_scripts": list(self.repro_scripts),
            "others_clean": self.others_clean, "mode": self.mode, "program": list(self.program),
            "elapsed_s": self.elapsed_s, "notes": list(self.notes),
            "log": [{"number": p.number, "stage": p.stage, "options": _options_dict(p.options),
                     "fusions": None if p.fusions is None else list(p.fusions), "bad": p.bad, "detail": p.detail,
                     "seconds": p.seconds} for p in self.log],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BisectResult:
        log = tuple(Probe(p["number"], p["stage"], _options(p["options"]),
                          None if p["fusions"] is None else tuple(p["fusions"]), p["bad"], p["detail"], p["seconds"])
                    for p in data["log"])
        return cls(_options(data["given"]), _options(data["options"]), tuple(data["fusions"]),
                   tuple(data["all_fusions"]), log, data["check"], data["problem"], data["reproduced"],
                   tuple(data["repro_scripts"]), data["others_clean"], data["mode"], tuple(data["program"]),
                   data["elapsed_s"], tuple(data["notes"]))

    @classmethod
    def from_json(cls, text: str) -> BisectResult:
        return cls.from_dict(json.loads(text))
