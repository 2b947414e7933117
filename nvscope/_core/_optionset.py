"""The value type: an immutable, hashable set of nvFuser enable and disable option names.

It keys every compiled cache, so its hash is computed once and unions are memoised on the left operand."""

from __future__ import annotations

import os
from collections.abc import Mapping

from nvscope._core import _state
from nvscope._core._record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import ClassVar

__all__ = ["EMPTY", "NVFUSER_MODULES", "NVFUSER_VARIABLES", "OptionSet", "process_options_shell"]

NVFUSER_VARIABLES = ("NVFUSER_ENABLE", "NVFUSER_DISABLE")
# nvFuser's Python frontend modules, newest first.
NVFUSER_MODULES = ("nvfuser_direct", "nvfuser")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_EXAMPLE = "'NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=matmul_expr_eval'"


class OptionSet(Record):
    """An immutable set of nvFuser options: ``enable`` and ``disable`` are frozensets of option names, not validated
    here (``nv_options`` does that)."""

    __slots__ = ("__weakref__", "_hash", "_overrides", "_unions", "disable", "enable")

    enable: frozenset[str]
    disable: frozenset[str]
    _hash: int

    # Union results, memoised per left operand: adapters merge options at every fusion call.
    _unions: dict[OptionSet, OptionSet]
    _overrides: dict[OptionSet, OptionSet]
    _MAX_MEMO: ClassVar[int] = 256

    def __init__(self, enable: Iterable[str] = (), disable: Iterable[str] = ()) -> None:
        if isinstance(enable, str):
            enable = (enable,)
        if isinstance(disable, str):
            disable = (disable,)
        enable, disable = frozenset(enable), frozenset(disable)
        self._init(enable=enable, disable=disable, _hash=hash((enable, disable)), _unions={}, _overrides={})

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, OptionSet):
            return NotImplemented
        return self._hash == other._hash and self.enable == other.enable and self.disable == other.disable

    def __bool__(self) -> bool:
        return bool(self.enable or self.disable)

    def __repr__(self) -> str:
        return f"OptionSet(enable={sorted(self.enable)!r}, disable={sorted(self.disable)!r})"

    def __reduce__(self) -> tuple[type[OptionSet], tuple[tuple[str, ...], tuple[str, ...]]]:
        return (OptionSet, (tuple(sorted(self.enable)), tuple(sorted(self.disable))))

    def union(self, other: OptionSet) -> OptionSet:
        """``self | other``, per list. Returns ``self`` (the same object) when ``other`` adds nothing."""
        result = self._unions.get(other) if isinstance(other, OptionSet) else None
        if result is None:
            if not isinstance(other, OptionSet):
                raise TypeError(f"OptionSet.union takes an OptionSet, not {type(other).__name__}: "
                                "build one with OptionSet(enable=[...], disable=[...])")
            if other.enable <= self.enable and other.disable <= self.disable:
                result = self
            elif self.enable <= other.enable and self.disable <= other.disable:
                result = other
            else:
                result = OptionSet(self.enable | other.enable, self.disable | other.disable)
            if len(self._unions) >= self._MAX_MEMO:
                self._unions.clear()
            self._unions[other] = result
        return result

    def override(self, inner: OptionSet) -> OptionSet:
        """``self`` with ``inner`` laid over it: like `union`, but a name ``inner`` requests the other way wins
        (the rule for nested scopes). Memoised like `union`."""
        result = self._overrides.get(inner) if isinstance(inner, OptionSet) else None
        if result is None:
            if not isinstance(inner, OptionSet):
                raise TypeError(f"OptionSet.override takes an OptionSet, not {type(inner).__name__}")
            if not (self.enable & inner.disable or self.disable & inner.enable):
                result = self.union(inner)
            else:
                result = OptionSet((self.enable - inner.disable) | inner.enable,
                                   (self.disable - inner.enable) | inner.disable)
            if len(self._overrides) >= self._MAX_MEMO:
                self._overrides.clear()
            self._overrides[inner] = result
        return result

    def only(self, keep: Callable[[str, str], bool]) -> OptionSet:
        """The names for which ``keep(kind, name)`` is true (``kind`` is "enable" or "disable"); ``self`` if all."""
        enable = frozenset(name for name in self.enable if keep("enable", name))
        disable = frozenset(name for name in self.disable if keep("disable", name))
        if len(enable) == len(self.enable) and len(disable) == len(self.disable):
            return self
        return OptionSet(enable, disable)

    def __or__(self, other: object) -> OptionSet:
        if not isinstance(other, OptionSet):
            return NotImplemented
        return self.union(other)

    def as_env(self) -> dict[str, str]:
        """The environment variables that reproduce this set without nvscope (non-empty lists only); nvFuser reads
        them once, at startup."""
        env: dict[str, str] = {}
        if self.enable:
            env["NVFUSER_ENABLE"] = ",".join(sorted(self.enable))
        if self.disable:
            env["NVFUSER_DISABLE"] = ",".join(sorted(self.disable))
        return env

    def as_shell(self) -> str:
        """``as_env()`` as a shell prefix: ``NVFUSER_ENABLE=a,b NVFUSER_DISABLE=c`` ("" for no options)."""
        return " ".join(f"{key}={value}" for key, value in self.as_env().items())

    def label(self) -> str:
        """The set in a message: ``+fuse_matmul -matmul_expr_eval``; ``(none)`` for the empty set."""
        words = [f"+{name}" for name in sorted(self.enable)] + [f"-{name}" for name in sorted(self.disable)]
        return " ".join(words) or "(none)"

    @classmethod
    def parse(cls, line: str) -> OptionSet:
        """The set a shell line of ``NVFUSER_ENABLE=...``/``NVFUSER_DISABLE=...`` sets (`as_shell`'s inverse);
        anything else on the line raises ValueError naming the fix. Names are checked for form only."""
        if not isinstance(line, str):
            raise TypeError(f"OptionSet.parse takes a str such as {_EXAMPLE}, not {type(line).__name__}")
        import shlex

        try:
            words = shlex.split(line)
        except ValueError as error:
            raise ValueError(f"OptionSet.parse: {line!r} is not a shell line ({error}): close the quote") from None
        lists: dict[str, list[str]] = {}
        for word in words:
            variable, equals, value = word.partition("=")
            if not equals or variable not in NVFUSER_VARIABLES:
                raise ValueError(f"OptionSet.parse: {word!r} is not an NVFUSER_ENABLE=... or NVFUSER_DISABLE=... "
                                 f"assignment; the line holds only those, e.g. {_EXAMPLE}")
            if variable in lists:
                raise ValueError(f"OptionSet.parse: {variable} is given twice in {line!r}: give it once, with the "
                                 "names separated by commas")
            lists[variable] = _names(variable, value)
        return cls(lists.get("NVFUSER_ENABLE", ()), lists.get("NVFUSER_DISABLE", ()))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OptionSet:
        """The set ``NVFUSER_ENABLE`` and ``NVFUSER_DISABLE`` hold in ``environ`` (default: ``os.environ``); a
        malformed value raises ValueError naming the fix."""
        if environ is None:
            environ = os.environ
        elif not isinstance(environ, Mapping):
            raise TypeError(f"OptionSet.from_env takes a mapping such as os.environ (or None for it), not "
                            f"{type(environ).__name__}")
        enable, disable = (_names(variable, environ.get(variable) or "") for variable in NVFUSER_VARIABLES)
        return cls(enable, disable)

    def thunder_kwargs(self) -> dict[str, list[str]]:
        """Thunder's compile options for this set: ``thunder.jit(fn, **options.thunder_kwargs())``."""
        return {"nv_enable_options": self.enable_list(), "nv_disable_options": self.disable_list()}

    def enable_list(self) -> list[str]:
        """The enable names, sorted: what nvFuser's ``_enable_options`` takes."""
        return sorted(self.enable)

    def disable_list(self) -> list[str]:
        """The disable names, sorted: what nvFuser's ``_disable_options`` takes."""
        return sorted(self.disable)


def process_options_shell(environ: Mapping[str, str] | None = None) -> str:
    """The process-wide ``NVFUSER_ENABLE``/``NVFUSER_DISABLE`` of ``environ`` as a shell prefix, arguments included
    (which an `OptionSet` cannot hold): ``NVFUSER_ENABLE='p2p_protocol(put)'``; empty when neither is set."""
    import shlex

    environ = os.environ if environ is None else environ
    return " ".join(f"{name}={shlex.quote(environ[name])}" for name in NVFUSER_VARIABLES if environ.get(name))


def _names(variable: str, value: str) -> list[str]:
    """The option names of ``variable=value`` (comma-separated), or ValueError naming what is wrong and the fix."""
    if not value:
        return []
    shown = f"{variable}={value!r}"
    if "(" in value or ")" in value:
        option = value[:value.find("(")].rpartition(",")[2] if "(" in value else value
        raise ValueError(f"{shown}: {option!r} takes arguments, which an OptionSet (and so a scope) cannot carry: "
                         "set that option in the environment of the whole process and leave it out here")
    names = value.split(",")
    for name in names:
        if not name:
            raise ValueError(f"{shown} has an empty name: separate names with single commas, e.g. "
                             f"{variable}=fuse_matmul,kernel_profile")
        if not _NAME_CHARS.issuperset(name):
            fix = ("separate names with commas and no spaces" if any(c.isspace() for c in name) else
                   "nvFuser's option names use underscores (`nvscope options` lists them)")
            raise ValueError(f"{shown}: {name!r} is not an option name (letters, digits and underscores): {fix}")
    return names


EMPTY = OptionSet()


def _forget_memos() -> None:
    """EMPTY's memos hold the option sets that scopes made: rebuilt on demand."""
    EMPTY._unions.clear()
    EMPTY._overrides.clear()


_state.register(__name__, "EMPTY._unions EMPTY._overrides", _forget_memos, step="caches")
