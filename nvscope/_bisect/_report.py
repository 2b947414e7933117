"""What `nvscope.bisect` reports: the culprit options and fusions, the line that reproduces them, every probe.

Plain data (frozen dataclasses) with ``to_json()``/``from_json()``, like the search's and the profile's results.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from nvscope._core import OptionSet
from nvscope._measure import (
    Compiles,
    LoadableResult,
    compiles_lines,
    dict_of,
    nv_options_line,
    options_dict,
    options_from,
    run_command,
    spec,
)

__all__ = ["BisectResult", "Culprit", "Probe"]


@dataclass(frozen=True)
class Probe:
    """One run of the step under ``options`` on ``fusions`` (None: every fusion), in ``stage`` ("confirm",
    "options", "fusions", "rest"): whether it went wrong (``bad``), and how (``detail``); ``compiles``: what the
    run compiled (None where it could not be told: a child process that died)."""

    number: int
    stage: str
    options: OptionSet
    fusions: tuple[str, ...] | None
    bad: bool
    detail: str
    seconds: float
    compiles: Compiles | None = None


@dataclass(frozen=True)
class Culprit:
    """One culprit: a 1-minimal set of ``options`` and a 1-minimal set of ``fusions`` (ids) that reproduce it, every
    other fusion on its defaults; ``problem``: what went wrong in its last run; ``repro_scripts``: those written then.
    """

    options: OptionSet
    fusions: tuple[str, ...]
    problem: str
    repro_scripts: tuple[str, ...] = ()

    def line(self) -> str:
        """The ``nv_options(...)`` call that reproduces it."""
        return nv_options_line(self.options, self.fusions)


@dataclass(frozen=True)
class BisectResult(LoadableResult):
    """The culprits of a step that goes wrong under ``given`` (docs/bisect.md, "The result").

    ``culprits``: a minimal culprit of the step, then one among the other fusions, and so on until the rest runs clean;
    ``options``, ``fusions``, ``problem``, ``repro_scripts`` and ``line()`` are the first's. ``others_clean``: the rest
    ran clean (None: no other fusion). ``probes``: runs under options. ``reproduced``: False when nothing went wrong
    under ``given``; ``detail`` says what that run saw.
    """

    given: OptionSet
    culprits: tuple[Culprit, ...]
    all_fusions: tuple[str, ...]
    log: tuple[Probe, ...]
    check: str
    others_clean: bool | None = None
    mode: str = "in-process"
    program: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    notes: tuple[str, ...] = ()
    detail: str = ""
    compile_s: float | None = None  # in-process: seconds in first executions of new partitions; None in subprocesses
    default_compiles: Compiles | None = None  # what the default's run (the reference, or the listing) compiled

    @property
    def reproduced(self) -> bool:
        return bool(self.culprits)

    @property
    def options(self) -> OptionSet:
        return self.culprits[0].options if self.culprits else OptionSet()

    @property
    def fusions(self) -> tuple[str, ...]:
        return self.culprits[0].fusions if self.culprits else ()

    @property
    def problem(self) -> str:
        return self.culprits[0].problem if self.culprits else self.detail

    @property
    def repro_scripts(self) -> tuple[str, ...]:
        return self.culprits[0].repro_scripts if self.culprits else ()

    @property
    def probes(self) -> int:
        return len(self.log)

    def line(self) -> str:
        """The ``nv_options(...)`` call that reproduces the problem (the culprit options on the culprit fusions); when
        the bisect did not reproduce it, a Python comment saying so (there is no scope to paste)."""
        if not self.reproduced:
            return "# not reproduced: no culprit, so no nv_options(...) reproduces it"
        return nv_options_line(self.options, self.fusions)

    def command(self) -> str | None:
        """For a bisect of a program (subprocess mode): the ``python -m nvscope run ...`` line that reproduces."""
        return shlex.join(run_command(self.options, self.fusions, self.program)) if self.program else None

    def report(self) -> str:
        """The result in words: the culprits, the line to reproduce each, the repro scripts, the probes."""
        lines = [f"nvscope bisect: {spec(self.given) or '(no options)'} on {len(self.all_fusions)} fusions "
                 f"({self.mode}); check: {self.check}"]
        for p in self.log:
            where = "every fusion" if p.fusions is None else f"{len(p.fusions)} fusion{'s' * (len(p.fusions) != 1)}"
            detail = p.detail.splitlines()[0][:100] if p.detail else ""
            lines.append(f"  probe {p.number:>2} {p.stage:<8} {spec(p.options) or '(none)':<36} {where:<14} "
                         f"{'BAD' if p.bad else 'ok '}  {p.seconds:6.2f} s  {detail}")
        tail = [*compiles_lines([("defaults", self.default_compiles),
                                 *((f"probe {p.number}", p.compiles) for p in self.log)]),
                *(f"note: {note}" for note in self.notes)]
        if not self.reproduced:
            lines.append(f"not reproduced: the step does not go wrong under {spec(self.given)} ({self.detail})")
            return "\n".join(lines + tail)
        budget = len(self.given.enable) + len(self.given.disable)
        for i, c in enumerate(self.culprits):
            head = "culprit" if i == 0 else f"culprit {i + 1} (among the other fusions)"
            lines += [
                f"{head}: options {spec(c.options)} (1-minimal: without any one of them it runs clean) on fusions "
                f"{', '.join(c.fusions)} (of {len(self.all_fusions)})",
                f"  problem: {c.problem.splitlines()[0] if c.problem else '?'}",
                f"  reproduce: with {c.line()}:",
            ]
            if i == 0 and self.program:
                lines.append(f"  reproduce the program: {self.command()}")
            lines += [f"  repro script: {path}" for path in c.repro_scripts]
        if self.others_clean is not None:
            lines.append("the given options on every fusion but the culprits': "
                         + ("clean" if self.others_clean else "NOT clean (more culprits than were looked for)"))
        lines.append(f"{self.probes} probes for {budget} options x {len(self.all_fusions)} fusions "
                     f"({budget * len(self.all_fusions)} option-fusion pairs); {self.elapsed_s:.1f} s"
                     + ("" if self.compile_s is None else f", {self.compile_s:.1f} s of it compiling (first executions "
                        "of new partitions; probes with options seen before compile nothing)"))
        return "\n".join(lines + tail)

    __str__ = report

    def as_dict(self) -> dict[str, Any]:
        return {
            "given": options_dict(self.given), "options": options_dict(self.options), "fusions": list(self.fusions),
            "culprits": [{"options": options_dict(c.options), "fusions": list(c.fusions), "problem": c.problem,
                          "repro_scripts": list(c.repro_scripts), "line": c.line()} for c in self.culprits],
            "all_fusions": list(self.all_fusions), "probes": self.probes, "check": self.check,
            "reproduced": self.reproduced, "line": self.line() if self.reproduced else None,
            "command": self.command() if self.reproduced else None, "others_clean": self.others_clean,
            "mode": self.mode, "program": list(self.program), "elapsed_s": self.elapsed_s, "notes": list(self.notes),
            "detail": self.detail, "compile_s": self.compile_s,
            "default_compiles": dict_of(self.default_compiles),
            "log": [{"number": p.number, "stage": p.stage, "options": options_dict(p.options),
                     "fusions": None if p.fusions is None else list(p.fusions), "bad": p.bad, "detail": p.detail,
                     "seconds": p.seconds, "compiles": dict_of(p.compiles)} for p in self.log],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BisectResult:
        log = tuple(Probe(p["number"], p["stage"], options_from(p["options"]),
                          None if p["fusions"] is None else tuple(p["fusions"]), p["bad"], p["detail"], p["seconds"],
                          Compiles.from_dict(p.get("compiles"))) for p in data["log"])
        culprits = tuple(Culprit(options_from(c["options"]), tuple(c["fusions"]), c["problem"],
                                 tuple(c["repro_scripts"])) for c in data["culprits"])
        return cls(options_from(data["given"]), culprits, tuple(data["all_fusions"]), log, data["check"],
                   data["others_clean"], data["mode"], tuple(data["program"]), data["elapsed_s"], tuple(data["notes"]),
                   data["detail"], data.get("compile_s"), Compiles.from_dict(data.get("default_compiles")))
