"""Every piece of module-level state in nvscope is registered with `nvscope._core._state` (what `nvscope.uninstall()`
clears, and in which step) or kept across it with a reason.

The inventory imports the package and every module in it and walks what each binds at module level: a value is state
unless `why_not_state` names it immutable (a scalar, a tuple or frozenset or ``MappingProxyType`` of such, a frozen
dataclass, a pattern, a logger, code). It looks inside what it lets through: the items of a read-only container, the
attributes of an nvscope object (its ``__dict__`` and ``__slots__``) and of an nvscope class, the defaults and
closure of an nvscope function. And it reads each module's source for ``global`` statements: a name rebound at run
time is state whatever its value is now. What is found and neither registered nor kept (it, or the global that holds
it) fails the test, by name. A read-only annotation (``Mapping``, ``Sequence``) exempts nothing: mypy keeps the
package from writing to such a table, not from rebinding it, and not from writing to what its items hold.

On the CPU every module imports (none needs torch, Thunder or nvFuser at import); one that did would be skipped only
for a missing torch/thunder/nvfuser, and named in the skip. `test_the_inventory_finds_each_kind_of_state` proves the
walk on a throwaway module per kind of state, which fails it, and passes once it is kept.
"""

from __future__ import annotations

import ast
import collections
import contextvars
import dataclasses
import enum
import functools
import importlib
import importlib.util
import logging
import pkgutil
import re
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import nvscope
from nvscope._core import _state

# A module that runs something when imported: the command line (`python -m nvscope`).
NOT_IMPORTED = frozenset({"nvscope.__main__"})
HEAVY = ("torch", "thunder", "nvfuser", "nvfuser_direct")
LOCKS = (type(threading.Lock()), type(threading.RLock()))
FIELD = type(vars(collections.namedtuple("Point", "x"))["x"])  # the class of a NamedTuple's field
FEATURE = type(annotations)  # what `from __future__ import annotations` binds in a module


def modules() -> tuple[list[types.ModuleType], list[str]]:
    """The package and every module in it, imported; and those skipped because an optional framework is missing."""
    found, skipped = [nvscope], []
    for info in pkgutil.walk_packages(nvscope.__path__, "nvscope."):  # submodules only: the package is the first
        if info.name in NOT_IMPORTED:
            continue
        try:
            found.append(importlib.import_module(info.name))
        except ImportError as error:
            if (error.name or "").partition(".")[0] not in HEAVY:
                raise
            skipped.append(f"{info.name} ({error.name} missing)")
    return found, skipped


def ours(value: object) -> bool:
    """Whether ``value`` (a class or function) is defined in nvscope."""
    return str(getattr(value, "__module__", "")).partition(".")[0] == "nvscope"


def why_not_state(value: object) -> str | None:
    """Why ``value``, bound at module level, is not state that `nvscope.uninstall()` must clear or keep; None if it
    is. Anything not named here is state: a new kind of holder fails the inventory until it is registered or kept."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, range)):
        return "an immutable scalar"
    if isinstance(value, (tuple, frozenset, types.MappingProxyType)):
        return "read-only at run time: its items are walked"
    if dataclasses.is_dataclass(value) and not isinstance(value, type) \
            and type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return "a frozen dataclass: its fields are walked"
    if isinstance(value, (type, types.ModuleType)):
        return "a class (an nvscope class's attributes are walked) or a module (walked on its own)"
    if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return "code: an nvscope function's defaults and closure, a bound method's object are walked"
    if isinstance(value, (property, staticmethod, classmethod, functools.cached_property, types.MemberDescriptorType,
                          types.GetSetDescriptorType, types.MethodDescriptorType, types.WrapperDescriptorType,
                          FIELD)):
        return "a descriptor of a class (a NamedTuple's field too): what it reads lives on the instances"
    if isinstance(value, (enum.Enum, re.Pattern)):
        return "an enum member or a compiled pattern: immutable"
    if isinstance(value, logging.Logger):
        return "a logger: logging's, configured by the application, not by nvscope"
    if type(value) is object:
        return "a sentinel, compared by identity"
    if type(value).__module__ == "typing" or isinstance(value, (types.GenericAlias, types.UnionType)):
        return "a typing construct (an alias such as ``tuple[str, int]``, a TypeVar), for annotations"
    if isinstance(value, FEATURE):
        return "``from __future__ import annotations`` binds one"
    if ours(type(value)) and not callable(getattr(value, "cache_clear", None)):
        return "an nvscope object: its attributes are walked"
    # Not here, so state: a ContextVar (its values belong to the contexts that set them, so it is kept, with who
    # resets them, never cleared), a lock, Condition, Event, Queue, SimpleNamespace, any container, an lru_cache.
    return None


# Class attributes that the standard library writes when it makes the class and never after.
MACHINERY = re.compile(r"__\w+__|_\w+_|_abc_impl|_field_defaults")


def inside(value: object) -> Iterator[tuple[str, object]]:
    """(suffix of the path, value) for what `why_not_state` lets through and may hold state in turn."""
    if isinstance(value, tuple):
        yield from ((f"[{index}]", item) for index, item in enumerate(value))
    elif isinstance(value, frozenset):
        yield from (("[...]", item) for item in value)
    elif isinstance(value, types.MappingProxyType):
        yield from ((f"[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, types.FunctionType):
        if ours(value):
            cells = [cell.cell_contents for cell in value.__closure__ or () if cell.cell_contents is not value]
            yield from (("", held) for held in [*(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values(),
                                                 *cells])
    elif isinstance(value, (types.MethodType, types.BuiltinFunctionType)):
        yield "", value.__self__  # `_get = _cache.get` holds `_cache`
    elif isinstance(value, type):
        if ours(value):
            yield from ((f".{name}", item) for name, item in vars(value).items() if not MACHINERY.fullmatch(name))
    elif dataclasses.is_dataclass(value) or ours(type(value)):
        attributes = dict(getattr(value, "__dict__", {}))
        for klass in type(value).__mro__:
            for slot in vars(klass).get("__slots__", ()):
                if not slot.startswith("__") and hasattr(value, slot):
                    attributes[slot] = getattr(value, slot)
        yield from ((f".{name}", item) for name, item in attributes.items())


def state_under(path: str, value: object, walking: tuple[int, ...] = ()) -> Iterator[tuple[str, object]]:
    """(path, holder) for each piece of state reachable from ``value`` at ``path``: the value itself if it is
    state, else what it holds that is."""
    if id(value) in walking:  # a cycle (a class whose attribute is an instance of itself)
        return
    if why_not_state(value) is None:
        yield path, value
        return
    for suffix, item in inside(value):
        yield from state_under(path + suffix, item, (*walking, id(value)))


def rebound(module: types.ModuleType) -> Iterator[str]:
    """The globals of ``module`` that its functions rebind (``global name``)."""
    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Global):
            yield from node.names


def holders(of: Iterable[types.ModuleType]) -> dict[object, tuple[object | None, list[str]]]:
    """id -> (holder, every path to it): a holder re-exported by another module is one holder. A global rebound with
    ``global`` is a holder of its own, whatever it holds now (an int, None, an empty tuple)."""
    found: dict[object, tuple[object | None, list[str]]] = {}  # by id, or by path for a rebound global
    for module in of:
        for name, value in vars(module).items():
            if not name.startswith("__"):
                for path, held in state_under(f"{module.__name__}.{name}", value):
                    found.setdefault(id(held), (held, []))[1].append(path)
        for name in rebound(module):
            path = f"{module.__name__}.{name}"
            found.setdefault(path, (None, []))[1].append(path)
    return found


def covered(path: str, known: dict[str, str]) -> bool:
    """Whether ``path`` or a holder that contains it (``_frames.ROOT`` for ``_frames.ROOT.children``) is known."""
    return any(path[:end] in known for end in [*(m.start() for m in re.finditer(r"[.\[]", path)), len(path)])


def unaccounted(of: Iterable[types.ModuleType]) -> list[str]:
    """A path to each holder of ``of`` that is neither registered nor kept."""
    known = {**_state.registered(), **_state.kept()}
    return sorted(min(paths, key=lambda path: (len(path), path))
                  for _, paths in holders(of).values() if not any(covered(path, known) for path in paths))


def test_every_module_imports_on_the_cpu() -> None:
    found, skipped = modules()
    assert not skipped, f"modules skipped (an optional framework is missing): {skipped}"
    assert found[0] is nvscope and "nvscope._core._state" in {module.__name__ for module in found}


def test_every_module_level_holder_is_registered_or_kept_with_a_reason() -> None:
    missing = unaccounted(modules()[0])
    assert not missing, (
        "module-level state that nvscope.uninstall() neither clears nor keeps: "
        f"{', '.join(missing)}. Register how to clear it (nvscope._core._state.register, beside it), keep it with "
        "its reason (keep), or make a constant table immutable (MappingProxyType, tuple, frozenset)")
    assert all(reason.strip() for reason in _state.kept().values())


def test_what_is_registered_or_kept_exists() -> None:
    """A holder renamed or removed takes its registration line with it."""
    modules()
    stale = []
    for name in {**_state.registered(), **_state.kept()}:
        try:
            pkgutil.resolve_name(name)
        except (ImportError, AttributeError):
            stale.append(name)
    assert not stale, f"registered or kept, but no such global or attribute: {stale}"


def test_locks_and_context_variables_are_kept_not_cleared() -> None:
    """A lock is not state to clear; a ContextVar belongs to the contexts that set it (each resets its own)."""
    cleared = _state.registered()
    for value, paths in holders(modules()[0]).values():
        if isinstance(value, (*LOCKS, contextvars.ContextVar)):
            assert not any(covered(path, cleared) for path in paths), paths


def test_salts_outlive_uninstall() -> None:
    """nvFuser's process-wide FusionCache keeps the kernels of each salted definition: a salt handed out again after
    uninstall would run kernels compiled under another option set."""
    from nvscope._exec._legacy import LEGACY

    first, second = nvscope.OptionSet(["fuse_matmul"]), nvscope.OptionSet([], ["kernel_reuse"])
    salts = LEGACY.salt_for(first), LEGACY.salt_for(second)
    nvscope.uninstall()
    assert (LEGACY.salt_for(second), LEGACY.salt_for(first)) == salts[::-1]
    assert LEGACY.salt_for(nvscope.OptionSet(["kernel_profile"])) not in salts


# Each kind of module-level state, as a throwaway module binds it, and the path the inventory names it by.
KINDS = {
    "dict": ("_held = {}", "_held"),
    "list annotated": ("_held: list[int] = []", "_held"),
    "dict annotated read-only": ("_held: Mapping[str, int] = {}", "_held"),
    "list annotated read-only": ("_held: Sequence[int] = []", "_held"),
    "read-only table of lists": ("_held = MappingProxyType({'a': (), 'b': []})", "_held['b']"),
    "tuple of tuples of a set": ("_held = ((), (1, set()))", "_held[1][1]"),
    "frozenset of an object with a dict": (
        "class _C:\n    def __init__(self):\n        self.memo = {}\n_held = frozenset({_C()})", "_held[...].memo"),
    "lock": ("_held = threading.Lock()", "_held"),
    "condition": ("_held = threading.Condition()", "_held"),
    "event": ("_held = threading.Event()", "_held"),
    "semaphore": ("_held = threading.Semaphore()", "_held"),
    "queue": ("_held = queue.Queue()", "_held"),
    "namespace": ("_held = types.SimpleNamespace(memo={})", "_held"),
    "deque": ("_held = collections.deque()", "_held"),
    "weak dictionary": ("_held = weakref.WeakValueDictionary()", "_held"),
    "counter": ("_held = itertools.count()", "_held"),
    "context variable": ("_held = contextvars.ContextVar('held')", "_held"),
    "thread-local": ("_held = threading.local()", "_held"),
    "lru_cache": ("@functools.lru_cache\ndef _held(x):\n    return x", "_held"),
    "bound method of a dict": ("_held = {}.setdefault", "_held"),
    "global rebound": ("_held = 0\ndef bump():\n    global _held\n    _held += 1", "_held"),
    "global rebound, annotated read-only": (
        "_held: Sequence[str] = ()\ndef scan(paths):\n    global _held\n    _held = paths", "_held"),
    "class attribute": ("class _Held:\n    memo: dict[str, int] = {}", "_Held.memo"),
    "instance attribute": ("class _C:\n    def __init__(self):\n        self.memo = {}\n_held = _C()", "_held.memo"),
    "instance attribute set later": ("class _C:\n    pass\n_held = _C()\n_held.memo = []", "_held.memo"),
    "slot": ("class _C:\n    __slots__ = ('memo',)\n    def __init__(self):\n        self.memo = set()\n_held = _C()",
             "_held.memo"),
    "frozen dataclass holding a list": (
        "@dataclasses.dataclass(frozen=True)\nclass _C:\n    memo: list[int]\n_held = _C([])", "_held.memo"),
    "mutable default": ("def _held(key, memo={}):\n    return memo.setdefault(key, key)", "_held"),
    "method's mutable default": ("class _Held:\n    def get(self, memo=[]):\n        return memo", "_Held.get"),
    "closure": ("def _make():\n    memo = {}\n    return lambda key: memo.setdefault(key, key)\n_held = _make()",
                "_held"),
}

# What is not state: a module binding only these passes with nothing registered or kept.
CONSTANTS = """\
_NUMBER, _TEXT, _NOTHING, _SPAN = 3.5, "text", None, range(3)
_NESTED = (1, ("a", b"b"), frozenset({2, (3,)}))
_TABLE = MappingProxyType({"a": (1, 2), "b": MappingProxyType({"c": frozenset()})})
_PATTERN = re.compile("x")
_LOG = logging.getLogger("nvscope.probe")
_MISSING = object()
_LIMIT = 3  # read by functions, never rebound
class _Kind(enum.Enum):
    A = 1
@dataclasses.dataclass(frozen=True)
class _Point:
    x: int
    tags: tuple[str, ...] = ()
_ORIGIN = _Point(0, ("origin",))
class _Table:
    __slots__ = ("rows",)
    LIMIT = 3
    def __init__(self):
        self.rows = (1, 2)
    def limit(self, default=(), *, other=None):
        return _LIMIT
    @property
    def size(self):
        return len(self.rows)
_ROWS = _Table()
def _with_defaults(x, y=(), *, z=_Kind.A):
    return x
def _make():
    bound = 3
    return lambda: bound + _LIMIT
_CLOSED = _make()
"""

HEADER = """\
import collections, contextvars, dataclasses, enum, functools, itertools, logging, queue, re, threading, types, weakref
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from nvscope._core import _state
"""


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """``load(source)``: a module of that source, imported as a submodule of nvscope (so its classes count as
    nvscope's); its registrations are forgotten afterwards."""
    loaded: list[str] = []

    def load(source: str) -> types.ModuleType:
        name = f"nvscope._throwaway_{len(loaded)}"
        path = tmp_path / f"{name.rpartition('.')[2]}.py"
        path.write_text(HEADER + source + "\n", encoding="utf-8")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)  # dataclasses looks its module up
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield types.SimpleNamespace(load=load, prefix="nvscope._throwaway_")
    _forget_test_registrations("nvscope._throwaway_")


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_inventory_finds_each_kind_of_state(kind: str, throwaway: types.SimpleNamespace) -> None:
    source, path = KINDS[kind]
    module = throwaway.load(source)
    assert unaccounted([module]) == [f"{module.__name__}.{path}"]
    holder = re.split(r"[.\[]", path)[0]
    kept = throwaway.load(f"{source}\n_state.keep(__name__, {holder!r}, 'held for the test')")
    assert unaccounted([kept]) == []


def test_constants_are_not_state(throwaway: types.SimpleNamespace) -> None:
    assert unaccounted([throwaway.load(CONSTANTS)]) == []


def test_reset_runs_each_clear_once_in_its_step() -> None:
    calls: list[str] = []
    for step in reversed(_state.STEPS):  # registered in the reverse of the order they must run in
        _state.register("tests.core.test_state", f"held_{step} also_{step}", functools.partial(calls.append, step),
                        step=step)
    try:
        _state.reset()  # all of nvscope's too: what nvscope.uninstall() does
        assert calls == list(_state.STEPS)  # once per registration, however many names it clears
        calls.clear()
        _state.reset("ids", "shared")
        assert calls == ["shared", "ids"]
        with pytest.raises(ValueError, match="one of adapters, patches"):
            _state.reset("everything")  # type: ignore[arg-type]
    finally:
        _forget_test_registrations()


def test_a_clear_that_raises_leaves_the_others_to_run() -> None:
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("broken clear")

    _state.register("tests.core.test_state", "a_broken", broken, step="tables")
    _state.register("tests.core.test_state", "b_fine", lambda: calls.append("fine"), step="tables")
    try:
        with pytest.raises(RuntimeError, match="broken clear"):
            _state.reset("tables")
        assert calls == ["fine"]
    finally:
        _forget_test_registrations()


def _forget_test_registrations(prefix: str = "tests.") -> None:
    registry = _state.REGISTRY
    tables: list[dict[str, Any]] = [registry._cleared, registry._kept, *registry._clears.values()]
    for table in tables:
        for name in [n for n in table if n.startswith(prefix)]:
            del table[name]
