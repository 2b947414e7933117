"""What a rescue probe leaves its parent, read after the process is gone: its events file (`Progress`) and the start
markers that compute-sanitizer's lines are attributed by (`sanitizer_errors`)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

__all__ = ["ENDED", "FAILED", "MARK", "STARTED", "Progress", "read_json", "sanitizer_errors"]

MARK = "nvscope-rescue: start "
# A probe's events file: one line per fusion event, ``<event> <fusion id>``, in the order they happened (`Progress`).
STARTED, ENDED, FAILED = "start", "end", "raise"


@dataclasses.dataclass
class Progress:
    """A probe's events file, read after the process is gone: ``started`` (in first-start order), per fusion the
    executions ``ended`` and ``failed``; `running`: started and not finished, where a dead or hung process was."""

    started: list[str] = dataclasses.field(default_factory=list)
    starts: dict[str, int] = dataclasses.field(default_factory=dict)
    ended: dict[str, int] = dataclasses.field(default_factory=dict)
    failed: dict[str, int] = dataclasses.field(default_factory=dict)
    last: list[str] = dataclasses.field(default_factory=list)  # the fusions in the order of their latest start

    @classmethod
    def read(cls, path: str) -> Progress:
        progress = cls()
        for line in _lines(path):
            event, _, fusion = line.partition(" ")
            if event == STARTED:
                if fusion not in progress.starts:
                    progress.started.append(fusion)
                progress.starts[fusion] = progress.starts.get(fusion, 0) + 1
                progress.last = [f for f in progress.last if f != fusion] + [fusion]
            elif event in (ENDED, FAILED):
                counts = progress.ended if event == ENDED else progress.failed
                counts[fusion] = counts.get(fusion, 0) + 1
        return progress

    def running(self) -> list[str]:
        """The fusions started and not finished, the latest started last."""
        return [f for f in self.last if self.starts[f] > self.ended.get(f, 0) + self.failed.get(f, 0)]



_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def sanitizer_errors(stdout: str) -> tuple[int | None, dict[str, int]]:
    """compute-sanitizer's error count (None: no summary line) and the errors per fusion, each counted for the
    fusion whose start marker (`MARK`) came last before it."""
    current: str | None = None
    per: dict[str, int] = {}
    for line in stdout.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
        elif line.startswith("=========") and re.search(r"Invalid|out of bounds|Out-of-range", line):
            per[current or "?"] = per.get(current or "?", 0) + 1
    found = _SUMMARY.findall(stdout)
    return (int(found[-1]) if found else None), per


def read_json(path: str | None) -> Any:
    """What a probe wrote to ``path`` as JSON (its versions, at its first fusion), or {}."""
    try:
        with open(path or "", encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as file:
            return [line.strip() for line in file if line.strip()]
    except OSError:
        return []
