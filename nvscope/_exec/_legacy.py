"""The legacy ``nvfuser`` frontend, all of it: delete this module (and its entry in
`nvscope._exec._frontends.FRONTENDS`) when Thunder 0.2.6 no longer matters. nvFuser 0.2.36 removed the module (Fuser
#5917); Thunder main dropped it (PR 2813); Thunder 0.2.6 still drives it with nvFuser 0.2.23 - 0.2.33.

* One process-wide FusionCache deduplicates identical definitions, so a partition's definition is *salted* with one
  unused ``define_scalar(<salt>)`` that differs per option set (measured on the H200: it gets an entry of its own).
  nvscope never calls ``FusionCache.reset()``: that would drop every user's kernels, and it made the default reuse a
  scoped kernel. Partitions whose salted definitions are one cache entry share its compile, so they share its
  failure too: they join one `nvscope._exec._shared` entry (``share=False``: each runs its own definition), and a
  failing compile is one attempt and one warning for all of them.
* The module warns "Reset the FusionCache manually..." on every execute with options. For executions nvscope
  partitioned that advice is already followed, so the warning is dropped for them only: the module's ``warnings``
  name is replaced by a proxy that consults a thread-local flag (``warnings.catch_warnings`` mutates process-global
  state and is not thread-safe). Both adapters may rely on these hooks at once, so they are reference-counted by
  user (`LegacyFrontend.acquire` / `release`) instead of either adapter asking about the other.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

from nvscope._core import OptionSet, _patches, _state
from nvscope._exec._direct import Frontend

__all__ = ["LEGACY", "LegacyFrontend", "salted"]

_local = threading.local()
_SALT_BASE = 0x6E7673_0000  # "nvs": far from any scalar a real definition would use
_OWNER = "legacy-frontend"
_state.keep(__name__, "_local", "per thread: set and unset around one call")


@contextmanager
def _thread_flag(name: str, value: object) -> Iterator[None]:
    previous = getattr(_local, name, None)
    setattr(_local, name, value)
    try:
        yield
    finally:
        setattr(_local, name, previous)


def salted(salt: int) -> AbstractContextManager[None]:
    """Definitions finished on this thread inside get one unused ``define_scalar(salt)``."""
    return _thread_flag("salt", salt)


class _QuietWarnings:
    """Stands in for ``warnings`` inside the legacy ``nvfuser`` module; see the module docstring."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def warn(self, message: Any, category: Any = None, stacklevel: int = 1, source: Any = None) -> None:
        if getattr(_local, "quiet", False) and str(message).startswith("Reset the FusionCache manually"):
            return
        self._real.warn(message, category, stacklevel + 1, source)


class LegacyFrontend(Frontend):
    """The ``nvfuser`` module: salted definitions, and its reset warning dropped for partitioned executions."""

    __slots__ = ("_salt_lock", "_salts", "_users")

    def __init__(self) -> None:
        super().__init__("nvfuser")
        self._users: set[str] = set()
        self._salts: dict[OptionSet, int] = {}
        self._salt_lock = threading.Lock()

    def salt_for(self, options: OptionSet) -> int:
        """A process-stable integer per option set: the unused scalar that gives a legacy partition its own cache
        entry. Under a lock: ``OptionSet.__hash__`` runs Python between reading the count and inserting, so two
        threads could otherwise hand two option sets one salt."""
        salt = self._salts.get(options)
        if salt is None:
            with self._salt_lock:
                salt = self._salts.get(options)
                if salt is None:
                    salt = self._salts[options] = _SALT_BASE + len(self._salts)
        return salt

    def own_definitions(self, options: OptionSet) -> AbstractContextManager[None]:
        return salted(self.salt_for(options))

    def quiet(self) -> AbstractContextManager[None]:
        return _thread_flag("quiet", True)

    def acquire(self, module: ModuleType | None, user: str) -> None:
        if module is None:  # a FusionDefinition whose module is gone from sys.modules: nothing to hook
            raise RuntimeError("the legacy nvfuser module is not imported")
        if not _patches.active(_OWNER):
            fd_class = module.FusionDefinition
            original_exit = fd_class.__exit__
            int_type = module.DataType.Int

            def __exit__(self: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
                salt = getattr(_local, "salt", None)
                if salt is not None and exc_type is None:
                    self.define_scalar(salt, dtype=int_type)
                return original_exit(self, exc_type, exc, tb)

            __exit__.__wrapped__ = original_exit  # type: ignore[attr-defined]
            _patches.apply(_OWNER, fd_class, "__exit__", __exit__)
            _patches.apply(_OWNER, module, "warnings", _QuietWarnings(module.warnings))
        self._users.add(user)

    def release(self, user: str) -> None:
        self._users.discard(user)
        if not self._users:
            _patches.restore(_OWNER)


LEGACY = LegacyFrontend()  # in `nvscope._exec._frontends.FRONTENDS`
# The adapters using its hooks: each releases itself when it uninstalls; the patch ledger's step puts back any hooks
# an adapter left, so none is in use after it.
_state.register(__name__, "LEGACY._users", LEGACY._users.clear, step="patches")
# nvFuser's process-wide FusionCache, which nothing resets, keeps the kernels of each salted definition: a salt handed
# out again after uninstall would run kernels compiled under another option set.
_state.keep(__name__, "LEGACY._salts", "salts stay distinct per option set for the process (nvFuser's FusionCache)")
_state.keep(__name__, "LEGACY._salt_lock", "a lock")
