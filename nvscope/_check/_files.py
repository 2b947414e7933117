"""Reading the files `nvscope check` checks: the walk, the byte test, the readers, in several processes for a large
tree. What a file holds is judged in `nvscope._check._check`.

Parsing is the cost, so folders without source are not walked into, a file is opened only if a reader reads its
name and parsed only if its bytes hold a word every finding needs (docs/check.md, "Speed")."""

from __future__ import annotations

import errno
import gc
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from nvscope._check import _python, _text
from nvscope._check._use import Use
from nvscope._core import _state, cut

__all__ = ["PARALLEL", "Scanned", "scan_files", "walk"]

# Folders never walked into (an explicitly named one is still read): VCS data, environments, caches, build output.
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "node_modules", "__pycache__",
                        ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", "site-packages", ".eggs",
                        ".ipynb_checkpoints", "htmlcov"})
# The byte test. Each search reads the whole file, so few and short: `nv_` stands for the nv_enable..., nv_options
# words and `NVFUSER_` for both variables, confirmed on a hit by a pattern that starts with the same bytes (a
# literal prefix, which `re` searches as fast as `in` does).
_COARSE = (b"nv_", b"NVFUSER_", b"nvscope", b"NVSCOPE_DEV", b"able_options", b"--nv-")
_FINE: Mapping[bytes, re.Pattern[bytes]] = MappingProxyType({
    b"nv_": re.compile(rb"nv_(?:options|enable|disable|skip_cache|store_fusion|save_fake)"),
    b"NVFUSER_": re.compile(rb"NVFUSER_(?:EN|DIS)ABLE")})
_ALLOW = re.compile(r"(?:#|//|;)\s*nvscope:\s*allow(?:\[(?P<kinds>[\w,\s-]*)\])?(?P<reason>[^\n]*)")
_ALONE = re.compile(r"^\s*\"?\s*(?:#|//|;)\s*nvscope:\s*allow")  # a line that is nothing but the comment
PARALLEL = 400  # files to read from which a process pool pays for its start
_CHUNK = 16  # files per task: small, since the files that are parsed cluster in a few folders
_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)  # a FIFO opens without a writer


@dataclass(frozen=True)
class Scanned:
    """One file read: its uses, each with the ``# nvscope: allow`` comment that covers it (the extra kinds it
    allows, its reason) or None; ``parsed``: its bytes could hold a finding; ``notes``: why it was skipped."""

    uses: tuple[tuple[Use, tuple[frozenset[str], str] | None], ...] = ()
    parsed: bool = False
    notes: tuple[str, ...] = ()


def walk(roots: Iterable[str], skip: Callable[[str], bool] = lambda folder: False) -> Iterator[str]:
    """The files under ``roots`` that some reader reads, by name (``roots`` that are files: all of them). A folder
    is not walked into when it is in `_SKIP_DIRS`, an environment (``pyvenv.cfg``), an ``.egg-info``, or ``skip``
    says so (the configuration excludes all of it)."""
    for root in roots:
        if not os.path.isdir(root):
            yield root
            continue
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
            except OSError:
                continue  # a folder that cannot be listed: as if empty (its files are not the project's to read)
            for entry in entries:
                name = entry.name
                try:
                    is_dir = entry.is_dir()
                    if is_dir and entry.is_symlink():
                        continue  # a link to a folder is not followed (it may loop, or leave the tree)
                except OSError:
                    continue
                if is_dir:
                    if name not in _SKIP_DIRS and not name.endswith(".egg-info") and not skip(entry.path) \
                            and not os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                        stack.append(entry.path)
                elif (_text.file_format(name) is not None or "." not in name.lstrip(".")) \
                        and not (entry.is_symlink() and not os.path.exists(entry.path)):  # a link to nothing
                    yield entry.path


def scan_files(paths: Sequence[str]) -> list[Scanned | None]:
    """`scan` of each path, in order (None for a file no reader reads); in several processes from `PARALLEL` on."""
    jobs = _jobs(len(paths))
    if jobs < 2:
        return _scan_range(paths, 0, len(paths))
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    global _SHARED
    _SHARED = paths  # forked children see it: only (start, stop) pairs travel to them
    bounds = [(start, min(start + _CHUNK, len(paths))) for start in range(0, len(paths), _CHUNK)]
    try:
        with ProcessPoolExecutor(jobs, mp_context=get_context("fork")) as pool:
            chunks = list(pool.map(_scan_shared, *zip(*bounds, strict=True)))
    except (BrokenProcessPool, OSError):  # a child killed (out of memory, say), or no process could be started
        return _scan_range(paths, 0, len(paths))
    finally:
        _SHARED = ()
    return [scanned for chunk in chunks for scanned in chunk]


_SHARED: Sequence[str] = ()
_state.keep(__name__, "_SHARED", "the paths of the parallel scan in progress, for its forked children: it empties it")


def _scan_shared(start: int, stop: int) -> list[Scanned | None]:
    return _scan_range(_SHARED, start, stop)


def _jobs(files: int) -> int:
    if files < PARALLEL or not sys.platform.startswith("linux") or threading.active_count() > 1:
        return 1
    return min(len(os.sched_getaffinity(0)), 8)


def _scan_range(paths: Sequence[str], start: int, stop: int) -> list[Scanned | None]:
    enabled = gc.isenabled()
    gc.disable()  # syntax trees hold no cycles; the collector's passes over their many nodes cost much of a parse
    try:
        return [scan(paths[i]) for i in range(start, stop)]
    finally:
        if enabled:
            gc.enable()


def _read(path: str, fmt: str | None) -> tuple[bytes, str | None] | str:
    """The file's bytes and its format (None: no reader reads it), or why it cannot be read."""
    try:
        descriptor = os.open(path, _FLAGS)
    except OSError as error:
        if os.path.islink(path) and error.errno in (errno.ENOENT, errno.ELOOP):
            return "a symbolic link to nothing (or one that loops): skipped"
        return f"cannot be read ({error.strerror or error}): skipped"
    try:
        regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(descriptor)
        return "not a regular file (a folder, a FIFO, a device, a socket): skipped"
    with os.fdopen(descriptor, "rb", buffering=0) as file:
        try:
            if fmt is None:
                head = file.read(128) or b""
                fmt = _text.file_format(os.path.basename(path), head)
                if fmt is None:
                    return b"", None
                return head + (file.read() or b""), fmt
            return file.read() or b"", fmt
        except OSError as error:
            return f"cannot be read ({error.strerror or error}): skipped"


def scan(path: str) -> Scanned | None:
    """The uses in one file, None when no reader reads it. A file that cannot be read is noted and has none."""
    name = os.path.basename(path)
    fmt = _text.file_format(name)
    if fmt is None and "." in name.lstrip("."):
        return None  # a suffix no reader reads: not even opened
    read = _read(path, fmt)
    if isinstance(read, str):
        return Scanned(notes=(read,))
    data, fmt = read
    if fmt is None:
        return None
    if not _may_hold(data):
        return Scanned()
    if b"\0" in data[:8192]:
        return Scanned(notes=("a binary file (it holds NUL bytes): skipped",))
    notes: list[str] = []
    allowances: dict[int, str] = {}  # Python: the comment of each line that holds `nvscope:`
    try:
        if fmt == "python":
            uses = _python.scan(data, path, shell=lambda line: _text.scan(line, "shell"),
                                      allowances=allowances)
            text = data.decode("utf-8", "replace")
        else:
            text = data.decode("utf-8-sig")
            uses = (_text.scan_notebook(text, notes.append) if fmt == "notebook" else
                    _text.scan(text, fmt))
    except (SyntaxError, RecursionError, MemoryError) as error:  # deep nesting: RecursionError, or MemoryError
        where = f" (line {error.lineno})" if isinstance(error, SyntaxError) and error.lineno else ""
        message = error.msg if isinstance(error, SyntaxError) else "nested too deeply"
        return Scanned(notes=(f"not Python that this Python can parse{where}: {cut(message, 100)}: skipped",))
    except UnicodeDecodeError as error:
        return Scanned(notes=(f"not UTF-8 text (byte {error.start}): skipped",))
    except ValueError as error:  # null bytes for Python; json.JSONDecodeError for a notebook
        if fmt == "notebook":
            return Scanned(notes=(f"not a notebook that can be read ({cut(str(error), 100)}): skipped",))
        return Scanned(notes=(f"not Python that this Python can parse: {cut(str(error), 100)}: skipped",))
    lines = text.splitlines()
    return Scanned(tuple((use, _allowance(lines, use, allowances, fmt)) for use in uses), True, tuple(notes))


def _may_hold(data: bytes) -> bool:
    """Whether a file's bytes hold a word that every finding needs (if not, it holds no finding)."""
    for word in _COARSE:
        if word in data:
            fine = _FINE.get(word)
            if fine is None or fine.search(data) is not None:
                return True
    return False


def _comment(line: str, number: int, python: dict[int, str], fmt: str) -> str:
    """The comment of a line, where the format tells comments from strings (Python by its tokens, from
    `_python.scan`; shell, YAML, TOML, Makefiles by their quotes): ``# nvscope: allow`` inside a string literal
    is no allowance. Other formats (notebooks' JSON lines, Dockerfiles, INI, .env): the whole line."""
    if fmt == "python":
        return python.get(number, line)
    if fmt in ("notebook", "dockerfile", "ini", "env"):
        return line
    code = _text.strip_comment(line, fmt)
    return line[len(code):] if code else line


def _allowance(lines: list[str], use: Use, python: dict[int, str], fmt: str) -> tuple[frozenset[str], str] | None:
    """The extra kinds a ``# nvscope: allow`` comment allows for a use (``allow[name]``), and its reason: on the
    use's first or last line, or alone on the line above. ``python``: a Python file's comments (`_comment`)."""
    candidates = [use.line, use.end_line]
    if use.line >= 2 and _ALONE.match(lines[use.line - 2] if use.line - 2 < len(lines) else ""):
        candidates.append(use.line - 1)
    for number in candidates:
        if not 1 <= number <= len(lines) or "nvscope:" not in lines[number - 1]:
            continue
        match = _ALLOW.search(_comment(lines[number - 1], number, python, fmt))
        if match is not None:
            extra = frozenset(k.strip() for k in (match["kinds"] or "").split(",") if k.strip())
            reason = match["reason"].strip()
            if fmt == "notebook":
                reason = re.sub(r'(\\n)?"?,?\s*$', "", reason).strip()  # a notebook's JSON line ends `\n",`
            return extra, reason
    return None
