"""Zero setup: adapters install themselves for the frameworks a program uses, by one rule and two triggers.

The rule (`ensure_adapters`): once ``thunder`` is imported, the Thunder adapter is installed (unless
``NVSCOPE_AUTOINSTALL=0`` or after an explicit ``nvscope.thunder.uninstall()``); with ``direct=True`` (``nvscope
run``, which owns the whole program), an nvFuser frontend imported without Thunder gets the direct adapter too. It
imports an adapter only when its framework is already in ``sys.modules``, so ``import nvscope`` and scopes on a
machine without Thunder stay light.

The triggers: every non-empty scope entry (``import nvscope`` registers `ensure_adapters` by name with the core's
enter hooks; it looks again only when ``sys.modules`` has grown since the last look), and, inside `watch_imports`
(``nvscope run``) or under ``NVSCOPE_SHARE=all`` (`share_program_wide`), the moment the program finishes
importing Thunder or nvFuser.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope._core import NVFUSER_MODULES, ROOT, _env, _patches, _state
from nvscope._exec._adapter import INSTALLED

__all__ = ["ensure_adapters", "install", "program_errors", "share_program_wide", "uninstall",
           "watch_imports"]

_WATCHED = ("thunder", *NVFUSER_MODULES)


def ensure_adapters(direct: bool = False) -> None:
    """Install the adapter for each framework imported by now (see the module docstring for the rule)."""
    count = len(sys.modules)
    if count == INSTALLED.seen_modules and not direct:
        return
    INSTALLED.seen_modules = count
    if not _env.flag("NVSCOPE_AUTOINSTALL"):
        return
    try:
        if "thunder" in sys.modules:
            from nvscope._exec import _thunder as thunder

            if not _patches.declined("thunder") and not thunder.installed():
                thunder.install()
        elif direct and any(name in sys.modules for name in NVFUSER_MODULES):
            # Thunder imports nvFuser while it is itself being imported; its own adapter then covers it.
            from nvscope._exec import _nvfuser as nvfuser

            nvfuser.install()
    except BaseException:
        # A refusal (an unknown Thunder: UnsupportedError) must meet every later scope too, not only the first:
        # otherwise the second scope would run its fusions silently without the options.
        INSTALLED.seen_modules = -1
        raise
    INSTALLED.seen_modules = len(sys.modules)  # installing may import more; those need no second look


def install() -> list[str]:
    """Install now the adapter of every framework already imported; returns the adapters in place, e.g.
    ``["nvscope.thunder"]`` (``[]``: import Thunder or nvFuser first).

    Thunder's adapter when ``thunder`` is imported (it covers the nvFuser that Thunder uses), else the direct nvFuser
    adapter for the imported nvFuser frontends. Explicit, so it works under ``NVSCOPE_AUTOINSTALL=0`` and after an
    explicit uninstall; idempotent. Raises `UnsupportedError`, patching nothing, for a Thunder nvscope cannot drive.
    """
    if "thunder" in sys.modules:
        from nvscope._exec import _thunder as thunder

        return ["nvscope.thunder"] if thunder.install() else []
    if any(name in sys.modules for name in NVFUSER_MODULES):
        from nvscope._exec import _nvfuser as nvfuser

        return ["nvscope.nvfuser"] if nvfuser.install() else []
    return []


def uninstall() -> bool:
    """Undo every patch nvscope made (all adapters), back to a freshly imported nvscope. Returns whether any was undone.

    One reset of every state registered with `nvscope._core._state`, each cleared once; fusion ids (kept on the
    fusions) and the legacy frontend's salts outlive it (docs/how-it-works.md, "State"). After it, the next non-empty
    scope installs the Thunder adapter again, as after ``import nvscope``; use ``nvscope.thunder.uninstall()`` instead
    to keep scopes from doing so. Under ``NVSCOPE_SHARE=all`` the adapters of what is imported are installed again at
    once, as ``import nvscope`` installs them there.
    """
    restored = bool(_patches.owners())  # only adapters patch: what is in the ledger is theirs
    _state.reset()  # every piece of state registered with nvscope._core._state, in its order
    if ROOT is not None:  # as after `import nvscope` under NVSCOPE_SHARE=all: the adapters of what is imported, now
        try:
            ensure_adapters(direct=True)
        except Exception as error:  # an unsupported Thunder: the next scope entry raises it, as at import
            INSTALLED.program_errors.append(error)
    return restored


def _imported(name: str) -> None:
    if name != "thunder" and "thunder" in sys.modules:
        return  # nvFuser imported by Thunder's own import: Thunder's adapter installs once Thunder is complete
    ensure_adapters(direct=True)


@contextmanager
def watch_imports() -> Iterator[list[BaseException]]:
    """Inside, adapters install as soon as Thunder or nvFuser is imported; yields the list of install errors."""
    from nvscope._exec._import_hook import (
        AfterImport,  # importlib.abc costs milliseconds that `import nvscope` must not pay
    )

    report: list[BaseException] = []
    finder = AfterImport(_WATCHED, report, _imported)
    sys.meta_path.insert(0, finder)
    try:
        ensure_adapters(direct=True)
        yield report
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)


def share_program_wide() -> None:
    """``NVSCOPE_SHARE=all`` (`nvscope._core._frames.ROOT`; ``import nvscope`` calls this when the variable is set):
    no scope is entered, so neither trigger would fire for a program that never enters one; install for what is
    imported now and watch for Thunder or nvFuser to come. The hook stays for the life of the process, as the setting
    does (importlib.abc's milliseconds are paid only here). Without that setting, nothing."""
    if ROOT is None:
        return
    from nvscope._exec._import_hook import AfterImport

    sys.meta_path.insert(0, AfterImport(_WATCHED, INSTALLED.program_errors, _imported))
    try:
        ensure_adapters(direct=True)
    except Exception as error:  # an unsupported Thunder: import must not fail; the next scope entry raises it
        INSTALLED.program_errors.append(error)


def program_errors() -> tuple[BaseException, ...]:
    """The install errors of ``NVSCOPE_SHARE=all``'s program-wide install (for ``nvscope doctor``)."""
    return tuple(INSTALLED.program_errors)
