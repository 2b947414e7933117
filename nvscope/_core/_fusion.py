"""A fusion as a unit: its identity (`FusionInfo`) and the selectors that pick fusions (``nv_options(fusions=...)``).

A fusion's identity is computed once, when nvscope first sees it (its table is made, `nvscope._exec._execute`), and
kept:
the id is ``"<phase>/<name>"`` because Thunder's counter restarts per trace (forward and backward both have an
``nvFusion0``), and ``"<phase>/<name>#<k>"`` for the k-th distinct fusion (k >= 2: another jitted function, another
trace) to claim the same ``<phase>/<name>`` in this process (`claim`, in order of first sight: the same program gives
the same ids); the ops are the nvFuser operations of its definition, read from the Python nvFuser prints for it
(``fd.ops.linear(...)``), the same on every Thunder and both frontends, so a selector by ops means one thing.

Selectors are values: a glob over ids, a list of globs, a callable taking a `FusionInfo`, or the helpers `phase`
and `holding`, combined with ``|``, ``&`` and ``~``. Each is compiled when its scope is built (and kept: the same
glob or list of globs written again, e.g. in a loop, is the same compiled selector), so a bad glob or a non-callable
fails before anything is entered; a selector that raises, or a callable that returns something other than True or
False, fails the fusion's call with a message naming the selector and the fusion (it is matched once per fusion and
scope, never per execution). A glob selects a fusion when it matches its id, or its ``<phase>/<name>`` without the
``#k`` (so ``"*/nvFusion0"`` selects every such fusion), or its numbered id ``<phase>/<name>#<k>`` (``#1`` for the
first: ``"forward/nvFusion0#1"`` selects that one alone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import BuiltinFunctionType, FunctionType, MethodType

from nvscope._core._record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Phase = Literal["forward", "backward", "call"]

__all__ = ["FusionInfo", "Selector", "claim", "claimed", "exact_glob", "forget_ids", "holding", "note_ids",
           "ops_of_definition", "phase", "selector"]

_PHASES = ("forward", "backward", "call")


def ops_of_definition(text: str) -> tuple[str, ...]:
    """The nvFuser ops a printed FusionDefinition calls (``fd.ops.<name>(``), sorted and unique."""
    import re  # here: `import nvscope` does not pay for re (this runs once per fusion)

    return tuple(sorted(set(re.findall(r"\bfd\.ops\.([A-Za-z_][A-Za-z0-9_]*)\s*\(", text))))


class FusionInfo(Record):
    """One fusion as nvscope knows it: ``id`` (``"forward/nvFusion0"``), ``name``, ``phase``, ``ops``, ``function``.

    ``phase`` is ``"forward"``, ``"backward"`` (Thunder's backward trace) or ``"call"`` (a direct nvFuser
    ``execute``); ``ops`` the sorted nvFuser op names of its definition; ``function`` the name of the jitted function
    it belongs to, when nvscope could tell (Thunder), else None. ``instance`` is k when this is the k-th distinct
    fusion of the process to claim ``<phase>/<name>``: its id is then ``"<phase>/<name>#<k>"`` (1, the first: no
    suffix), so an id names one fusion.
    """

    __slots__ = ("function", "id", "instance", "name", "ops", "phase")

    id: str
    name: str
    phase: Phase
    ops: tuple[str, ...] | None
    function: str | None
    instance: int

    def __init__(self, name: str, phase: Phase, ops: Iterable[str] | None = (), function: str | None = None, *,
                 instance: int = 1) -> None:
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
        if type(instance) is not int or instance < 1:
            raise (TypeError if type(instance) is not int else ValueError)(
                f"FusionInfo: instance= takes the fusion's number among those of its <phase>/<name> (1, 2, ...), "
                f"not {instance!r}")
        base = f"{phase}/{name}"
        self._init(id=base if instance == 1 else f"{base}#{instance}", name=name, phase=phase, ops=ops,
                   function=function, instance=instance)

    def __repr__(self) -> str:
        where = f", function={self.function!r}" if self.function else ""
        ops = "unknown" if self.ops is None else repr(list(self.ops))
        return f"FusionInfo({self.id!r}, ops={ops}{where})"

    def aliases(self) -> tuple[str, str]:
        """What a glob may match besides the id: ``<phase>/<name>`` and the numbered id ``<phase>/<name>#<k>``."""
        base = f"{self.phase}/{self.name}"
        return base, f"{base}#{self.instance}"


# How many distinct fusions claimed each "<phase>/<name>" so far in this process (`claim`); the adapters call `claim`
# under `nvscope._exec._frontends.TABLE_LOCK`, once per fusion.
_claimed: dict[str, int] = {}


def claim(name: str, phase: Phase, ops: Iterable[str] | None, function: str | None) -> FusionInfo:
    """The identity of a fusion nvscope sees for the first time: the k-th to claim ``<phase>/<name>`` gets ``#k``."""
    base = f"{phase}/{name}"
    instance = _claimed.get(base, 0) + 1
    info = FusionInfo(name, phase, ops, function, instance=instance)  # may raise: then nothing is claimed
    _claimed[base] = instance
    return info


def claimed(base: str) -> int:
    """How many distinct fusions claimed ``<phase>/<name>`` ``base`` in this process so far."""
    return _claimed.get(base, 0)


def note_ids(ids: Iterable[str]) -> None:
    """Count the fusions behind ``ids`` seen in another process (a bisect's probes): ``x#k`` says k claimed ``x``."""
    for fusion_id in ids:
        base, mark, number = fusion_id.rpartition("#")
        if mark and "/" in base and number.isdigit():
            _claimed[base] = max(_claimed.get(base, 0), int(number))


def forget_ids() -> None:
    """Numbering starts again (the adapters dropped every fusion's table: `nvscope.uninstall`)."""
    _claimed.clear()


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
        return self._match(info)

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
    match = re.compile(fnmatch.translate(text)).match

    def matches(info: FusionInfo) -> bool:
        return match(info.id) is not None or any(match(alias) is not None for alias in info.aliases())

    return Selector(matches, repr(text), ("glob", text))


def _checked(call: Callable[[FusionInfo], object], name: str) -> Callable[[FusionInfo], bool]:
    """``call`` (the user's), refusing a result that is not a bool: truthiness would read ``"no"`` as True."""

    def checked(info: FusionInfo) -> bool:
        result = call(info)
        if result is True or result is False:
            return result
        from nvscope._core._errors import SelectorError
        from nvscope._core._validate import shown

        raise SelectorError(f"fusions={name} returned {type(result).__name__} {shown(result)} for fusion {info.id}: "
                            f"a selector must return True or False (e.g. bool(...) of what it computes)")

    return checked


# Compiled selectors by the value they were built from (a glob, or a list or tuple of globs): a scope written inside
# a loop builds its selector once, not at every entry. Bounded: a program generating globs stays finite.
_compiled: dict[object, Selector] = {}
_MAX_COMPILED = 1024


def selector(value: object) -> Selector:
    """A `Selector` from what ``fusions=`` takes: a glob, a list of globs, a callable or a `Selector`."""
    if isinstance(value, Selector):
        return value
    key: object = None
    if isinstance(value, str):
        key = value
    elif type(value) in (list, tuple) and all(type(item) is str for item in value):  # type: ignore[attr-defined]
        key = (tuple(value),)  # type: ignore[arg-type]
    if key is None:
        return _build(value)
    found = _compiled.get(key)
    if found is None:
        found = _build(value)
        if len(_compiled) >= _MAX_COMPILED:
            _compiled.clear()
        _compiled[key] = found
    return found


def _build(value: object) -> Selector:
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
        return Selector(_checked(value, name), name, ("call", value) if same else None)
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
    """A glob (``fusions=``) that matches exactly ``fusion_id``: ``*``, ``?`` and ``[`` in brackets, and ``#1`` after
    the id of the first of several fusions of one ``<phase>/<name>`` (the id alone selects them all)."""
    if claimed(fusion_id) > 1:
        fusion_id += "#1"
    return "".join(f"[{c}]" if c in "*?[" else c for c in fusion_id)
