"""``on_error="torch"``: the region of a fusion nvFuser failed runs in PyTorch, and so do later calls with equal
inputs under the same options (docs/escape.md). What cannot escape gets one note on nvFuser's error saying why.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from nvscope._core import EscapeWarning
from nvscope._exec import _repro
from nvscope._exec._adapter import FusionCall
from nvscope._exec._fusion_table import EscapeRefused, FusionTable, Partition

__all__ = ["region_for", "route", "unusable", "warn"]

# Errors that leave the CUDA context unusable: no PyTorch run can help.
FATAL = ("out of memory", "illegal memory access", "illegal instruction", "unspecified launch failure",
         "device-side assert", "misaligned address", "an illegal", "cuda error: launch failed")


def route(call: FusionCall) -> Callable[..., Any] | None:
    """The PyTorch callable the call's inputs take under its partition's options, if nvFuser failed them before."""
    try:
        key = call.adapter.escape(call.fusion, call.args, call.kwargs)[0]
    except Exception:
        return None
    return call.table.routes.get((call.partition.options, key))


def region_for(error: Exception, call: FusionCall) -> tuple[Callable[..., Any], bool]:
    """The fusion's PyTorch callable, routed for these inputs and options from now on, and whether it is its first
    route; or ``error`` raised again with a note saying why it cannot run in PyTorch."""
    info, table = call.info, call.table
    text = f"{type(error).__name__}: {error}".lower()
    why = None
    key: Any = None
    region = table.region
    if type(error).__name__ == "OutOfMemoryError" or any(word in text for word in FATAL):
        why = "CUDA out of memory or a CUDA error that leaves the context unusable"
    elif table.region_failed is not None:
        why = table.region_failed
    else:
        try:
            key, make_region = call.adapter.escape(call.fusion, call.args, call.kwargs)
            if region is None:
                region = table.region = make_region()
        except EscapeRefused as refused:
            why = str(refused)
        except Exception as problem:
            why = ("Thunder's PyTorch executor cannot run its region "
                   f"({type(problem).__name__}: {_repro.error_line(problem)})")
    if why is not None or region is None:
        _repro.add_note(error, f"nvscope: on_error='torch' could not run {info.id} in PyTorch: {why}")
        raise error
    return region, table.add_route(call.partition.options, key, region)


def warn(error: Exception, table: FusionTable[Partition], partition: Partition, stacklevel: int) -> None:
    """The fusion's one `EscapeWarning`."""
    paths = _repro.repro_paths(error)
    warnings.warn(f"nvscope: fusion {table.info.id} failed in nvFuser with options "
                  f"{partition.options.label()} and ran in PyTorch (on_error='torch'); later calls with these inputs "
                  f"and options go straight to PyTorch.\n  nvFuser: {_repro.error_line(error)}\n  repro script: "
                  f"{paths[0] if paths else 'none (NVSCOPE_REPRO=0, or it could not be written)'}",
                  EscapeWarning, stacklevel=stacklevel + 1)


def unusable(error: Exception, table: FusionTable[Partition], problem: Exception) -> Exception:
    """nvFuser's ``error``, noted, after the region's first PyTorch run failed: later failures raise at once."""
    why = f"its region does not run in PyTorch ({type(problem).__name__}: {_repro.error_line(problem)})"
    with table.lock:
        table.region_failed = why
        table.routes.clear()
    _repro.add_note(error, f"nvscope: on_error='torch' could not run {table.info.id} in PyTorch: {why}")
    return error
