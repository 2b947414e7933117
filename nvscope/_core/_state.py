"""The state nvscope keeps between calls, registered where it is held: what `nvscope.uninstall()` clears, in which
order, and what outlives it and why.

A module registers its globals beside them: ``register(__name__, "_entries", clear, step="shared")`` or
``keep(__name__, "_salts", "why")``. `reset` runs each clear once, in `STEPS` order. tests/core/test_state.py fails
on module-level state that is neither registered nor kept.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal

    Step = Literal["adapters", "patches", "tables", "shared", "ids", "caches"]

__all__ = ["STEPS", "keep", "kept", "register", "registered", "reset"]

STEPS: tuple[Step, ...] = ("adapters", "patches", "tables", "shared", "ids", "caches")

_cleared: dict[str, str] = {}
_kept: dict[str, str] = {}
_clears: dict[str, dict[str, Callable[[], object]]] = {step: {} for step in STEPS}


def register(module: str, names: str, clear: Callable[[], object], *, step: Step) -> None:
    """``clear()`` empties the globals ``names`` (blank-separated; ``EMPTY._unions`` for an attribute) of ``module``
    at ``step``; registering them again replaces the clear."""
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
    """The globals ``names`` (blank-separated) of ``module`` outlive `reset`, for ``reason``."""
    if not reason.strip():
        raise ValueError("keep() needs the reason why it outlives nvscope.uninstall()")
    for name in names.split():
        _kept[f"{module}.{name}"] = reason


def reset(*steps: Step) -> None:
    """Run the clears of ``steps`` (default: all) in `STEPS` order; all run, the first error is raised at the end."""
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
