"""A fusion as a unit: its identity (`FusionInfo`) and the selectors that pick fusions (``nv_options(fusions=...)``).

An id, ``<phase>/<name>[@<site>:<key> | @<site> | @<key>][#<k>]``, comes from where the fusion sits in the program, so
an id printed by one run selects the same fusion in the next (docs/fusions.md). Selectors compile when their scope is
built, so a bad glob fails before anything is entered."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import BuiltinFunctionType, FunctionType, MethodType

from nvscope._core import _ids, _state
from nvscope._core._errors import SelectorError
from nvscope._core._record import Record
from nvscope._core._site import NOT_IN_SITE
from nvscope._core._text import cut
from nvscope._core._validate import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Phase = Literal["forward", "backward", "call"]

__all__ = ["FusionInfo", "Selector", "exact_glob", "holding", "identify", "phase", "reidentify", "selector"]

_PHASES = ("forward", "backward", "call")
_SHOWN = 200


def ops_of_definition(text: str) -> tuple[str, ...]:
    """The nvFuser ops a printed FusionDefinition calls (``fd.ops.<name>(``), sorted and unique."""
    import re

    return tuple(sorted(set(re.findall(r"\bfd\.ops\.([A-Za-z_][A-Za-z0-9_]*)\s*\(", text))))


class FusionInfo(Record):
    """One fusion as nvscope knows it: ``id``, ``name``, ``phase`` (``"forward"``, ``"backward"``, ``"call"``),
    ``ops`` (sorted nvFuser op names), ``function``, ``site``, ``key`` and ``instance``; docs/fusions.md."""

    __slots__ = ("function", "id", "instance", "key", "name", "ops", "phase", "site")

    id: str
    name: str
    phase: Phase
    ops: tuple[str, ...] | None
    function: str | None
    instance: int
    site: str | None
    key: str | None

    def __init__(self, name: str, phase: Phase, ops: Iterable[str] | None = (), function: str | None = None, *,
                 instance: int = 1, site: str | None = None, key: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise (ValueError if name == "" else TypeError)(
                f"FusionInfo: name takes the fusion's name, e.g. 'nvFusion0', not {_shown(name)}")
        if phase not in _PHASES:
            raise ValueError(f"FusionInfo: phase {_shown(phase)} is not 'forward', 'backward' or 'call'")
        if ops is not None:
            if isinstance(ops, str):
                raise TypeError(f"FusionInfo: ops= takes a collection of op names (or None: unknown), not the "
                                f"string {_shown(ops)}; for one op write ({_shown(ops)},)")
            unique = set(ops)
            if not all(isinstance(op, str) for op in unique):
                raise TypeError(f"FusionInfo: ops= takes op names (str), not {_shown(sorted(map(repr, unique)))}")
            ops = tuple(sorted(unique))
        if type(instance) is not int or instance < 1:
            raise (TypeError if type(instance) is not int else ValueError)(
                f"FusionInfo: instance= takes the fusion's number among those of its <phase>/<name> and site "
                f"(1, 2, ...), not {_shown(instance)}")
        if site is not None and (not isinstance(site, str) or not site or not NOT_IN_SITE.isdisjoint(site)):
            raise (TypeError if not isinstance(site, str) else ValueError)(
                f"FusionInfo: site= takes where the fusion sits, e.g. 'train:Model.forward' (no '#', '/', glob "
                f"characters or blanks), or None; not {_shown(site)}")
        if key is not None and (not isinstance(key, str) or not key or not NOT_IN_SITE.isdisjoint(key)
                                or ":" in key):
            raise (TypeError if not isinstance(key, str) else ValueError)(
                f"FusionInfo: key= takes a digest, e.g. '3fa29c' (no ':', '#', '/', glob characters or blanks), or "
                f"None; not {_shown(key)}")
        where = ":".join(part for part in (site, key) if part)
        base = f"{phase}/{name}@{where}" if where else f"{phase}/{name}"
        self._init(id=base if instance == 1 else f"{base}#{instance}", name=name, phase=phase, ops=ops,
                   function=function, instance=instance, site=site, key=key)

    def __repr__(self) -> str:
        where = f", function={self.function!r}" if self.function else ""
        ops = "unknown" if self.ops is None else repr(list(self.ops))
        return f"FusionInfo({self.id!r}, ops={ops}{where})"

    def aliases(self) -> tuple[str, ...]:
        """What a glob may match besides the id: ``<phase>/<name>``, the id with its ``#<k>`` and, with a key,
        ``<phase>/<name>@<site>``."""
        short = f"{self.phase}/{self.name}"
        if self.key is None or self.site is None:
            return short, f"{self.base()}#{self.instance}"
        return short, f"{self.base()}#{self.instance}", f"{short}@{self.site}"

    def base(self) -> str:
        """The id without its ``#<k>``."""
        return self.id if self.instance == 1 else self.id[:-len(f"#{self.instance}")]


def _shown(value: object) -> str:
    return shown(value, _SHOWN)


def identify(name: str, phase: Phase, ops: Iterable[str] | None, function: str | None, site: str | None = None, *,
             key: str | None = None) -> FusionInfo:
    """The identity of a fusion seen for the first time: the k-th distinct one (by its ops) of an id gets ``#k``.
    Called under `nvscope._exec._frontends.TABLE_LOCK`, once per fusion."""
    info = FusionInfo(name, phase, ops, function, site=site, key=key)
    instance = _ids.number(info.id, info.ops)
    if instance > 1:
        info = FusionInfo(name, phase, info.ops, function, instance=instance, site=site, key=key)
    _ids.count(info.id, f"{phase}/{name}")
    return info


def reidentify(info: FusionInfo) -> FusionInfo:
    """A fusion identified before ``nvscope.uninstall()``, identified again as if seen for the first time."""
    return identify(info.name, info.phase, info.ops, info.function, info.site, key=info.key)


class Selector:
    """Which fusions a scope's options reach: ``selector(info) -> bool``, with a readable ``repr``; combine with
    ``|``, ``&`` and ``~``. Equal when built alike, so a scope built anew in a loop resolves to the same policy."""

    __slots__ = ("_hash", "_key", "_match", "_text")

    def __init__(self, match: Callable[[FusionInfo], bool], text: str, key: object = None) -> None:
        self._match = match
        self._text = cut(text, 2 * _SHOWN)
        self._key = key
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
            raise ValueError(f"phase() takes {', '.join(map(repr, _PHASES))}, not {_shown(name)}")
    if not phases:
        raise ValueError("phase() needs at least one phase, e.g. phase('backward')")
    wanted = frozenset(phases)
    return Selector(lambda info: info.phase in wanted, f"phase({', '.join(map(repr, phases))})", ("phase", wanted))


def holding(*ops: str) -> Selector:
    """Fusions whose nvFuser definition holds at least one of these ops: ``holding("matmul", "linear")``."""
    if not ops or not all(isinstance(op, str) and op.isidentifier() for op in ops):
        raise ValueError(f"holding() takes nvFuser op names, e.g. holding('matmul', 'linear'), not {_shown(ops)}")
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
        raise ValueError(f"fusions= got {_glob_shown(pattern)}, an unbalanced [ ] in a glob over fusion ids")
    if "/" not in text and not text.startswith("*"):
        raise ValueError(f"fusions= got {_glob_shown(pattern)}: fusion ids are '<phase>/<name>' (e.g. "
                         f"'forward/nvFusion0'); use {_glob_shown('*/' + text)} for that name in every phase")
    phase_part = text.partition("/")[0]
    if "/" in text and not any(fnmatch.fnmatchcase(known, phase_part) for known in _PHASES):
        from nvscope._core._catalog import _close_matches

        near = _close_matches(phase_part, _PHASES, n=1, cutoff=0.6)
        hint = f"; did you mean {_glob_shown(near[0] + text[len(phase_part):])}?" if near else ""
        raise ValueError(f"fusions= got {_glob_shown(pattern)}, but a fusion id begins with its phase, one of "
                         f"{', '.join(map(repr, _PHASES))}, and {_glob_shown(phase_part)} matches none{hint}")
    match = re.compile(fnmatch.translate(text)).match

    def matches(info: FusionInfo) -> bool:
        return match(info.id) is not None or any(match(alias) is not None for alias in info.aliases())

    return Selector(matches, _glob_shown(text), ("glob", text))


def _glob_shown(text: str) -> str:
    """A glob as messages show it: quoted, cut short."""
    return cut(text, _SHOWN, repr)


def _checked(call: Callable[[FusionInfo], object], name: str) -> Callable[[FusionInfo], bool]:
    """``call`` (the user's), refusing a result that is not a bool: truthiness would read ``"no"`` as True."""

    def checked(info: FusionInfo) -> bool:
        result = call(info)
        if result is True or result is False:
            return result
        raise SelectorError(f"fusions={name} returned {type(result).__name__} {shown(result)} for fusion {info.id}: "
                            f"a selector must return True or False (e.g. bool(...) of what it computes)")

    return checked


# Compiled selectors by the globs they were built from, so a scope inside a loop builds its selector once.
_compiled: dict[object, Selector] = {}
_MAX_COMPILED = 1024
_state.register(__name__, "_compiled", _compiled.clear, step="caches")


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
    if isinstance(value, str):
        return _glob(value)
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(f"fusions= takes a glob (str), not bytes: {shown(value)}")
    if callable(value):
        name = cut(str(getattr(value, "__qualname__", None) or repr(value)), _SHOWN)
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
    raise TypeError(f"fusions= takes a glob over fusion ids ('backward/*'), a list of them, a callable taking a "
                    f"FusionInfo, or nvscope.phase(...)/nvscope.holding(...); not {type(value).__name__}: "
                    f"{shown(value)}")


def exact_glob(fusion_id: str) -> str:
    """A ``fusions=`` glob that matches exactly ``fusion_id``."""
    base, mark, number = fusion_id.rpartition("#")
    numbered = bool(mark) and number.isdigit() and "/" in base
    if not numbered and "@" not in fusion_id and _ids.shares_short_form(fusion_id):
        fusion_id += "#1"
    return "".join(f"[{c}]" if c in "*?[" else c for c in fusion_id)
