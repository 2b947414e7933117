"""What `nvscope.rescue` reports: per failing fusion what went wrong, its cure and what was tried; the line for the
whole step; the text of an nvFuser issue. Plain data with ``to_json()``/``from_json()``, like the other tools'."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nvscope._core import OptionSet
from nvscope._measure import LoadableResult, nv_options_line, options_dict, options_from, spec
from nvscope._rescue._search import Attempt
from nvscope._tools import no_fusion

__all__ = ["NO_FUSION", "Failure", "FusionRescue", "RescueResult", "facts", "issue_text", "with_issue"]

_LOCATION = re.compile(r"(csrc/[\w./-]+\.(?:cpp|h|cu|cuh|hpp):\d+)")
KINDS: Mapping[str, str] = MappingProxyType({
    "raise": "raises", "fault": "kills the process", "timeout": "hangs (no exit within the time limit)",
    "numbers": "wrong numbers", "memory": "writes out of bounds (compute-sanitizer memcheck)",
    "step": "the step fails outside any fusion", "reference": "the reference raised"})
# Why a failure no fusion was named for is not rescued (`RescueResult`'s last line).
_OUTSIDE: Mapping[str, str] = MappingProxyType({
    "reference": "the reference raised: fix it", "step": "the step fails outside any fusion",
    "numbers": "the step's result differs from its reference while no fusion was found wrong",
    "fault": "the process died before any fusion ran", "timeout": "the step hung before any fusion ran"})
# A process that died or hung after the fusions that ran had finished: in none of them.
_AFTER: Mapping[str, str] = MappingProxyType({
    "fault": "the process died outside every fusion (each fusion that ran had finished)",
    "timeout": "the step hung outside every fusion (each fusion that ran had finished)"})
# A step through which no nvFuser fusion ran: nothing was checked.
NO_FUSION = "no nvFuser fusion ran: is the step jitted by thunder.jit with nvFuser (is Thunder installed)?"


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
        """The nvFuser source location in it (``csrc/scheduler/runtime_info.h:69``), or None."""
        found = _LOCATION.search(f"{self.line}\n{self.detail}")
        return found.group(1) if found else None

    def as_dict(self) -> dict[str, Any]:
        return {"fusion": self.fusion, "kind": self.kind, "line": self.line, "detail": self.detail,
                "location": self.location}


@dataclass(frozen=True)
class FusionRescue:
    """One failing fusion: its failure under the defaults, the cure found (None: none) and every attempt;
    ``env_cause``: the environment variables whose removal cures it."""

    fusion: str
    failure: Failure
    cure: OptionSet | None
    attempts: tuple[Attempt, ...] = ()
    env_cause: tuple[str, ...] = ()
    out_of_budget: bool = False
    repro_scripts: tuple[str, ...] = ()
    issue: str = ""
    sure: str = ""  # how sure the cure is, where a confirmation alone does not say it (a flaky failure's)
    route: bool = False  # no option cure: the fusion runs in PyTorch (``on_error="torch"``), proven so
    cost: str = ""  # what the route costs, as measured in its proof

    @property
    def rescued(self) -> bool:
        return self.cure is not None or self.route

    def as_dict(self) -> dict[str, Any]:
        return {"fusion": self.fusion, "failure": self.failure.as_dict(), "route": self.route, "cost": self.cost,
                "cure": None if self.cure is None else options_dict(self.cure), "env_cause": list(self.env_cause),
                "out_of_budget": self.out_of_budget, "repro_scripts": list(self.repro_scripts), "issue": self.issue,
                "sure": self.sure,
                "attempts": [{"options": options_dict(a.options), "cured": a.cured, "detail": a.detail,
                              "seconds": a.seconds} for a in self.attempts]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FusionRescue:
        f = d["failure"]
        return cls(d["fusion"], Failure(f["fusion"], f["kind"], f["line"], f["detail"]),
                   None if d["cure"] is None else options_from(d["cure"]),
                   tuple(Attempt(options_from(a["options"]), a["cured"], a["detail"], a["seconds"])
                         for a in d["attempts"]), tuple(d["env_cause"]), d["out_of_budget"],
                   tuple(d["repro_scripts"]), d["issue"], d.get("sure", ""), d.get("route", False), d.get("cost", ""))


@dataclass(frozen=True)
class RescueResult(LoadableResult):
    """The rescue of a step that goes wrong under nvFuser's defaults (docs/rescue.md).

    ``rescues``: one per failing fusion, in the order found; ``unattributed``: a failure no fusion could be named for,
    else None. ``proved``: whether the final run with `line`'s options ran clean (None: nothing to prove).
    ``healthy``: nothing went wrong under the defaults; ``no_fusion``: no fusion ran, nothing was checked (exit 1).
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
    def no_fusion(self) -> bool:
        return not self.fusions

    @property
    def healthy(self) -> bool:
        return bool(self.fusions) and not self.rescues and self.unattributed is None

    @property
    def rescued(self) -> bool:
        """Every failing fusion has a cure and the final run proved it (True too when nothing went wrong)."""
        return self.healthy or (self.unattributed is None and all(r.rescued for r in self.rescues)
                                and self.proved is True)

    @property
    def routes(self) -> tuple[str, ...]:
        """The fusions rescued by the PyTorch route (``on_error="torch"``): they raise under every option tried."""
        return tuple(r.fusion for r in self.rescues if r.route)

    def groups(self) -> list[tuple[OptionSet, tuple[str, ...]]]:
        """The selector map: each cure with the fusions it cures (every other fusion keeps its defaults)."""
        cures = dict.fromkeys(r.cure for r in self.rescues if r.cure is not None)
        return [(options, tuple(r.fusion for r in self.rescues if r.cure == options)) for options in cures]

    def line(self) -> str:
        """The scope for the whole step: one ``nv_options(...)``, or nested ones (a selector map)."""
        scopes = self._scopes()
        if not scopes:
            return ("# nothing to rescue: keep the defaults" if self.healthy else
                    "# no nvFuser fusion ran" if self.no_fusion and self.unattributed is None else "# no cure found")
        return scopes[0] if len(scopes) == 1 else "with " + ", \\\n     ".join(scopes) + ":"

    def _scopes(self) -> list[str]:
        """One ``nv_options(...)`` per cure; ``on_error="torch"`` on the outermost where a fusion is routed (the
        scopes inside inherit it)."""
        scopes = [nv_options_line(options, fusions) for options, fusions in self.groups()]
        if self.routes:
            first = scopes[0][:-1] + ", " if scopes else "nv_options("
            scopes[:1] = [first + 'on_error="torch")']
        return scopes

    def decorator(self) -> str:
        """The same as decorators on the step's function."""
        return "\n".join("@with_nv_options" + s.removeprefix("nv_options") for s in self._scopes())

    def exit_code(self) -> int:
        return 0 if self.rescued else 1

    def report(self, issues: Mapping[str, str] | None = None) -> str:
        """The answer as text. ``issues``: per fusion, the file its issue text was written to (named beside its repro
        script)."""
        lines = [f"nvscope rescue: {len(self.fusions)} fusions ran ({self.mode}; checked: "
                 f"{', '.join(self.checks) or 'raises'})"]
        if self.healthy:
            lines.append("nothing to rescue: the step runs under nvFuser's defaults"
                         + (" and matches its reference" if "reference" in self.checks else ""))
        elif self.no_fusion and self.unattributed is None:
            lines.append(no_fusion(NO_FUSION))
        for r in self.rescues:
            where = f" at {r.failure.location}" if r.failure.location else ""
            lines.append(f"{r.fusion}: {KINDS.get(r.failure.kind, r.failure.kind)}{where}: {r.failure.line[:200]}")
            tried = len(r.attempts)
            if r.cure is not None:
                lines.append(f"  cured by {spec(r.cure)} ({r.sure or 'confirmed'}; {tried} attempts)")
            elif r.route:
                lines.append(f"  ROUTED to PyTorch (on_error=\"torch\"): no option cure among {tried} attempts"
                             + (" (the time budget ran out)" if r.out_of_budget else "") + f"; costs {r.cost}")
            else:
                lines.append(f"  NO CURE among {tried} attempts" + (" (the time budget ran out)" if r.out_of_budget
                                                                     else " (every candidate up to the set size)"))
            if r.env_cause:
                lines.append(f"  the environment causes it: without {' and '.join(r.env_cause)} it runs; change "
                             "that variable (options set there cannot be taken away per fusion)")
            lines += [f"  repro script: {path}" for path in r.repro_scripts]
            if issues and r.fusion in issues:
                lines.append(f"  issue text: {issues[r.fusion]}")
        if self.unattributed is not None:
            u = self.unattributed
            what = f"{KINDS.get(u.kind, u.kind)}: {u.line[:200]}"
            lines.append(f"{u.fusion} fails again with its cure: {what}" if u.fusion is not None
                         else f"not attributed to a fusion: {what}")
        if self.groups() or self.routes:
            cured = [r.fusion for r in self.rescues if r.cure is not None]
            lines.append(f"option cures: {', '.join(cured) or 'none'}; routed to PyTorch: "
                         f"{', '.join(self.routes) or 'none'}")
            lines += ["the step's scope:", "  " + self.line().replace("\n", "\n  "), "or as a decorator:",
                      "  " + self.decorator().replace("\n", "\n  ")]
        if self.proved is not None:
            lines.append(f"final run with it: {'PROVED' if self.proved else 'NOT proved'} ({self.proof})")
        lines.append(f"{self._verdict()}; {self.elapsed_s:.1f} s")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _verdict(self) -> str:
        """The last line: rescued, nothing failed, or what kept it from being rescued."""
        if self.healthy:
            return "nothing failed"
        if self.rescues and self.rescued:
            return "rescued: every failing fusion has a cure"
        if any(not r.rescued for r in self.rescues):
            return "NOT rescued: some fusion has no cure (partial map above)"
        u = self.unattributed
        if u is not None and u.fusion is not None:
            return f"NOT rescued: {u.fusion} fails again with the cures found (partial map above)"
        if u is not None:
            what = (_OUTSIDE if self.no_fusion else _AFTER).get(u.kind) or _OUTSIDE.get(
                u.kind, f"{KINDS.get(u.kind, u.kind)} outside any fusion")
            return (f"NOT rescued: {what}; nothing to search" + (f" ({no_fusion(NO_FUSION)})" if self.no_fusion else "")
                    + (" (the cures found so far are above)" if self.groups() else ""))
        if self.proved is False:
            return "NOT rescued: every failing fusion has a cure, but the final run with all of them failed"
        return "nothing checked: no nvFuser fusion ran"

    def __str__(self) -> str:
        return self.report()

    def as_dict(self) -> dict[str, Any]:
        return {"fusions": list(self.fusions), "rescues": [r.as_dict() for r in self.rescues],
                "unattributed": None if self.unattributed is None else self.unattributed.as_dict(),
                "proved": self.proved, "proof": self.proof, "mode": self.mode, "checks": list(self.checks),
                "elapsed_s": self.elapsed_s, "notes": list(self.notes), "versions": dict(self.versions),
                "healthy": self.healthy, "rescued": self.rescued, "routes": list(self.routes),
                "no_fusion": self.no_fusion, "line": self.line(),
                "decorator": self.decorator(),
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
            "Passes with: " + (spec(rescue.cure) if rescue.cure is not None else "no option tried"
                               + (" (the step runs with it in PyTorch: on_error='torch')" if rescue.route else "")),
            f"Also fails with: {', '.join(spec(a.options) for a in tried[:8]) or '-'}"
            + (f" (and {len(tried) - 8} more)" if len(tried) > 8 else "")]


def issue_text(rescue: FusionRescue, definition: str, versions: dict[str, str]) -> str:
    """A short nvFuser issue: what fails, where, the failing and passing options, versions, the repro (its inputs'
    shapes, dtypes and strides are in the definition's script)."""
    failure = rescue.failure
    versions_line, *options = facts(rescue, versions)
    lines = [f"### {KINDS.get(failure.kind, failure.kind).capitalize()} in fusion {rescue.fusion} under the default "
             "options", "", f"`{failure.line[:300]}`" + (f" ({failure.location})" if failure.location else ""), "",
             versions_line, "", *options]
    lines += ["", "Repro: " + (", ".join(rescue.repro_scripts) or "(none written)")]
    if definition:
        lines += ["", "```python", definition.strip(), "```"]
    lines += ["", "A rescue found for these input shapes says nothing of other shapes."]
    return "\n".join(lines)


_FACTS = "# nvscope rescue found:"  # the first line of the report's header on a repro script

def with_issue(rescue_: FusionRescue, versions: dict[str, str]) -> FusionRescue:
    """The rescue with its issue text; its repro script (the definition and inputs) gets the rest of the report in
    its header: what went wrong, the versions, the failing and passing options."""
    definition = ""
    for path in rescue_.repro_scripts[:1]:
        with suppress(OSError):
            with open(path, encoding="utf-8") as file:
                definition = file.read()
            if os.path.basename(path).startswith("rescue-") and _FACTS not in definition:
                header = [f"{_FACTS} {rescue_.failure.kind}: {rescue_.failure.line[:300]}",
                          *(f"# {line}" for line in facts(rescue_, versions))]
                definition = "\n".join(header) + "\n" + definition
                with open(path, "w", encoding="utf-8") as file:
                    file.write(definition)
    return dataclasses.replace(rescue_, issue=issue_text(rescue_, definition, versions))
