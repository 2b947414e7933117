"""The `Adapter` base, and `INSTALLED`, the registry of the adapters installed now.

An adapter (Thunder's fusion wrapper, one direct nvFuser frontend) installs and uninstalls its patches, holds its
fusions' tables, and tells the execution path what differs between frameworks. ``F`` is the type of its fusions.
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

from nvscope._core import _patches, _state, reidentify

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvscope._core import Frame, FusionInfo, OptionSet, UnsupportedError
    from nvscope._exec._direct import Frontend
    from nvscope._exec._fusion_table import FusionTable, Partition

__all__ = ["INSTALLED", "TABLE_ATTRIBUTE", "Adapter", "F", "FusionCall", "Installed"]

F = TypeVar("F")
TABLE_ATTRIBUTE = "_nvscope_partitions"  # the same for either adapter: each one's uninstall finds the other's
_INFO = "_nvscope_info"  # its FusionInfo; kept by `forget`, so that its id survives a reinstall


class Adapter(Generic[F]):
    """What one adapter supplies to the execution path; subclasses define what is only declared here."""

    given_as = "compile-time"  # for failure notes
    describe = "fusion"
    owner: str  # of its patches, and its frontend's user
    frontend: Frontend
    version_error: UnsupportedError | None = None
    # AttributeError when the fusion has no table yet; a C-level getter, as it is read at every scoped call.
    table_of: Callable[[F], FusionTable[Partition]]
    # What each adapter defines: putting its patches in place; the identity of a fusion nvscope has not seen before;
    # the options it runs with before any scope (Thunder's compile-time ones, or those passed to ``execute`` in
    # ``kwargs``); a partition for ``options``, its ``run(args, kwargs)`` bound to the fusion; the fusion's own call,
    # without nvscope; a call's inputs as nvFuser's ``repro_script_for`` takes them; and the FusionDefinition a
    # partition runs for a call's inputs (audit and failures only).
    install: Callable[[], None]
    new_identity: Callable[[F, tuple[Any, ...]], FusionInfo]
    own_options: Callable[[F, dict[str, Any]], OptionSet]
    build: Callable[[F, FusionInfo, OptionSet], Partition]
    default: Callable[[F, tuple[Any, ...], dict[str, Any]], Any]
    repro_inputs: Callable[[tuple[Any, ...], dict[str, Any]], list[Any]]
    definition: Callable[[Partition, tuple[Any, ...], dict[str, Any]], Any]

    def __init__(self) -> None:
        self._holders: weakref.WeakSet[Any] = weakref.WeakSet()  # every `holder` with a table

    def holder(self, fusion: F) -> Any:
        """The object that keeps the fusion's table and identity."""
        return fusion

    def uninstall(self) -> bool:
        """Undo the patches exactly, `forget`, and release the frontend; returns whether a patch was undone."""
        restored = _patches.restore(self.owner)
        self.forget()
        self.frontend.release(self.owner)
        return restored

    def forget(self) -> None:
        """Drop every fusion's table (its partitions and their compiled kernels)."""
        for holder in list(self._holders):
            vars(holder).pop(TABLE_ATTRIBUTE, None)
        self._holders.clear()

    def lookup(self, fusion: F) -> FusionTable[Partition] | None:
        """The fusion's table, or None."""
        try:
            return self.table_of(fusion)
        except AttributeError:
            return None

    def attach(self, fusion: F, table: FusionTable[Partition]) -> None:
        """Keep ``table`` with ``fusion``, and note it for uninstall."""
        holder = self.holder(fusion)
        vars(holder)[TABLE_ATTRIBUTE] = table
        try:
            self._holders.add(holder)
        except TypeError:  # pragma: no cover - keeps its table after uninstall
            pass

    def identify(self, fusion: F, args: tuple[Any, ...]) -> FusionInfo:
        """The fusion's identity, kept with it: seen again after ``nvscope.uninstall()``, the same id."""
        holder = self.holder(fusion)
        known = vars(holder).get(_INFO)
        if known is not None:
            return reidentify(known)
        info = self.new_identity(fusion, args)
        try:
            vars(holder)[_INFO] = info
        except (AttributeError, TypeError):  # pragma: no cover
            pass
        return info

    def own_partition(self, fusion: F, own_options: OptionSet) -> Partition:
        """The fusion's own call (`default`) as a partition."""
        from nvscope._exec._fusion_table import Partition

        default = self.default
        return Partition(fusion, own_options, lambda args, kwargs: default(fusion, args, kwargs))

    def escape(self, fusion: F, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Callable[[], Any]]:
        """For ``on_error="torch"``: the key of these inputs (calls with an equal key take the same route) and a
        builder of the fusion's PyTorch callable (`region`). Raises `EscapeRefused` (its message says why, in a few
        words) where these inputs cannot run in PyTorch."""
        return None, lambda: self.region(fusion)

    def region(self, fusion: F) -> Callable[..., Any]:
        """The fusion's PyTorch callable, or `EscapeRefused` saying why it has none."""
        from nvscope._exec._fusion_table import EscapeRefused

        raise EscapeRefused("a direct nvFuser FusionDefinition has no Thunder region to run in PyTorch")


class FusionCall:
    """One fusion call on the execution path, as a failure, a fallback or an escape needs it."""

    __slots__ = ("adapter", "args", "frame", "fusion", "info", "kwargs", "own_options", "partition", "table")

    def __init__(self, adapter: Adapter[Any], table: FusionTable[Partition], fusion: Any, frame: Frame | None,
                 partition: Partition, own_options: OptionSet, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.adapter, self.table, self.fusion, self.frame = adapter, table, fusion, frame
        self.partition, self.own_options, self.args, self.kwargs = partition, own_options, args, kwargs
        self.info: FusionInfo = table.info

    def definition(self) -> Any:
        """The FusionDefinition the partition runs for these inputs (`Adapter.definition`)."""
        return self.adapter.definition(self.partition, self.args, self.kwargs)


class Installed:
    """The installed adapters by owner (``"thunder"``, a frontend module's name), the watches on nvFuser's execute,
    and what automatic installation has looked at."""

    def __init__(self) -> None:
        self._adapters: dict[str, Adapter[Any]] = {}
        self.watches: list[Callable[[Any], Any]] = []
        self.seen_modules = -1
        self.program_errors: list[BaseException] = []

    def add(self, owner: str, adapter: Adapter[Any]) -> None:
        adapter.install()
        self._adapters[owner] = adapter

    def get(self, owner: str) -> Adapter[Any] | None:
        return self._adapters.get(owner)

    def remove(self, owner: str) -> bool:
        """Uninstall ``owner``'s adapter, if installed; returns whether a patch was undone."""
        adapter = self._adapters.pop(owner, None)
        return adapter is not None and adapter.uninstall()

    def clear(self) -> None:
        """Uninstall every adapter; the next scope looks at ``sys.modules`` again."""
        self.seen_modules = -1
        for owner in list(self._adapters):
            self.remove(owner)

INSTALLED = Installed()
_state.register(__name__, "INSTALLED._adapters", INSTALLED.clear, step="adapters")
_state.keep(__name__, "INSTALLED.watches", "each watch removes its own (`nvscope._exec._nvfuser.watch_execute`)")
_state.keep(__name__, "INSTALLED.program_errors", "the program-wide install's errors, for the life of the process")
