"""The `Adapter` interface: what one adapter (Thunder's fusion wrapper, a direct nvFuser frontend) tells the one
execution path (`nvscope._exec._execute`) about its fusions, and nothing else.

An interface only, as httpx's ``_transports/base.py`` is: it imports nothing but ``typing`` at run time, so that any
module may name it. Generic over ``F``, the type of the adapter's fusions (Thunder's ``FusionDefinitionWrapper``, a
frontend's ``FusionDefinition``).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvscope._core import FusionInfo, OptionSet, UnsupportedError
    from nvscope._exec._direct import Frontend
    from nvscope._exec._fusion_table import FusionTable, Partition

__all__ = ["Adapter", "F"]

F = TypeVar("F")


class Adapter(Generic[F]):
    """What one adapter supplies to the execution path. Subclasses set ``frontend`` and ``table_of`` and override
    every method that raises here."""

    given_as = "compile-time"  # where a fusion's own options come from, for failure notes
    describe = "fusion"  # what kind of fusion, for failure notes: "Thunder fusion forward/nvFusion0 failed ..."
    frontend: Frontend  # the nvFuser frontend the fusions run on
    version_error: UnsupportedError | None = None  # set at install: raised when a scope reaches a fusion
    # The fusion's table; AttributeError when it has none yet. Read at every scoped call, so a C-level getter
    # (``operator.attrgetter``): a Python function here would cost the call that the execution path's lane saves.
    table_of: Callable[[F], FusionTable[Partition]]

    def lookup(self, fusion: F) -> FusionTable[Partition] | None:
        """The fusion's table, or None if nvscope has not seen it scoped or audited."""
        try:
            return self.table_of(fusion)
        except AttributeError:
            return None

    def attach(self, fusion: F, table: FusionTable[Partition]) -> None:
        """Keep ``table`` with ``fusion`` (where `table_of` finds it), and note it for uninstall."""
        raise NotImplementedError

    def identify(self, fusion: F, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FusionInfo:
        raise NotImplementedError

    def own_options(self, fusion: F, kwargs: dict[str, Any]) -> OptionSet:
        """The options the fusion runs with before any scope: Thunder's compile-time ones, or those a direct caller
        passed to ``execute`` (in ``kwargs``)."""
        raise NotImplementedError

    def build(self, fusion: F, info: FusionInfo, options: OptionSet) -> Partition:
        """A partition of ``fusion`` for ``options``, with its ``run(args, kwargs)`` bound to the fusion."""
        raise NotImplementedError

    def default(self, fusion: F, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The fusion's own call, without nvscope."""
        raise NotImplementedError

    def repro_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The inputs of a call as nvFuser's ``repro_script_for`` takes them (the repro script of a partition that
        failed: `nvscope._exec._execute`)."""
        raise NotImplementedError

    def definition(self, partition: Partition, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The FusionDefinition ``partition`` runs for these inputs (audit and failures only, never per call)."""
        return partition.runner

    def own_partition(self, fusion: F, own_options: OptionSet) -> Partition:
        """The fusion's own call (`default`) as a partition: no definition of its own, nothing compiled anew."""
        from nvscope._exec._fusion_table import Partition

        default = self.default
        return Partition(fusion, own_options, lambda args, kwargs: default(fusion, args, kwargs))

    def escape(self, fusion: F, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Callable[[], Any]]:
        """For ``on_error="torch"``: the key of these inputs (calls with an equal key take the same route) and a
        builder of the fusion's PyTorch callable (`region`). Raises `EscapeRefused` (its message says why, in a few
        words) where these inputs cannot run in PyTorch."""
        return None, lambda: self.region(fusion)

    def region(self, fusion: F) -> Callable[..., Any]:
        """The fusion's PyTorch callable (its region, run eagerly), or `EscapeRefused` saying why it has none."""
        from nvscope._exec._fusion_table import EscapeRefused

        raise EscapeRefused("a direct nvFuser FusionDefinition has no Thunder region to run in PyTorch")
