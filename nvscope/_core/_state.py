"""The state nvscope keeps between calls, each piece registered where it is held: what `nvscope.uninstall()` clears,
in which order, and what outlives it and why.

A module that holds something at module level (a cache, a table, a counter) says so beside it, in one line:
``register(__name__, "_entries _failures", clear, step="shared")`` (``clear`` empties those names), or
``keep(__name__, "_salts", "why it must outlive uninstall")``. `reset` runs every registered clear once, step by step
in `STEPS` order (within a step, by the first name it clears: clears within a step do not depend on each other):

1. ``adapters``: each adapter undoes its patches and drops the fusion tables it holds;
2. ``patches``: the patch ledger: whatever an adapter left (the legacy frontend's hooks and users too), and the
   adapters the user declined;
3. ``tables``: fusion tables held apart from an adapter (partitions, their compiled kernels and failures);
4. ``shared``: the shared compiled definitions and their failures (`nvscope._exec._shared`);
5. ``ids``: fusion id numbering (`nvscope._core._fusion`; a fusion seen before keeps its id, stored on it);
6. ``caches``: memos that are rebuilt on demand.

A name may be an attribute of a global (``"EMPTY._unions"``: the memo of a module-level object). Registering or
keeping a global covers what it holds.

``tests/core/test_state.py`` imports the package and every module in it and fails on module-level state that is
neither registered nor kept: whatever is not immutable at run time (a dict, list, set, lock, Condition, Queue,
ContextVar, ``lru_cache``, namespace...), also inside a tuple or ``MappingProxyType``, on an nvscope object or class,
in an nvscope function's defaults or closure; and every name a ``global`` statement rebinds. A constant table is a
``MappingProxyType``, tuple or frozenset: a read-only annotation alone does not make it one.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal

    Step = Literal["adapters", "patches", "tables", "shared", "ids", "caches"]

__all__ = ["STEPS", "keep", "kept", "register", "registered", "reset"]

STEPS: tuple[Step, ...] = ("adapters", "patches", "tables", "shared", "ids", "caches")

# "<module>.<name>" -> the step that clears it, or why it is kept; and per step, (first name, clear) once per register.
_cleared: dict[str, str] = {}
_kept: dict[str, str] = {}
_clears: dict[str, dict[str, Callable[[], object]]] = {step: {} for step in STEPS}


def register(module: str, names: str, clear: Callable[[], object], *, step: Step) -> None:
    """``clear()`` empties the globals ``names`` (separated by blanks; or attributes of one, ``EMPTY._unions``) of
    ``module`` at ``step`` of `reset`.

    Registering the same names again (a module imported anew) replaces the clear."""
    if step not in _clears:
        raise ValueError(f"step={step!r}: one of {', '.join(STEPS)}")
    qualified = [f"{module}.{name}" for name in names.split()]
    if not qualified:
        raise ValueError("register() needs the names of what clear() empties")
    for name in qualified:
        _cleared[name] = step
        _kept.pop(name, None)
    _clears[step][qualified[0]] = clear


def keep(module: str, names: str, reason: str) -> None:
    """The globals ``names`` (separated by blanks) of ``module`` outlive `reset`, for ``reason`` (a lock, a constant
    that must not be handed out again, the state of something in progress that ends it itself)."""
    if not reason.strip():
        raise ValueError("keep() needs the reason why it outlives nvscope.uninstall()")
    for name in names.split():
        _kept[f"{module}.{name}"] = reason


def reset(*steps: Step) -> None:
    """Run the registered clears of ``steps`` (default: all), each once, in `STEPS` order.

    Every clear runs even if one before it raised; the first error is raised at the end."""
    unknown = [step for step in steps if step not in _clears]
    if unknown:
        raise ValueError(f"unknown step {unknown[0]!r}: one of {', '.join(STEPS)}")
    error: Exception | None = None
    for step in STEPS:
        if steps and step not in steps:
            continue
        for _, clear in sorted(_clears[step].items(), key=lambda item: item[0]):
            try:
                clear()
            except Exception as raised:  # uninstall must not stop halfway: the rest is still cleared
                error = error or raised
    if error is not None:
        raise error


def registered() -> dict[str, str]:
    """``{"<module>.<name>": step}`` for every registered global."""
    return dict(_cleared)


def kept() -> dict[str, str]:
    """``{"<module>.<name>": reason}`` for every global kept across `reset`."""
    return dict(_kept)


keep(__name__, "_cleared _kept _clears", "the registry itself: filled as modules are imported")
