"""Zero setup: adapters install themselves for the frameworks a program uses.

Once ``thunder`` is imported, a non-empty scope entry installs the Thunder adapter (unless ``NVSCOPE_AUTOINSTALL=0``
or after ``nvscope.thunder.uninstall()``); ``nvscope run`` also installs the direct adapter as nvFuser is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope._core import NVFUSER_MODULES, ROOT, _env, _patches, _state
from nvscope._exec._adapter import INSTALLED

__all__ = ["WATCHED", "ensure_adapters", "install", "program_errors", "share_program_wide", "uninstall",
           "watch_imports"]

WATCHED = ("thunder", *NVFUSER_MODULES)


def ensure_adapters(direct: bool = False) -> None:
    """Install the adapter for each framework imported by now."""
    count = len(sys.modules)
    if count == INSTALLED.seen_modules and not direct:
        return
    INSTALLED.seen_modules = count
    if not _env.flag("NVSCOPE_AUTOINSTALL"):
        return
    thunder = "thunder" in sys.modules  # its adapter covers nvFuser too
    try:
        if (thunder and not _patches.declined("thunder")) or (direct and not thunder):
            install()
    except BaseException:
        # A refusal must meet every later scope too, or they would run silently without the options.
        INSTALLED.seen_modules = -1
        raise
    INSTALLED.seen_modules = len(sys.modules)


def install() -> list[str]:
    """Install now the adapter of every framework already imported (Thunder's, else the direct nvFuser one); returns
    those in place, e.g. ``["nvscope.thunder"]``. Idempotent; `UnsupportedError`, patching nothing, for a Thunder
    nvscope cannot drive."""
    if "thunder" in sys.modules:
        from nvscope._exec import _thunder as thunder

        return ["nvscope.thunder"] if thunder.install() else []
    if any(name in sys.modules for name in NVFUSER_MODULES):
        from nvscope._exec import _nvfuser as nvfuser

        return ["nvscope.nvfuser"] if nvfuser.install() else []
    return []


def uninstall() -> bool:
    """Undo every patch nvscope made, back to a freshly imported nvscope; returns whether any was undone.

    The next non-empty scope installs the Thunder adapter again; ``nvscope.thunder.uninstall()`` keeps it off.
    """
    restored = bool(_patches.owners())
    _state.reset()
    if ROOT is not None:
        try:
            ensure_adapters(direct=True)
        except Exception as error:  # the next scope entry raises it, as at import
            INSTALLED.program_errors.append(error)
    return restored


def _imported(name: str) -> None:
    if name != "thunder" and "thunder" in sys.modules:
        return  # Thunder's own import: its adapter covers nvFuser
    ensure_adapters(direct=True)


@contextmanager
def watch_imports() -> Iterator[list[BaseException]]:
    """Inside, adapters install as soon as Thunder or nvFuser is imported; yields the list of install errors."""
    from nvscope._exec._import_hook import AfterImport

    report: list[BaseException] = []
    finder = AfterImport(WATCHED, report, _imported)
    sys.meta_path.insert(0, finder)
    try:
        ensure_adapters(direct=True)
        yield report
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)


def share_program_wide() -> None:
    """Under ``NVSCOPE_SHARE=all`` (`nvscope._core._frames.ROOT`), where a program may enter no scope: install for
    what is imported now, and watch for Thunder or nvFuser for the life of the process. Otherwise nothing."""
    if ROOT is None:
        return
    from nvscope._exec._import_hook import AfterImport

    sys.meta_path.insert(0, AfterImport(WATCHED, INSTALLED.program_errors, _imported))
    try:
        ensure_adapters(direct=True)
    except Exception as error:  # import must not fail; the next scope entry raises it
        INSTALLED.program_errors.append(error)


def program_errors() -> tuple[BaseException, ...]:
    """The install errors of ``NVSCOPE_SHARE=all`` (for ``nvscope doctor``)."""
    return tuple(INSTALLED.program_errors)
