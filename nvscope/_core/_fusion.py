"""A fusion as a unit: its identity (`FusionInfo`) and the selectors that pick fusions (``nv_options(fusions=...)``).

A fusion's identity is computed once, when nvscope first sees it (its table is made, `nvscope._exec._execute`), and
kept:
the id is ``"<phase>/<name>"`` because Thunder's counter restarts per trace (forward and backward both have an
``nvFusion0``); the ops are the nvFuser operations of its definition, read from the Python nvFuser prints for it
(``fd.ops.linear(...)``), the same on every Thunder and both frontends, so a selector by ops means one thing.

Selectors are values: a glob over ids, a list of globs, a callable taking a `FusionInfo`, or the helpers `phase`
and `holding`, combined with ``|``, ``&`` and ``~``. Each is compiled once, when its scope is built, so a bad glob
or a non-callable fails before anything is entered; a selector that raises while matching fails the fusion's call
with a message naming the selector (it is matched once per fusion and scope, never per execution).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import BuiltinFunctionType, FunctionType, MethodType

from nvscope._core._record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Phase = Literal["forward", "backward", "call"]

__all__ = ["FusionInfo", "Selector", "exact_glob", "holding", "ops_of_definition", "phase", "selector"]

_PHASES = ("forward", "backward", "call")


def ops_of_definition(text: str) -> tuple[str, ...]:
    """The nvFuser ops a printed FusionDefinition calls (``fd.ops.<name>(``), sorted and unique."""
    import re  # here: `import nvscope` does not pay for re (this runs once per fusion)

    return tuple(sorted(set(re.findall(r"\bfd\.ops\.([A-Za-z_][A-Za-z0-9_]*)\s*\(", text))))


class FusionInfo(Record):
    """One fusion as nvscope knows it: ``id`` (``"forward/nvFusion0"``), ``name``, ``phase``, ``ops``, ``function``.

    ``phase`` is ``"forward"``, ``"backward"`` (Thunder's backward trace) or ``"call"`` (a direct nvFuser
    ``execute``); ``ops`` the sorted nvFuser op names of its definition; ``function`` the name of the jitted function
    it belongs to, when nvscope could tell (Thunder), else None.
    """

    __slots__ = ("function", "id", "name", "ops", "phase")

    id: str
    name: str
    phase: Phase
    ops: tuple[str, ...] | None
    function: str | None

    def __init__(self, name: str, phase: Phase, ops: Iterable[str] | None = (), function: str | None = None) -> None:
        # Checked once per fusion: a fusion built wrong here would be one that no selector or gate reads right.
        if not isinstance(name, str) or not name:
            raise (ValueError if name == "" else TypeError)(
                f"FusionInfo: name takes the fusion's name, e.g. 'nvFusion0', not {name!r}")
        if phase not in _PHASES:
            raise ValueError(f"FusionInfo: phase {phase!r} is not 'forward', 'backward' or 'call'")
        if ops is not None:
            if isinstance(ops, str):
                raise TypeError(f"FusionInfo: ops= takes a collection of op names (or None: unknown), not the "
                                f"string {ops!r}; for one op write ({ops!r},)")
            unique = set(ops)
            if not all(isinstance(op, str) for op in unique):
                raise TypeError(f"FusionInfo: ops= takes op names (str), not {sorted(map(repr, unique))}")
            ops = tuple(sorted(unique))
        self._init(id=f"{phase}/{name}", name=name, phase=phase, ops=ops, function=function)

    def __repr__(self) -> str:
        where = f", function={self.function!r}" if self.function else ""
        ops = "unknown" if self.ops is None else repr(list(self.ops))
        return f"FusionInfo({self.id!r}, ops={ops}{where})"

    def __reduce__(self) -> tuple[type[FusionInfo], tuple[object, ...]]:
        return (FusionInfo, (self.name, self.phase, self.ops, self.function))


class Selector:
    """Which fusions a scope's options reach: ``selector(info) -> bool``, with a readable ``repr``.

    Combine with ``|`` (either), ``&`` (both) and ``~`` (not). Equal when they select alike by construction (the same
    glob, phases, ops, function, or combination of equal selectors; another callable only to itself), so a scope
    written anew at every step of a loop resolves to the same interned policy and each fusion's memo still hits.
    """

    __slots__ = ("_hash", "_key", "_match", "_text")

    def __init__(self, match: Callable[[FusionInfo], bool], text: str, key: object = None) -> None:
        self._match = match
        self._text = text
        self._key = key  # what it selects, as a hashable value (None: only itself is equal to it)
        self._hash = object.__hash__(self) if key is None else hash(key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selector):
            return NotImplemented
        return self is other or (self._key is not None and self._key == other._key)

    def __hash__(self) -> int:
        return self._hash

    def __call__(self, info: FusionInfo) -> bool:
        return bool(self._match(info))

    def __repr__(self) -> str:
        return self._text

    def __or__(self, other: object) -> Selector:
        right = selector(other)
        return Selector(lambda info: self(info) or right(info), f"({self!r} | {right!r})", ("or", self, right))

    def __and__(self, other: object) -> Selector:
        right = selector(other)
        return Selector(lambda info: self(info) and right(info), f"({self!r} & {right!r})", ("and", self, right))

    def __invert__(self) -> Selector:
        return Selector(lambda info: not self(info), f"~{self!r}", ("not", self))

    __ror__ = __or__
    __rand__ = __and__


def phase(*phases: str) -> Selector:
    """Fusions of these phases: ``phase("backward")``, ``phase("forward", "call")``."""
    for name in phases:
        if name not in _PHASES:
            raise ValueError(f"phase() takes {', '.join(map(repr, _PHASES))}, not {name!r}")
    if not phases:
        raise ValueError("phase() needs at least one phase, e.g. phase('backward')")
    wanted = frozenset(phases)
    return Selector(lambda info: info.phase in wanted, f"phase({', '.join(map(repr, phases))})", ("phase", wanted))


def holding(*ops: str) -> Selector:
    """Fusions whose nvFuser definition holds at least one of these ops: ``holding("matmul", "linear")``.

    Op names are nvFuser's (``fd.ops.<name>`` in a printed definition; ``nvscope fusions`` lists each fusion's).
    """
    if not ops or not all(isinstance(op, str) and op.isidentifier() for op in ops):
        raise ValueError(f"holding() takes nvFuser op names, e.g. holding('matmul', 'linear'), not {ops!r}")
    wanted = frozenset(ops)
    return Selector(lambda info: not wanted.isdisjoint(info.ops or ()), f"holding({', '.join(map(repr, ops))})",
                    ("holding", wanted))


def _glob(pattern: str) -> Selector:
    """A shell-style glob over fusion ids (``*``, ``?``, ``[...]``), matched against the whole id."""
    import fnmatch
    import re

    text = pattern.strip()
    if not text:
        raise ValueError("fusions= got an empty glob: use e.g. 'backward/*' or 'forward/nvFusion2'")
    if text.count("[") != text.count("]"):
        raise ValueError(f"fusions= got {pattern!r}, an unbalanced [ ] in a glob over fusion ids")
    if "/" not in text and not text.startswith("*"):
        raise ValueError(f"fusions= got {pattern!r}: fusion ids are '<phase>/<name>' (e.g. 'forward/nvFusion0'); "
                         f"use {'*/' + text!r} for that name in every phase")
    regex = re.compile(fnmatch.translate(text))
    return Selector(lambda info: regex.match(info.id) is not None, repr(text), ("glob", text))


def selector(value: object) -> Selector:
    """A `Selector` from what ``fusions=`` takes: a glob, a list of globs, a callable or a `Selector`."""
    from nvscope._core._validate import shown

    if isinstance(value, Selector):
        return value
    if isinstance(value, str):
        return _glob(value)
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(f"fusions= takes a glob (str), not bytes: {shown(value)}")
    if callable(value):
        name = getattr(value, "__qualname__", None) or repr(value)
        # A function (or a bound method) is equal to itself only: the same one passed again selects the same.
        same = isinstance(value, (FunctionType, MethodType, BuiltinFunctionType))
        return Selector(value, name, ("call", value) if same else None)
    if isinstance(value, Iterable) and not isinstance(value, dict):
        parts = [selector(item) if isinstance(item, (str, Selector)) or callable(item) else _not_a_selector(item)
                 for item in value]
        if not parts:
            raise ValueError("fusions= got an empty list, which would select no fusion: leave fusions= out to "
                             "select every fusion")
        return Selector(lambda info: any(part(info) for part in parts), f"[{', '.join(map(repr, parts))}]",
                        ("any", tuple(parts)))
    return _not_a_selector(value)


def _not_a_selector(value: object) -> Selector:
    from nvscope._core._validate import shown

    raise TypeError(f"fusions= takes a glob over fusion ids ('backward/*'), a list of them, a callable taking a "
                    f"FusionInfo, or nvscope.phase(...)/nvscope.holding(...); not {type(value).__name__}: "
                    f"{shown(value)}")


def exact_glob(fusion_id: str) -> str:
    """A glob (``fusions=``) that matches exactly ``fusion_id``: ``*``, ``?`` and ``[`` in brackets."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in fusion_id)
