"""`nvscope check`: find the places a program sets nvFuser developer options, before they reach reference models.

The run-time policy sees only the paths a run takes; this reads the code instead. Each place the readers find
(`_python`, `_text`) is judged here: its option names against the bundled catalog, the place against the
allowances. The result, `CheckResult`, renders as text, JSON or GitHub Actions annotations."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from nvscope._check import _config, _files
from nvscope._check._config import Config, ConfigError
from nvscope._check._names import Names
from nvscope._check._use import DEV, THUNDER, Use
from nvscope._core import cut

__all__ = ["CheckResult", "ConfigError", "Finding", "Note", "check"]

# Kinds of finding: "option" and "dynamic" are uses; "name" and "version" are catalog problems; "plumbing" never
# fails. `# nvscope: allow` covers uses; `allow[name]`, `allow[version]` cover those too.
KINDS = ("option", "dynamic", "name", "version", "plumbing")
_USES = ("option", "dynamic")
# How a message spells "pass it in the other list", per construct (a format with {kind} and {name}).
_SPELLING: Mapping[str, str] = MappingProxyType({"Thunder compile option": "nv_{kind}_options=[{name!r}]",
             "nvFuser execute option": "_{kind}_options=[{name!r}]",
             "nvscope run": "--{kind} {name}", "nvscope fusions": "--{kind} {name}",
             "pytest --nv-enable": "--nv-{kind} {name}", "pytest --nv-disable": "--nv-{kind} {name}"})


@dataclass(frozen=True)
class Finding:
    """One finding: where (``path``, 1-based ``line`` and ``col``), the ``construct`` that sets options, the
    ``options`` it sets (``enable:fuse_matmul``, ``NVSCOPE_DEV=1``, ``nv_enable_linear=True``), its ``kind``
    (`KINDS`) and what is wrong. ``allowed`` is how it is allowed (``"comment"`` or ``"config: GLOB"``), None if not;
    ``reason`` the comment's text after ``allow``."""

    path: str
    line: int
    col: int
    construct: str
    options: tuple[str, ...]
    kind: str
    message: str
    allowed: str | None = None
    reason: str = ""

    @property
    def failing(self) -> bool:
        return self.kind != "plumbing" and self.allowed is None

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "col": self.col, "construct": self.construct,
                "options": list(self.options), "kind": self.kind, "message": self.message, "allowed": self.allowed,
                "reason": self.reason, "failing": self.failing}


@dataclass(frozen=True)
class Note:
    """A file that could not be read (binary, not UTF-8, a syntax error): said, skipped, not a failure."""

    path: str
    message: str


@dataclass(frozen=True)
class CheckResult:
    """What `check` found. ``findings`` holds every finding, allowed and plumbing ones too (`failing` the rest);
    ``files`` the files a reader reads, ``read`` those whose bytes could hold a finding (parsed); ``paths`` the
    paths checked, as given."""

    findings: tuple[Finding, ...]
    notes: tuple[Note, ...]
    files: int
    read: int
    nvfuser: str
    config: str | None
    strict: bool
    paths: tuple[str, ...] = ()

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.failing)

    @property
    def exit_code(self) -> int:
        """0 when nothing fails, 1 otherwise (the command's exit code)."""
        return 1 if self.failing else 0

    def counts(self) -> dict[str, object]:
        failing = self.failing
        return {
            "files": self.files, "read": self.read, "failing": len(failing),
            "allowed": sum(f.allowed is not None for f in self.findings),
            "plumbing": sum(f.kind == "plumbing" for f in self.findings), "notes": len(self.notes),
            "by_kind": dict(sorted(Counter(f.kind for f in failing).items())),
            "by_construct": {c: dict(n) for c, n in sorted(_by_construct(self.findings).items())},
        }

    def summary(self) -> str:
        """The one summary line, e.g. ``nvscope check: 2 failing (1 option, 1 name), 3 allowed, 1 plumbing; 40 files
        (4 read), 0 notes``; with no file to read, says so (a typo in a path, or a folder of other files)."""
        if not self.files:
            where = ", ".join(cut(p, 100) for p in self.paths) or "the paths given"
            return (f"nvscope check: no files to check in {where}: none is Python, a notebook, a shell script, a "
                    "Dockerfile, a Makefile, YAML, TOML, INI or .env (or all are excluded); nothing failing")
        counts = self.counts()
        by_kind = counts["by_kind"]
        assert isinstance(by_kind, dict)
        kinds = f" ({', '.join(f'{n} {k}' for k, n in by_kind.items())})" if by_kind else ""
        strict = " (--strict: allowances ignored)" if self.strict else ""
        return (f"nvscope check: {counts['failing']} failing{kinds}, {counts['allowed']} allowed, "
                f"{counts['plumbing']} plumbing; {self.files} files ({self.read} read), {len(self.notes)} "
                f"{'note' if len(self.notes) == 1 else 'notes'}{strict}")

    def to_dict(self) -> dict[str, object]:
        return {"summary": self.summary(), "counts": self.counts(), "nvfuser": self.nvfuser, "config": self.config,
                "strict": self.strict, "findings": [f.to_dict() for f in self.findings],
                "notes": [{"path": n.path, "message": n.message} for n in self.notes]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def render(self, verbose: bool = False) -> str:
        """Readable text: one line per failing finding (``path:line:col: construct: options: message``), then
        (``verbose``) the allowed and plumbing ones, the notes, what names were checked against, and the summary."""
        lines = [_line(f) for f in self.failing]
        if verbose:
            lines += [_line(f) + f" [allowed by {f.allowed}{': ' + f.reason if f.reason else ''}]"
                      for f in self.findings if f.allowed is not None]
            lines += [_line(f) for f in self.findings if f.kind == "plumbing" and f.allowed is None]
        lines += [f"{n.path}: note: {n.message}" for n in self.notes]
        if verbose or self.failing:
            lines.append(f"option names checked against: {self.nvfuser}")
        if self.failing:
            lines.append("allow a line with `# nvscope: allow <reason>`, a path with `allow = [...]` in "
                         "[tool.nvscope.check] of pyproject.toml (docs/check.md)")
        lines.append(self.summary())
        return "\n".join(lines)

    def render_github(self) -> str:
        """GitHub Actions workflow commands: ``::error`` per failing finding, ``::warning`` per note, the summary."""
        lines = [f"::error file={_escape(f.path, True)},line={f.line},col={f.col},title=nvscope check "
                 f"({_escape(f.kind, True)})::{_escape(_line(f, where=False))}" for f in self.failing]
        lines += [f"::warning file={_escape(n.path, True)},title=nvscope check::{_escape(n.message)}"
                  for n in self.notes]
        lines.append(self.summary())
        return "\n".join(lines)

    def statistics(self) -> str:
        """Counts per construct: failing, allowed, plumbing."""
        from nvscope._core import render

        rows = [(construct, str(n.get("failing", 0)), str(n.get("allowed", 0)), str(n.get("plumbing", 0)))
                for construct, n in sorted(_by_construct(self.findings).items())]
        return render(("construct", "failing", "allowed", "plumbing"), rows, right=(1, 2, 3))


def _by_construct(findings: Iterable[Finding]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for f in findings:
        if f.kind in ("name", "version"):
            continue  # a catalog problem rides on a use already counted
        status = "plumbing" if f.kind == "plumbing" else "allowed" if f.allowed else "failing"
        out.setdefault(f.construct, Counter())[status] += 1
    return out


def _line(f: Finding, where: bool = True) -> str:
    options = f" {' '.join(f.options)}:" if f.options else ""
    return f"{f'{f.path}:{f.line}:{f.col}: ' if where else ''}{f.construct}:{options} {f.message}"


def _escape(text: str, property_value: bool = False) -> str:
    """GitHub's escaping of workflow command data (and, for properties, of ':' and ',')."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text


def _findings(use: Use, shown: str, names: Names) -> list[Finding]:
    options = tuple(name if kind in (DEV, THUNDER) else f"{kind}:{name}" for kind, name in use.options)
    if use.plumbing:
        return [Finding(shown, use.line, use.col, use.construct, options, "plumbing",
                        "forwards options its caller gives: sets none by itself")]
    thunder = any(kind == THUNDER for kind, _ in use.options)
    if use.dynamic:
        known = " (these names known)" if options and not thunder else ""
        thing = ("development mode" if "NVSCOPE_DEV" in use.detail or use.construct in (
            "set_development_mode", "dev_mode") else "a Thunder nvFuser compile option" if thunder
            else "nvFuser developer options")
        out = [Finding(shown, use.line, use.col, use.construct, options, "dynamic",
                       f"sets {thing} from a value not known before it runs{known}")]
    else:
        what = ("turns nvscope's development mode on" if any(kind == DEV for kind, _ in use.options) else
                "sets a Thunder nvFuser compile option" if thunder else "sets nvFuser developer options")
        out = [Finding(shown, use.line, use.col, use.construct, options, "option", what)]
    spelling = _SPELLING.get(use.construct, "{kind}=[{name!r}]" if use.per_call else "NVFUSER_{kind}={name}")
    for kind, name in use.options:
        if kind in ("enable", "disable"):
            text = spelling.replace("NVFUSER_{kind}", f"NVFUSER_{'DISABLE' if kind == 'enable' else 'ENABLE'}")
            bad = names.judge(kind, name, use.per_call, text)
            if bad is not None:
                out.append(Finding(shown, use.line, use.col, use.construct, (f"{kind}:{name}",), *bad))
    return out


def check(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (".",), *, strict: bool = False,
          config: str | os.PathLike[str] | None = None, nvfuser: str | None = None) -> CheckResult:
    """Find where the code under ``paths`` (files or folders; one path may be given alone) sets nvFuser developer
    options; see docs/check.md.

    ``config``: the ``pyproject.toml`` whose ``[tool.nvscope.check]`` applies (default: the nearest one above the
    first path that has the table). ``nvfuser``: the version range names are checked against (default: the
    table's ``nvfuser``, else the installed nvFuser, else the whole catalog). ``strict``: ignore every allowance.
    Raises FileNotFoundError for a path or config file that does not exist (or an empty path), `ConfigError` (a
    ValueError) for a bad table or range; their messages name the fix.
    """
    if isinstance(paths, (str, os.PathLike)):  # check("src"): one path, not its characters
        paths = [paths]
    given = [os.fspath(p) for p in paths]
    if "" in given:  # Path("") is ".": an empty argument (an unset shell variable) would check the current folder
        raise FileNotFoundError("an empty path names no file or folder: give existing files or folders (. for the "
                                "current folder)")
    roots = [str(Path(p)) for p in given] or ["."]
    for root in roots:
        if not os.path.lexists(root):  # a broken link named is a file that cannot be read: a note
            raise FileNotFoundError(f"{cut(root, 200)}: no such file or folder: give existing files or folders")
    if config is not None and not os.fspath(config):
        raise FileNotFoundError("an empty config names no file: give the pyproject.toml whose [tool.nvscope.check] "
                                "applies, or none")
    config_path = Path(config) if config is not None else _config.find(Path(os.path.realpath(roots[0])))
    if config_path is not None and not config_path.is_file():
        raise FileNotFoundError(f"{cut(str(config_path), 200)}: no such configuration file: give the pyproject.toml "
                                "whose [tool.nvscope.check] applies, or none (the nearest one above the first path "
                                "that has the table)")
    settings: Config = _config.load(config_path, Path.cwd(), named=config is not None)
    where = "--nvfuser" if nvfuser is not None else f"[tool.nvscope.check] in {config_path}"
    names = Names(nvfuser if nvfuser is not None else settings.nvfuser, where)
    allow = _config.glob_matcher(settings.allow)
    allow_names = _config.glob_matcher(settings.allow_names)
    exclude = _config.glob_matcher(settings.exclude)
    base = os.path.abspath(settings.root)
    cwd = os.getcwd()

    def excluded(path: str, folder: bool = False) -> bool:
        relative = _relative(os.path.abspath(path), base)  # not resolve(): a stat per folder costs more than a read
        # A folder is excluded when "folder/" matches: then so does every path under it (globs end in `(/.*)?`).
        return exclude is not None and relative is not None and exclude.fullmatch(relative + "/" * folder) is not None

    chosen: list[str] = []
    seen: set[str] = set()
    for path in _files.walk(roots, lambda folder: excluded(folder, folder=True)):
        absolute = os.path.abspath(path)
        if absolute not in seen and not excluded(path):
            seen.add(absolute)
            chosen.append(path)
    findings: list[Finding] = []
    notes: list[Note] = []
    files = read = 0
    for path, scanned in zip(chosen, _files.scan_files(chosen), strict=True):
        if scanned is None:
            continue
        files += 1
        read += scanned.parsed
        if not scanned.uses and not scanned.notes:
            continue
        absolute = os.path.abspath(path)
        shown = _relative(absolute, cwd) or path
        notes += [Note(shown, message) for message in scanned.notes]
        relative = _relative(absolute, base)
        for use, comment in scanned.uses:
            for finding in _findings(use, shown, names):
                allowed, reason = _allowed(finding, comment, relative, allow, allow_names,
                                           settings, strict)
                findings.append(finding if allowed is None else
                                Finding(**{**finding.__dict__, "allowed": allowed, "reason": reason}))
    findings.sort(key=lambda f: (f.path, f.line, f.col, KINDS.index(f.kind)))
    return CheckResult(tuple(findings), tuple(notes), files, read, names.describe,
                       None if config_path is None else str(config_path), strict, tuple(roots))


def _allowed(finding: Finding, comment: tuple[frozenset[str], str] | None, relative: str | None,
             allow: re.Pattern[str] | None, allow_names: re.Pattern[str] | None, settings: Config,
             strict: bool) -> tuple[str | None, str]:
    if strict or finding.kind == "plumbing":
        return None, ""
    if comment is not None and (finding.kind in _USES or finding.kind in comment[0]):
        return "comment", comment[1]
    matcher, globs = (allow, settings.allow) if finding.kind in _USES else (allow_names, settings.allow_names)
    if matcher is not None and relative is not None and matcher.fullmatch(relative):
        glob = next(g for g in globs if _config.glob_matcher((g,)).fullmatch(relative))  # type: ignore[union-attr]
        return f"config: {glob}", ""
    return None, ""


def _relative(path: str, root: str) -> str | None:
    """``path`` relative to ``root``, ``/``-separated; None when it is not under it."""
    if path != root and not path.startswith(root.rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(path, root).replace(os.sep, "/")
