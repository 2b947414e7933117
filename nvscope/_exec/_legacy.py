"""The legacy ``nvfuser`` frontend, all of it: delete this module (and its `frontend_of` entry) when Thunder 0.2.6 no
longer matters.

Its process-wide FusionCache deduplicates identical definitions, so a partition's definition is salted with an unused
scalar per option set (docs/how-it-works.md). Both adapters may use its hooks at once: they count their users.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

from nvscope._core import OptionSet, _patches, _state
from nvscope._exec._direct import Frontend

__all__ = ["LEGACY", "LegacyFrontend"]

_local = threading.local()
_SALT_BASE = 0x6E7673_0000  # far from any scalar a real definition would use
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


class _QuietWarnings:
    """``warnings`` inside the legacy module, per thread (``catch_warnings`` is not thread-safe)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def warn(self, message: Any, category: Any = None, stacklevel: int = 1, source: Any = None) -> None:
        if getattr(_local, "quiet", False) and str(message).startswith("Reset the FusionCache manually"):
            return
        self._real.warn(message, category, stacklevel + 1, source)


class LegacyFrontend(Frontend):
    """The ``nvfuser`` module: salted definitions, its reset warning quiet."""

    __slots__ = ("_salt_lock", "_salts", "_users")

    def __init__(self) -> None:
        super().__init__("nvfuser")
        self._users: set[str] = set()
        self._salts: dict[OptionSet, int] = {}
        self._salt_lock = threading.Lock()

    def salt_for(self, options: OptionSet) -> int:
        """A process-stable salt per option set; locked, as ``OptionSet.__hash__`` runs Python mid-insert."""
        salt = self._salts.get(options)
        if salt is None:
            with self._salt_lock:
                salt = self._salts.get(options)
                if salt is None:
                    salt = self._salts[options] = _SALT_BASE + len(self._salts)
        return salt

    def own_definitions(self, options: OptionSet) -> AbstractContextManager[None]:
        return _thread_flag("salt", self.salt_for(options))

    def quiet(self) -> AbstractContextManager[None]:
        return _thread_flag("quiet", True)

    def acquire(self, module: ModuleType | None, user: str) -> None:
        if module is None:
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


LEGACY = LegacyFrontend()
_state.register(__name__, "LEGACY._users", LEGACY._users.clear, step="patches")
_state.keep(__name__, "LEGACY._salts", "salts stay distinct per option set for the process (nvFuser's FusionCache)")
_state.keep(__name__, "LEGACY._salt_lock", "a lock")
