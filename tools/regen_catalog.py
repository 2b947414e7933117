"""Regenerate nvscope/_core/_catalog_data.py from a local git clone or mirror of nvFuser (github.com/NVIDIA/Fuser).

    python tools/regen_catalog.py /path/to/Fuser > nvscope/_core/_catalog_data.py
    python tools/regen_catalog.py /path/to/Fuser --check    # exit 1, with a diff, if the committed file differs

The path is a work tree or a bare git directory; only ``git`` reads it (``rev-list``, ``show``, ``grep``), so no
network is needed, and it is never modified. The hand-written columns come from ``tools/catalog_notes.py``.

How it is built: versions come from version.txt / python/version.txt. For every first-parent commit from the first
version's bump to the newest commit that touches csrc/options.cpp, csrc/options.h or a version file, names are taken
from the {"name", EnableOption::X} / {"name", DisableOption::X} maps in options.cpp and checked against the enums in
options.h. A version "has" a name if any commit in that version's range (from its bump commit up to the next bump)
has it, so a nightly build of that version may lack names added or removed mid-range: NIGHTLY_DATES gives the days
where that is known (tools/catalog_notes.py's NIGHTLY, checked against the history). VERSIONS lists the bump commit
of each version; the newest version is also read at the newest commit, and a name is marked present (last_version
None) only if that newest commit still has it. requires_args: the option does nothing (or cannot work) unless given
arguments, e.g. NVFUSER_ENABLE=p2p_protocol(put).
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "nvscope" / "_core" / "_catalog_data.py"
FIRST = "0.2.23"  # the oldest version the table covers
OPTION_FILES = ("csrc/options.cpp", "csrc/options.h")
VERSION_FILES = ("version.txt", "python/version.txt")  # python/ since 0.2.27's "Refactor python build"
# Where a read of an option counts for the gate check: nvFuser's C++ and its Python bindings, not its tests
READ_PATHS = ("csrc", "python", ":!python/tests", *(f":!{f}" for f in OPTION_FILES))
WIDTH = 120
ENTRY = re.compile(r'\{\s*"([\w.]+)"\s*,\s*(EnableOption|DisableOption)::(\w+)\s*\}')
KINDS = {"EnableOption": "enable", "DisableOption": "disable"}


class RegenError(Exception):
    """The catalog cannot be regenerated as it stands; the message says what to fix."""


class Snapshot(NamedTuple):
    commit: str
    version: str
    names: dict[tuple[str, str], str]  # (kind, name) -> the C++ enumerator, e.g. "EnableOption::FuseMatmul"


class Git:
    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir

    def __call__(self, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        done = subprocess.run(["git", "-C", str(self.git_dir), *args], capture_output=True, text=True,
                              errors="replace", check=False)
        if done.returncode not in ok:
            raise RegenError(f"git {' '.join(args)} failed in {self.git_dir}: {done.stderr.strip()}")
        return done.stdout

    def show(self, commit: str, path: str) -> str | None:
        """The file at ``commit``, or None where it does not exist."""
        try:
            return self("show", f"{commit}:{path}")
        except RegenError:
            return None


def _version(git: Git, commit: str) -> str:
    for path in VERSION_FILES:
        text = git.show(commit, path)
        if text is not None and text.strip():
            return text.strip()
    raise RegenError(f"commit {commit[:12]} has none of {', '.join(VERSION_FILES)}")


def _names(git: Git, commit: str) -> dict[tuple[str, str], str]:
    cpp, header = (git.show(commit, path) for path in OPTION_FILES)
    if cpp is None or header is None:
        raise RegenError(f"commit {commit[:12]} lacks {' or '.join(OPTION_FILES)}")
    names: dict[tuple[str, str], str] = {}
    for name, enum, member in ENTRY.findall(cpp):
        body = re.search(rf"enum\s+class\s+{enum}\b[^{{]*\{{([^}}]*)\}}", header)
        if body is None or not re.search(rf"^\s*{member}\b", body.group(1), re.MULTILINE):
            raise RegenError(f"commit {commit[:12]}: options.cpp maps {name!r} to {enum}::{member}, "
                             "which options.h does not declare; the parser needs updating")
        names[KINDS[enum], name] = f"{enum}::{member}"
    if not names:
        raise RegenError(f"commit {commit[:12]}: no option names found in options.cpp; the parser needs updating")
    return names


def read_history(git: Git, ref: str) -> tuple[list[Snapshot], str, str]:
    """Every first-parent commit from the FIRST bump to ``ref`` that touched the option or version files, plus
    ``ref`` itself; with ``ref``'s full hash and committer date."""
    newest = git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    date = git("log", "-1", "--format=%cs", newest).strip()
    commits = git("rev-list", "--first-parent", "--reverse", newest, "--", *OPTION_FILES, *VERSION_FILES).split()
    if not commits or commits[-1] != newest:
        commits.append(newest)
    snapshots: list[Snapshot] = []
    for commit in commits:
        version = _version(git, commit)
        if not snapshots and version != FIRST:
            continue
        snapshots.append(Snapshot(commit, version, _names(git, commit)))
    if not snapshots:
        raise RegenError(f"no commit on {ref}'s first-parent history has version {FIRST}")
    return snapshots, newest, date


class Table(NamedTuple):
    versions: list[tuple[str, str]]  # (version, bump commit)
    last_commits: dict[str, str]  # version -> the last first-parent commit before the next bump (or the newest)
    options: dict[tuple[str, str], tuple[str, str | None]]  # (kind, name) -> (first version, last version or None)
    enums: dict[tuple[str, str], str]


def build_table(git: Git, snapshots: Sequence[Snapshot]) -> Table:
    from packaging.version import Version

    versions: list[tuple[str, str]] = []
    seen: dict[str, set[tuple[str, str]]] = {}
    enums: dict[tuple[str, str], str] = {}
    for snap in snapshots:
        if not versions or versions[-1][0] != snap.version:
            if snap.version in seen or (versions and Version(snap.version) < Version(versions[-1][0])):
                raise RegenError(f"version {snap.version} at {snap.commit[:12]} does not follow {versions[-1][0]}")
            versions.append((snap.version, snap.commit))
            seen[snap.version] = set()
        seen[snap.version] |= snap.names.keys()
        enums.update(snap.names)
    last_commits = {}
    for (version, _), (_, next_bump) in itertools.pairwise(versions):
        last_commits[version] = git("rev-parse", f"{next_bump}~1").strip()
    last_commits[versions[-1][0]] = snapshots[-1].commit
    order = [v for v, _ in versions]
    options: dict[tuple[str, str], tuple[str, str | None]] = {}
    for key in sorted(enums):
        present = [v for v in order if key in seen[v]]
        first, last = order.index(present[0]), order.index(present[-1])
        if len(present) != last - first + 1:
            gaps = sorted(set(order[first:last + 1]) - set(present), key=order.index)
            raise RegenError(f"{key[0]} {key[1]!r} is missing in {', '.join(gaps)} between {present[0]} and "
                             f"{present[-1]}: the table's (first, last) range cannot say that")
        options[key] = (present[0], None if key in snapshots[-1].names else present[-1])
    return Table(versions, last_commits, options, enums)


def check_notes(git: Git, table: Table, notes: ModuleType) -> dict[tuple[str, str], tuple[tuple[str, ...], str]]:
    """Cross-check the hand-written notes with nvFuser; return each gated option's (op names, source)."""
    missing = sorted(set(table.options) - set(notes.OPTIONS))
    if missing:
        raise RegenError("nvFuser has options tools/catalog_notes.py does not describe; add them to its OPTIONS: "
                         + ", ".join(f"{k} {n}" for k, n in missing))
    stale = sorted(set(notes.OPTIONS) - set(table.options))
    if stale:
        raise RegenError("tools/catalog_notes.py describes options no covered nvFuser version has; remove them: "
                         + ", ".join(f"{k} {n}" for k, n in stale))
    for (kind, name), (effect, requires_args, description) in notes.OPTIONS.items():
        if effect not in ("codegen", "runtime", "debug") or not isinstance(requires_args, bool) or not description:
            raise RegenError(f"tools/catalog_notes.py: {kind} {name}: bad effect, requires_args or description")
    for op, (_, files) in notes.FRONTEND_OPS.items():
        for path in files:
            commit, text = _newest_with(git, table, path)
            if not re.search(rf'"(?:fd\.)?(?:ops\.)?{re.escape(op)}"', text):
                raise RegenError(f"frontend op {op!r}: {path} does not name it (at {commit[:12]})")
    gates: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}
    for key, (nodes, sources) in notes.GATES.items():
        if key not in table.options:
            raise RegenError(f"tools/catalog_notes.py gates {key}, which is not an option")
        ops = gate_ops(notes, nodes)
        if not ops:
            raise RegenError(f"{key}: no frontend op in FRONTEND_OPS makes any of {nodes}")
        _check_read_sites(git, table, key, sources)
        gates[key] = (ops, ", ".join(sources))
    return gates


def check_nightly(git: Git | None, snapshots: Sequence[Snapshot], table: Table,
                  notes: ModuleType) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """The notes' NIGHTLY dates, checked: each names an option, each date is a day; with ``git`` (the history at
    hand), the first date is the committer date of the first commit that has the name, the second that of the first
    commit after it that lacks it."""
    dates: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for key, (added, removed) in notes.NIGHTLY.items():
        if key not in table.options:
            raise RegenError(f"tools/catalog_notes.py NIGHTLY dates {key}, which is not an option")
        for day in (added, removed):
            if day is not None and not re.fullmatch(r"20\d\d-[01]\d-[0-3]\d", day):
                raise RegenError(f"tools/catalog_notes.py NIGHTLY {key}: {day!r} is not a day as YYYY-MM-DD")
        if added is None and removed is None:
            raise RegenError(f"tools/catalog_notes.py NIGHTLY {key}: give a date, or remove the entry")
        if removed is not None and table.options[key][1] is None:
            raise RegenError(f"tools/catalog_notes.py NIGHTLY {key}: removed on {removed}, but the newest commit read "
                             "still has it")
        if git is not None and snapshots:
            having = [i for i, snap in enumerate(snapshots) if key in snap.names]
            first = snapshots[having[0]].commit
            history = git("log", "-1", "--format=%cs", first).strip()
            if added is not None and added != history:
                raise RegenError(f"tools/catalog_notes.py NIGHTLY {key}: added on {added}, but nvFuser's history has "
                                 f"it from {first[:12]}, committed {history}")
            if removed is not None:
                gone = next((s.commit for s in snapshots[having[-1] + 1:] if key not in s.names), None)
                day = None if gone is None else git("log", "-1", "--format=%cs", gone).strip()
                if day != removed:
                    raise RegenError(f"tools/catalog_notes.py NIGHTLY {key}: removed on {removed}, but nvFuser's "
                                     f"history removes it on {day}")
        dates[key] = (added, removed)
    return dates


def gate_ops(notes: ModuleType, nodes: Iterable[str]) -> tuple[str, ...]:
    """The frontend op names (FRONTEND_OPS) that put any of the IR ``nodes`` in a fusion, sorted."""
    return tuple(sorted(op for op, (made, _) in notes.FRONTEND_OPS.items() if set(made) & set(nodes)))


def _newest_with(git: Git, table: Table, path: str) -> tuple[str, str]:
    """The newest version's last commit that has ``path`` (the legacy frontend is gone after 0.2.35), and the text."""
    for version, _ in reversed(table.versions):
        commit = table.last_commits[version]
        text = git.show(commit, path)
        if text is not None:
            return commit, text
    raise RegenError(f"no covered nvFuser version has {path}")


def _check_read_sites(git: Git, table: Table, key: tuple[str, str], sources: Iterable[str]) -> None:
    """Every nvFuser file that reads the option, wherever the table has it, must be among ``sources``."""
    first, last = table.options[key]
    order = [v for v, _ in table.versions]
    span = order[order.index(first):(order.index(last) + 1 if last else None)]
    bumps = dict(table.versions)
    commits = {c for v in span for c in (bumps[v], table.last_commits[v])}
    enum = table.enums[key]
    for commit in sorted(commits):
        found = git("grep", "-l", "-w", "-F", enum, commit, "--", *READ_PATHS, ok=(0, 1)).split()  # 1: none
        files = {line.split(":", 1)[1] for line in found}
        if not files <= set(sources):
            raise RegenError(f"{key[0]} {key[1]} ({enum}) is read in {', '.join(sorted(files - set(sources)))} at "
                             f"{commit[:12]}, which tools/catalog_notes.py's GATES does not cite: read it, then "
                             "cite it or remove the gate")


# --- rendering -----------------------------------------------------------------------------------------------------

DOCSTRING = '''\
"""nvFuser enable/disable option names, generated by tools/regen_catalog.py (do not edit) from nvFuser's
csrc/options.cpp and csrc/options.h; the hand-written columns and the op gates come from tools/catalog_notes.py.

Source: github.com/NVIDIA/Fuser, versions {first} (commit {first_commit}) through {last} (commit {newest},
the newest commit read, {date}{no_bump}).
"""
'''

HEADER = """
# The versions covered, oldest first, with the nvFuser commit each was read at.
VERSIONS: tuple[tuple[str, str], ...] = (
"""

OPTIONS_HEADER = """
# (kind, name, effect, first version in VERSIONS with the name, last one or None if the newest has it,
# requires_args, description)
OPTIONS: tuple[tuple[str, str, str, str, str | None, bool, str], ...] = (
"""

NIGHTLY_HEADER = """
# Names added or removed between two version bumps, for nightlies (<version>.dev<YYYYMMDD>): (kind, name, the day
# it came upstream or None, the day it left or None).
NIGHTLY_DATES: tuple[tuple[str, str, str | None, str | None], ...] = (
"""

GATES_HEADER = """
# Options that can only affect a fusion holding one of these ops: (kind, name, ops, the nvFuser files that show it).
OP_GATES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
"""


def _literal(value: object) -> str:
    if isinstance(value, str):
        if not value.isascii() or not value.isprintable():
            raise RegenError(f"not plain ASCII: {value!r}")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)  # bool, None


def _entry(values: tuple[object, ...], indent: str = "    ") -> str:
    """One tuple per line when it fits in WIDTH, else one element per line (the layout ``ruff format`` gives)."""
    line = f"{indent}{_literal(values)},"
    if len(line) <= WIDTH:
        return line + "\n"
    inner = [f"{indent}    {_literal(v)}," for v in values]
    if any(len(line) > WIDTH for line in inner):  # ruff's line length; a string is not split
        raise RegenError(f"too long for a {WIDTH}-character line: {max(inner, key=len).strip()} (shorten it in "
                         "tools/catalog_notes.py)")
    return f"{indent}(\n" + "".join(line + "\n" for line in inner) + f"{indent}),\n"


def render(table: Table, newest: str, date: str, notes: ModuleType,
           gates: dict[tuple[str, str], tuple[tuple[str, ...], str]],
           nightly: dict[tuple[str, str], tuple[str | None, str | None]]) -> str:
    (first, first_commit), (last, last_bump) = table.versions[0], table.versions[-1]
    no_bump = f"; no version bump after {last} yet" if last_bump != newest else ""
    out = [DOCSTRING.format(first=first, first_commit=first_commit[:12], last=last, newest=newest[:12], date=date,
                            no_bump=no_bump), HEADER]
    out += [_entry((version, commit[:12])) for version, commit in table.versions]
    out += [")\n", OPTIONS_HEADER]
    for (kind, name), (since, until) in sorted(table.options.items()):
        effect, requires_args, description = notes.OPTIONS[kind, name]
        out.append(_entry((kind, name, effect, since, until, requires_args, description)))
    out += [")\n", GATES_HEADER]
    out += [_entry((kind, name, ops, source)) for (kind, name), (ops, source) in sorted(gates.items())]
    out += [")\n", NIGHTLY_HEADER]
    out += [_entry((kind, name, added, removed)) for (kind, name), (added, removed) in sorted(nightly.items())]
    out.append(")\n")
    return "".join(out)


def generate(git_dir: Path, ref: str = "HEAD", notes: ModuleType | None = None) -> str:
    if notes is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("catalog_notes", Path(__file__).with_name("catalog_notes.py"))
        assert spec is not None and spec.loader is not None
        notes = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(notes)
    git = Git(git_dir)
    snapshots, newest, date = read_history(git, ref)
    table = build_table(git, snapshots)
    gates = check_notes(git, table, notes)
    nightly = check_nightly(git, snapshots, table, notes)
    return render(table, newest, date, notes, gates, nightly)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fuser", type=Path, help="a local git clone or mirror of github.com/NVIDIA/Fuser")
    parser.add_argument("--ref", default="HEAD", help="the newest commit to read (default: HEAD)")
    parser.add_argument("--check", action="store_true",
                        help=f"compare with {DATA.relative_to(ROOT)} instead of printing; exit 1 if they differ")
    ns = parser.parse_args(argv)
    try:
        text = generate(ns.fuser, ns.ref)
    except RegenError as error:
        print(f"regen_catalog: {error}", file=sys.stderr)
        return 2
    if not ns.check:
        sys.stdout.write(text)
        return 0
    committed = DATA.read_text(encoding="utf-8")
    if committed == text:
        print(f"{DATA.relative_to(ROOT)} is up to date")
        return 0
    sys.stdout.writelines(difflib.unified_diff(committed.splitlines(keepends=True), text.splitlines(keepends=True),
                                               "committed", "regenerated"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
