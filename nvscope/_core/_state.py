"""The state nvscope keeps between calls, registered where it is held: what `nvscope.uninstall()` clears, in which
order, and what outlives it and why.

A module registers its globals beside them (`register`, with the step that clears them, or `keep`, with why they
outlive it); tests/core/test_state.py fails on module-level state that is neither."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal

    Step = Literal["adapters", "patches", "tables", "shared", "ids", "caches"]

__all__ = ["REGISTRY", "STEPS", "Registry", "keep", "kept", "register", "registered", "reset"]

STEPS: tuple[Step, ...] = ("adapters", "patches", "tables", "shared", "ids", "caches")

class Registry:
    """What each registered global is cleared at (or why it is kept), and the clears by step."""

    def __init__(self) -> None:
        self._cleared: dict[str, str] = {}
        self._kept: dict[str, str] = {}
        self._clears: dict[str, dict[str, Callable[[], object]]] = {step: {} for step in STEPS}

    def register(self, module: str, names: str, clear: Callable[[], object], *, step: Step) -> None:
        """``clear()`` empties the globals ``names`` (blank-separated; ``EMPTY._unions`` for an attribute) of
        ``module`` at ``step``; registering them again replaces the clear."""
        qualified = [f"{module}.{name}" for name in names.split()]
        for name in qualified:
            self._cleared[name] = step
            self._kept.pop(name, None)
        self._clears[step][qualified[0]] = clear

    def keep(self, module: str, names: str, reason: str) -> None:
        """The globals ``names`` (blank-separated) of ``module`` outlive `reset`, for ``reason``."""
        for name in names.split():
            self._kept[f"{module}.{name}"] = reason

    def reset(self, *steps: Step) -> None:
        """Run the clears of ``steps`` (default: all) in `STEPS` order; all run, the first error is raised at the
        end."""
        unknown = [step for step in steps if step not in self._clears]
        if unknown:
            raise ValueError(f"unknown step {unknown[0]!r}: one of {', '.join(STEPS)}")
        error: Exception | None = None
        for step in STEPS:
            if steps and step not in steps:
                continue
            for _, clear in sorted(self._clears[step].items(), key=lambda item: item[0]):
                try:
                    clear()
                except Exception as raised:  # uninstall must not stop halfway: the rest is still cleared
                    error = error or raised
        if error is not None:
            raise error

    def registered(self) -> dict[str, str]:
        """``{"<module>.<name>": step}`` for every registered global."""
        return dict(self._cleared)

    def kept(self) -> dict[str, str]:
        """``{"<module>.<name>": reason}`` for every global kept across `reset`."""
        return dict(self._kept)


REGISTRY = Registry()
register, keep, reset = REGISTRY.register, REGISTRY.keep, REGISTRY.reset
registered, kept = REGISTRY.registered, REGISTRY.kept
keep(__name__, "REGISTRY", "the registry itself: filled as modules are imported")
