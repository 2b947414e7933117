"""Write history.mbox beside this file: the parts of nvFuser's history that tools/regen_catalog.py reads, trimmed.

    python tests/data/fuser/make_fixture.py /path/to/Fuser [--since fe23484180f4] [--until 81c4b22fd750]

From a local git clone or mirror of github.com/NVIDIA/Fuser, it keeps the first-parent commits from ``--since`` (a
version bump) to ``--until`` that the regenerator's answer depends on: each version bump and the commit before it,
the newest, a commit on a day tools/catalog_notes.py's NIGHTLY names, and a commit holding an option name that none
of those holds (a name added and removed between them). Each file the regenerator reads is kept trimmed to what it
reads, under the file's own license header: python/version.txt, csrc/options.cpp (the two name maps), csrc/options.h
(the two enums), the files that read a gated option (the first line naming each) and the frontend files (the first
line naming each op). Each commit keeps its date and subject and records its upstream hash in UPSTREAM_COMMIT.
tests/test_regen_catalog.py replays the result with ``git am`` and regenerates the catalog from it.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OPTION_FILES = ("csrc/options.cpp", "csrc/options.h")
VERSION_FILES = ("python/version.txt", "version.txt")
READ_PATHS = ("csrc", "python", ":!python/tests", *(f":!{f}" for f in OPTION_FILES))
MAPS = re.compile(r"^const std::unordered_map<std::string, (?:Enable|Disable)Option>& get(?:Enable|Disable)Options\(\)")
ENUMS = re.compile(r"^enum class (?:Enable|Disable)Option\b")
ENTRY = re.compile(r'\{\s*"([\w.]+)"\s*,\s*((Enable|Disable)Option::\w+)\s*\}')

sys.path.insert(0, str(ROOT / "tools"))
import regen_catalog as _regen  # noqa: E402  (tools/ is not a package: its folder goes on the path first)


class Fuser(_regen.Git):
    """The regenerator's git reader (tools/regen_catalog.py), with what the fixture reads besides."""

    def version(self, commit: str) -> str:
        return next(text.strip() for path in VERSION_FILES if (text := self.show(commit, path)))

    def enums(self, commit: str) -> dict[tuple[str, str], str]:
        """(kind, name) -> enumerator, from options.cpp's maps."""
        cpp = self.show(commit, OPTION_FILES[0]) or ""
        return {(kind.lower(), name): enum for name, enum, kind in ENTRY.findall(cpp)}


def _header(text: str) -> list[str]:
    """The file's license header: its lines up to ``// clang-format on`` (nvFuser's sources all start with one)."""
    lines = text.splitlines()
    return lines[:next(i for i, line in enumerate(lines[:12]) if line.strip() == "// clang-format on") + 1]


def _blocks(text: str, start: re.Pattern[str]) -> str:
    """The header, then each block whose first line matches ``start``, to its closing brace at column 0."""
    lines, kept = text.splitlines(), _header(text)
    for i, line in enumerate(lines):
        if start.match(line):
            end = next(j for j in range(i, len(lines)) if lines[j].startswith("}"))
            kept += ["", *lines[i:end + 1]]
    return "\n".join(kept) + "\n"


def _first_lines(text: str, patterns: list[re.Pattern[str]]) -> str:
    """The header, then the first line matching each pattern, in the file's order."""
    lines = text.splitlines()
    hits = {next((i for i, line in enumerate(lines) if p.search(line)), -1) for p in patterns} - {-1}
    return "\n".join([*_header(text), *(lines[i] for i in sorted(hits))]) + "\n"


def trimmed(fuser: Fuser, commit: str, notes: ModuleType) -> dict[str, str]:
    """The files the regenerator reads at ``commit``, trimmed to what it reads."""
    files = {path: text for path in VERSION_FILES if (text := fuser.show(commit, path)) is not None}
    files[OPTION_FILES[0]] = _blocks(fuser.show(commit, OPTION_FILES[0]) or "", MAPS)
    files[OPTION_FILES[1]] = _blocks(fuser.show(commit, OPTION_FILES[1]) or "", ENUMS)
    enums = fuser.enums(commit)
    gated = [enums[key] for key in notes.GATES if key in enums]
    tokens = [re.compile(rf"\b{re.escape(enum)}\b") for enum in gated]
    for enum in gated:
        found = fuser("grep", "-l", "-w", "-F", enum, commit, "--", *READ_PATHS, ok=(0, 1)).split()  # 1: none
        for path in (line.split(":", 1)[1] for line in found):
            if path not in files:
                files[path] = _first_lines(fuser.show(commit, path) or "", tokens)
    ops = [re.compile(rf'"(?:fd\.)?(?:ops\.)?{re.escape(op)}"') for op in notes.FRONTEND_OPS]
    for path in sorted({path for _, sources in notes.FRONTEND_OPS.values() for path in sources}):
        text = fuser.show(commit, path)
        if text is not None:
            files[path] = _first_lines(text, ops)
    return files


def selected(fuser: Fuser, since: str, until: str, notes: ModuleType) -> list[str]:
    """The commits kept, oldest first (see the module docstring)."""
    commits = fuser("rev-list", "--first-parent", "--reverse", f"{since}~1..{until}").split()
    touching = set(fuser("rev-list", "--first-parent", f"{since}~1..{until}", "--", *OPTION_FILES,
                         *VERSION_FILES).split())
    versions = {c: fuser.version(c) for c in commits if c in touching or c in (since, until)}
    keep = {since, until}
    read = [c for c in commits if c in versions]
    for before, after in itertools.pairwise(read):
        if versions[before] != versions[after]:
            keep |= {after, fuser("rev-parse", f"{after}~1").strip()}
    days = {day for dates in notes.NIGHTLY.values() for day in dates if day}
    keep |= {c for c in read if fuser("log", "-1", "--format=%cs", c).strip() in days}
    held = set().union(*(fuser.enums(c) for c in keep))
    keep |= {c for c in read if set(fuser.enums(c)) - held}
    return [c for c in commits if c in keep]


def _notes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("catalog_notes", ROOT / "tools" / "catalog_notes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("fuser", type=Path, help="a local git clone or mirror of github.com/NVIDIA/Fuser")
    parser.add_argument("--since", default="fe23484180f4", help="a version bump (default: 0.2.35's)")
    parser.add_argument("--until", default="81c4b22fd750", help="the newest commit (default: the catalog's)")
    ns = parser.parse_args(argv)
    fuser, notes = Fuser(ns.fuser), _notes()
    since, until = (fuser("rev-parse", f"{ref}^{{commit}}").strip() for ref in (ns.since, ns.until))
    with tempfile.TemporaryDirectory() as tmp:
        out = Fuser(Path(tmp))
        out("init", "-q", "-b", "main")
        previous: dict[str, str] = {}
        for commit in selected(fuser, since, until, notes):
            files = trimmed(fuser, commit, notes)
            for path in previous.keys() - files.keys():
                (out.git_dir / path).unlink()
            for path, text in {**files, "UPSTREAM_COMMIT": commit + "\n"}.items():
                (out.git_dir / path).parent.mkdir(parents=True, exist_ok=True)
                (out.git_dir / path).write_text(text)
            previous = files
            date, subject = fuser("log", "-1", "--format=%cI%n%s", commit).rstrip("\n").split("\n", 1)
            out("add", "-A")
            out("-c", "user.name=NVIDIA/Fuser", "-c", "user.email=fuser@invalid", "commit", "-q", f"--date={date}",
                "-m", f"{subject}\n\nupstream {commit}")
        mbox = out("format-patch", "--root", "--stdout", "--keep-subject", "--no-signature", "--no-stat",
                   "--zero-commit", "HEAD")
    (HERE / "history.mbox").write_text(mbox)
    print(f"history.mbox: {len(mbox)} bytes, {mbox.count(chr(10) + 'upstream ')} commits", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
