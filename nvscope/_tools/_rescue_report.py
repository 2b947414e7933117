"""What `nvscope.rescue` reports: per failing fusion what went wrong, its cure and what was tried; the line for the
whole step; the text of an nvFuser issue. Plain data with ``to_json()``/``from_json()``, like the other tools'."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nvscope._core import OptionSet
from nvscope._measure import LoadableResult, nv_options_line, options_dict, options_from, spec
from nvscope._tools._rescue_search import Attempt

__all__ = ["Failure", "FusionRescue", "RescueResult", "facts", "issue_text", "location_of"]

_LOCATION = re.compile(r"(csrc/[\w./-]+\.(?:cpp|h|cu|cuh|hpp):\d+)")
KINDS: Mapping[str, str] = {
    "raise": "raises", "fault": "kills the process", "timeout": "hangs (no exit within the time limit)",
    "numbers": "wrong numbers", "memory": "writes out of bounds (compute-sanitizer memcheck)",
    "step": "the step fails outside any fusion"}


def location_of(text: str) -> str | None:
    """The nvFuser source location in an error message (``csrc/scheduler/runtime_info.h:69``), or None."""
    found = _LOCATION.search(text)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Failure:
    """What went wrong: in ``fusion`` (None: not attributed to one), how (``kind``, a key of `KINDS`), its first
    line, the nvFuser source location in it, and more (``detail``)."""

    fusion: str | None
    kind: str
    line: str
    detail: str = ""

    @property
    def location(self) -> str | None:
        return location_of(f"{self.line}\n{self.detail}")

    def as_dict(self) -> dict[str, Any]:
        return {"fusion": self.fusion, "kind": self.kind, "line": self.line, "detail": self.detail,
                "location": self.location}


@dataclass(frozen=True)
class FusionRescue:
    """One failing fusion: its failure under the defaults, the cure found (None: none), every attempt, the
    environment variables whose removal cures it (``env_cause``), whether the time budget ran out first, the repro
    scripts and the text of an nvFuser issue."""

    fusion: str
    failure: Failure
    cure: OptionSet | None
    attempts: tuple[Attempt, ...] = ()
    env_cause: tuple[str, ...] = ()
    out_of_budget: bool = False
    repro_scripts: tuple[str, ...] = ()
    issue: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"fusion": self.fusion, "failure": self.failure.as_dict(),
                "cure": None if self.cure is None else options_dict(self.cure), "env_cause": list(self.env_cause),
                "out_of_budget": self.out_of_budget, "repro_scripts": list(self.repro_scripts), "issue": self.issue,
                "attempts": [{"options": options_dict(a.options), "cured": a.cured, "detail": a.detail,
                              "seconds": a.seconds} for a in self.attempts]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FusionRescue:
        f = d["failure"]
        return cls(d["fusion"], Failure(f["fusion"], f["kind"], f["line"], f["detail"]),
                   None if d["cure"] is None else options_from(d["cure"]),
                   tuple(Attempt(options_from(a["options"]), a["cured"], a["detail"], a["seconds"])
                         for a in d["attempts"]), tuple(d["env_cause"]), d["out_of_budget"],
                   tuple(d["repro_scripts"]), d["issue"])


@dataclass(frozen=True)
class RescueResult(LoadableResult):
    """The rescue of a step that goes wrong under nvFuser's defaults.

    ``rescues``: one per failing fusion, in the order found; ``unattributed``: a failure no fusion could be named
    for (the step fails outside the fusions, or its numbers are wrong with no fusion found wrong), else None.
    ``proved``: whether the final run with `line`'s options ran clean (and matched the reference when one was given);
    None when there was nothing to prove. ``healthy``: nothing went wrong under the defaults.
    """

    fusions: tuple[str, ...]
    rescues: tuple[FusionRescue, ...]
    unattributed: Failure | None = None
    proved: bool | None = None
    proof: str = ""
    mode: str = "in-process"
    checks: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    notes: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.rescues and self.unattributed is None

    @property
    def rescued(self) -> bool:
        """Every failing fusion has a cure and the final run proved it (True too when nothing went wrong)."""
        return self.healthy or (self.unattributed is None and all(r.cure is not None for r in self.rescues)
                                and self.proved is True)

    def groups(self) -> list[tuple[OptionSet, tuple[str, ...]]]:
        """The selector map: each cure with the fusions it cures (every other fusion keeps its defaults)."""
        grouped: dict[OptionSet, list[str]] = {}
        for r in self.rescues:
            if r.cure is not None:
                grouped.setdefault(r.cure, []).append(r.fusion)
        return [(options, tuple(fusions)) for options, fusions in grouped.items()]

    def line(self) -> str:
        """The scope for the whole step: one ``nv_options(...)``, or nested ones (a selector map)."""
        scopes = [nv_options_line(options, fusions) for options, fusions in self.groups()]
        if not scopes:
            return "# nothing to rescue: keep the defaults" if self.healthy else "# no cure found"
        return scopes[0] if len(scopes) == 1 else "with " + ", \\\n     ".join(scopes) + ":"

    def decorator(self) -> str:
        """The same as decorators on the step's function."""
        return "\n".join("@with_nv_options" + nv_options_line(o, f).removeprefix("nv_options")
                         for o, f in self.groups())

    def exit_code(self) -> int:
        return 0 if self.rescued else 1

    def report(self) -> str:
        lines = [f"nvscope rescue: {len(self.fusions)} fusions ran ({self.mode}; checked: "
                 f"{', '.join(self.checks) or 'raises'})"]
        if self.healthy:
            lines.append("nothing to rescue: the step runs under nvFuser's defaults"
                         + (" and matches its reference" if "reference" in self.checks else ""))
        for r in self.rescues:
            where = f" at {r.failure.location}" if r.failure.location else ""
            lines.append(f"{r.fusion}: {KINDS.get(r.failure.kind, r.failure.kind)}{where}: {r.failure.line[:200]}")
            tried = len(r.attempts)
            if r.cure is not None:
                lines.append(f"  cured by {spec(r.cure)} (confirmed; {tried} attempts)")
            else:
                lines.append(f"  NO CURE among {tried} attempts" + (" (the time budget ran out)" if r.out_of_budget
                                                                     else " (every candidate up to the set size)"))
            if r.env_cause:
                lines.append(f"  the environment causes it: without {' and '.join(r.env_cause)} it runs; change "
                             "that variable (options set there cannot be taken away per fusion)")
            lines += [f"  repro script: {path}" for path in r.repro_scripts]
        if self.unattributed is not None:
            u = self.unattributed
            lines.append(f"not attributed to a fusion: {KINDS.get(u.kind, u.kind)}: {u.line[:200]}")
        if self.groups():
            lines += ["the step's scope:", "  " + self.line().replace("\n", "\n  "), "or as a decorator:",
                      "  " + self.decorator().replace("\n", "\n  ")]
        if self.proved is not None:
            lines.append(f"final run with it: {'PROVED' if self.proved else 'NOT proved'} ({self.proof})")
        verdict = ("rescued: every failing fusion has a cure" if self.rescues and self.rescued else
                   "nothing failed" if self.healthy else "NOT rescued: some fusion has no cure (partial map above)")
        lines.append(f"{verdict}; {self.elapsed_s:.1f} s")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()

    def as_dict(self) -> dict[str, Any]:
        return {"fusions": list(self.fusions), "rescues": [r.as_dict() for r in self.rescues],
                "unattributed": None if self.unattributed is None else self.unattributed.as_dict(),
                "proved": self.proved, "proof": self.proof, "mode": self.mode, "checks": list(self.checks),
                "elapsed_s": self.elapsed_s, "notes": list(self.notes), "versions": dict(self.versions),
                "healthy": self.healthy, "rescued": self.rescued, "line": self.line(), "decorator": self.decorator(),
                "groups": [{"options": options_dict(o), "fusions": list(f)} for o, f in self.groups()]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RescueResult:
        u = data["unattributed"]
        return cls(tuple(data["fusions"]), tuple(FusionRescue.from_dict(r) for r in data["rescues"]),
                   None if u is None else Failure(u["fusion"], u["kind"], u["line"], u["detail"]), data["proved"],
                   data["proof"], data["mode"], tuple(data["checks"]), data["elapsed_s"], tuple(data["notes"]),
                   dict(data["versions"]))


def facts(rescue: FusionRescue, versions: dict[str, str]) -> list[str]:
    """What a bug report needs beside the definition: versions, the failing and the passing options."""
    tried = [a for a in rescue.attempts if not a.cured]
    return ["Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
            "Fails under: the defaults" + (f" plus {', '.join(rescue.env_cause)} from the environment"
                                            if rescue.env_cause else ""),
            "Passes with: " + (spec(rescue.cure) if rescue.cure is not None else "no option tried"),
            f"Also fails with: {', '.join(spec(a.options) for a in tried[:8]) or '-'}"
            + (f" (and {len(tried) - 8} more)" if len(tried) > 8 else "")]


def issue_text(rescue: FusionRescue, definition: str, versions: dict[str, str], inputs: str = "") -> str:
    """A short nvFuser issue: what fails, where, the failing and passing options, versions, the repro."""
    failure = rescue.failure
    versions_line, *options = facts(rescue, versions)
    lines = [f"### {KINDS.get(failure.kind, failure.kind).capitalize()} in fusion {rescue.fusion} under the default "
             "options", "", f"`{failure.line[:300]}`" + (f" ({failure.location})" if failure.location else ""), "",
             versions_line, "", *options]
    if inputs:
        lines += ["", f"Inputs: {inputs}"]
    lines += ["", "Repro: " + (", ".join(rescue.repro_scripts) or "(none written)")]
    if definition:
        lines += ["", "```python", definition.strip(), "```"]
    lines += ["", "A rescue found for these input shapes says nothing of other shapes."]
    return "\n".join(lines)
