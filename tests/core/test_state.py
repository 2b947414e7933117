"""Every piece of module-level state in nvscope is registered with `nvscope._core._state` (what `nvscope.uninstall()`
clears, and in which step) or kept across it with a reason.

The inventory imports every nvscope module and walks its globals: a dict, list, set, deque, weak collection,
counter, lock, thread-local, ContextVar or ``lru_cache`` that is neither registered nor kept fails it, by name. A
constant table is not state: its annotation says it is read-only (``Mapping``, ``Sequence``, ``AbstractSet``), and
mypy keeps the package from writing to it. On the CPU every module imports (none needs torch, Thunder or nvFuser at
import); one that did would be skipped only for a missing torch/thunder/nvfuser, and named in the skip.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import importlib
import itertools
import pkgutil
import re
import threading
import types
import weakref

import pytest

import nvscope
from nvscope._core import _state

# A module that runs something when imported: the command line (`python -m nvscope`).
NOT_IMPORTED = frozenset({"nvscope.__main__"})
HEAVY = ("torch", "thunder", "nvfuser", "nvfuser_direct")

MUTABLE: tuple[type, ...] = (
    dict, list, set, bytearray, collections.deque, weakref.WeakKeyDictionary, weakref.WeakValueDictionary,
    weakref.WeakSet, itertools.count, contextvars.ContextVar, threading.local, type(threading.Lock()),
    type(threading.RLock()),
)
READ_ONLY = re.compile(r"(Final\[)?(Mapping|Sequence|AbstractSet|frozenset|tuple)\b")


def modules() -> tuple[list[types.ModuleType], list[str]]:
    """Every nvscope module, imported; and those skipped because an optional framework is missing."""
    found, skipped = [], []
    for info in pkgutil.walk_packages(nvscope.__path__, "nvscope."):
        if info.name in NOT_IMPORTED:
            continue
        try:
            found.append(importlib.import_module(info.name))
        except ImportError as error:
            if (error.name or "").partition(".")[0] not in HEAVY:
                raise
            skipped.append(f"{info.name} ({error.name} missing)")
    return found, skipped


def stateful(value: object) -> bool:
    return isinstance(value, MUTABLE) or callable(getattr(value, "cache_clear", None))


def holders() -> dict[int, tuple[object, list[str]]]:
    """id -> (object, every "<module>.<name>" bound to it): a holder re-exported by another module is one holder."""
    found: dict[int, tuple[object, list[str]]] = {}
    constants: set[int] = set()
    for module in modules()[0]:
        annotations = vars(module).get("__annotations__", {})
        for name, value in vars(module).items():
            if name.startswith("__") or isinstance(value, (types.ModuleType, type)) or not stateful(value):
                continue
            if isinstance(annotations.get(name), str) and READ_ONLY.match(annotations[name]):
                constants.add(id(value))  # a constant table, read-only to mypy (where it is defined)
            found.setdefault(id(value), (value, []))[1].append(f"{module.__name__}.{name}")
    return {key: holder for key, holder in found.items() if key not in constants}


def test_every_module_imports_on_the_cpu() -> None:
    skipped = modules()[1]
    assert not skipped, f"modules skipped (an optional framework is missing): {skipped}"


def test_every_module_level_holder_is_registered_or_kept_with_a_reason() -> None:
    known = {**_state.registered(), **_state.kept()}
    missing = sorted(names[0] for _, names in holders().values() if not any(name in known for name in names))
    assert not missing, (
        "module-level state that nvscope.uninstall() neither clears nor keeps: "
        f"{', '.join(missing)}. Register how to clear it (nvscope._core._state.register, beside it), keep it with "
        "its reason (keep), or annotate a constant table read-only (Mapping, Sequence, AbstractSet)")
    assert all(reason.strip() for reason in _state.kept().values())


def test_what_is_registered_or_kept_exists() -> None:
    """A holder renamed or removed takes its registration line with it."""
    modules()
    stale = [name for name in {**_state.registered(), **_state.kept()}
             if not hasattr(importlib.import_module(name.rpartition(".")[0]), name.rpartition(".")[2])]
    assert not stale, f"registered or kept, but no such global: {stale}"


def test_locks_and_context_variables_are_kept_not_cleared() -> None:
    """A lock is not state to clear; a ContextVar belongs to the contexts that set it (each resets its own)."""
    cleared = _state.registered()
    for value, names in holders().values():
        if isinstance(value, (type(threading.Lock()), type(threading.RLock()), contextvars.ContextVar)):
            assert not any(name in cleared for name in names), names


def test_salts_outlive_uninstall() -> None:
    """nvFuser's process-wide FusionCache keeps the kernels of each salted definition: a salt handed out again after
    uninstall would run kernels compiled under another option set."""
    from nvscope._exec._legacy import salt_for

    first, second = nvscope.OptionSet(["fuse_matmul"]), nvscope.OptionSet([], ["kernel_reuse"])
    salts = salt_for(first), salt_for(second)
    nvscope.uninstall()
    assert (salt_for(second), salt_for(first)) == salts[::-1]
    assert salt_for(nvscope.OptionSet(["kernel_profile"])) not in salts


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


def _forget_test_registrations() -> None:
    for name in [n for n in _state.registered() if n.startswith("tests.")]:
        del _state._cleared[name]
    for clears in _state._clears.values():
        for name in [n for n in clears if n.startswith("tests.")]:
            del clears[name]
