"""What a scoped fusion that fails tells its user: a note on the exception that names the options, and a repro script.

nvFuser's own repro script calls ``fd.execute(inputs)`` without the options, so it does not reproduce; these scripts
pass them per call (docs/failures.md). Nothing here may raise over the user's error.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable
from typing import Any

from nvscope._core import OptionSet, _env, _state, cut, process_options_shell

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvscope._core import FusionInfo

__all__ = ["MARK", "add_note", "annotate", "attach", "error_line", "failure_note", "repro_paths", "with_options"]

MARK = "nvscope:"  # one note per exception, however many layers see it
_EXECUTE = "fd.execute(inputs)"  # how both frontends' repro scripts end


class _DefaultDirectory:
    """The process's repro directory when ``NVSCOPE_REPRO_DIR`` names none, made at the first script."""

    def __init__(self) -> None:
        self._path: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if self._path is None:
                import tempfile

                self._path = tempfile.mkdtemp(prefix="nvscope-repro-")
            return self._path


_default_directory = _DefaultDirectory()
_state.keep(__name__, "_default_directory", "the process's default repro directory: notes already written name it")


def with_options(script: str, options: OptionSet) -> str:
    """nvFuser's repro ``script`` with its last ``fd.execute(inputs)`` passing ``options`` per call."""
    call = (f"fd.execute(inputs, _enable_options={options.enable_list()!r}, "
            f"_disable_options={options.disable_list()!r})")
    header = (f"# nvscope: this runs the fusion with nvFuser options {options.label()}, passed to execute "
              f"per call\n#   (the same as {options.as_shell() or 'no NVFUSER_* variables'} for a whole process)\n")
    head, found, tail = script.rpartition(_EXECUTE)
    if found:
        return header + head + call + tail
    return f"{header}{script}\n# to execute it with these options: {call}\n"


def attach(fd: Any, options: OptionSet) -> None:
    """Make ``fd.repro_script_for(inputs)`` (and so ``last_repro_script()``) write ``options`` into its script; holds
    ``fd`` weakly, so that an evicted definition's kernels do not wait for the cyclic collector."""
    import weakref

    if getattr(type(fd), "repro_script_for", None) is None:
        return
    try:
        ref = weakref.ref(fd)
    except TypeError:
        return

    def repro_script_for(inputs: Any = None) -> str:
        target = ref()
        if target is None:  # pragma: no cover
            raise ReferenceError("the FusionDefinition is gone")
        return with_options(type(target).repro_script_for(target, inputs), options)

    fd.repro_script_for = repro_script_for


def annotate(error: BaseException, what: str, fusion: FusionInfo, compile_time: OptionSet, scope: OptionSet,
             effective: OptionSet, script: Callable[[], str], *, given_as: str = "compile-time") -> None:
    """Add nvscope's note to ``error``, unless it has one; ``script()`` makes the repro script's text (may raise).
    ``what`` names the kind of fusion ("Thunder fusion"); ``given_as`` where ``compile_time`` came from."""
    notes = getattr(error, "__notes__", None)
    if notes is not None and not isinstance(notes, list):
        return  # add_note would raise TypeError
    if failure_note(error) is not None:
        return
    try:
        repro = _repro_line(error, f"{what} {fusion.id}", fusion.id.replace("/", "-"), effective, script)
    except Exception as problem:
        repro = f"not written ({type(problem).__name__}: {error_line(problem)})"
    lines = [
        f"{MARK} {what} {fusion.id} failed with nvFuser options {effective.label()}",
        f"  {given_as}: {compile_time.label()}; scope: {scope.label()}",
        f"  for a whole process: {effective.as_shell() or '(no options)'}",
        f"  repro script: {repro}",
    ]
    add_note(error, "\n".join(lines))


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``; on Python 3.10 the ``__notes__`` list that pytest and the exceptiongroup backport
    print."""
    try:
        error.add_note(note)  # type: ignore[attr-defined,unused-ignore]  # Python >= 3.11
    except AttributeError:
        notes = getattr(error, "__notes__", None)
        try:
            error.__notes__ = [*(notes if isinstance(notes, list) else []), note]  # type: ignore[attr-defined]
        except Exception:  # pragma: no cover
            pass


def error_line(error: BaseException) -> str:
    """The first line of ``error``'s message, cut short (its type's name if it has none)."""
    text = str(error).strip().splitlines()
    return cut(text[0], 200) if text else type(error).__name__


def _repro_line(error: BaseException, fusion: str, stem: str, effective: OptionSet,
                script: Callable[[], str]) -> str:
    if not _env.flag("NVSCOPE_REPRO"):
        return "off (NVSCOPE_REPRO=0)"
    import hashlib

    body = script()
    header = (f"# nvscope repro: {fusion} failed with nvFuser options {effective.label()}\n"
              f"#   {type(error).__name__}: {error_line(error)}\n"
              "# Run as is: python <this file>. nvFuser's own repro script; the inputs have the failing inputs' shapes,"
              "\n#   dtypes and strides, not their values.\n")
    digest = hashlib.sha1(body.encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "_-." else "_" for c in stem)
    directory = os.path.abspath(_env.text("NVSCOPE_REPRO_DIR") or _default_directory())  # runnable from anywhere
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{safe}-{digest}.py")
    if not os.path.exists(path):
        partial = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(partial, "w", encoding="utf-8") as file:
            file.write(header + body)
        os.replace(partial, path)  # atomic: processes sharing the directory never see half a script
    run = " ".join(filter(None, [process_options_shell(), "python", shlex.quote(path)]))
    where = "NVSCOPE_REPRO_DIR chooses the directory" if _env.text("NVSCOPE_REPRO_DIR") else \
        "a temporary directory; NVSCOPE_REPRO_DIR chooses another"
    return f"{run}\n    ({where}; NVSCOPE_REPRO=0 turns repro scripts off)"


def scripts_named_in(text: str) -> list[str]:
    """The repro script paths named by the notes in ``text``, in order."""
    paths = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("repro script:"):
            command = stripped.partition(":")[2]
            try:
                words = shlex.split(command)
            except ValueError:  # cut short mid-quote
                words = command.split()
            paths += [word for word in words if word.endswith(".py")]
    return paths


def repro_paths(error: BaseException) -> tuple[str, ...]:
    """The repro scripts named by nvscope's notes on ``error`` and the errors it chains."""
    paths: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        note = failure_note(current)
        if note is not None:
            paths += scripts_named_in(note)
        current = current.__cause__ or current.__context__
    return tuple(dict.fromkeys(paths))


def failure_note(failure: BaseException | str) -> str | None:
    """nvscope's failure note on an exception, or in a failure's text (a fusion record's ``error``), or None."""
    if isinstance(failure, BaseException):
        notes = getattr(failure, "__notes__", None)
        return next((n for n in notes if isinstance(n, str) and n.startswith(MARK)), None) \
            if isinstance(notes, list) else None
    lines = failure.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(MARK)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])
