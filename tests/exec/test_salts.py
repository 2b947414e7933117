"""The legacy-frontend helpers of nvscope's internal ``nvscope._exec._legacy`` (imported inside the tests): salts stay
unique under concurrency, and a definition that cannot be rebuilt is an `UnsupportedError`, never a bare
``StopIteration``.

Why salts matter: the legacy ``nvfuser`` frontend keeps one process-wide FusionCache keyed by the definition, so
each option set's partition is salted with an unused scalar; two option sets with one salt would share one
compiled cache entry, i.e. the kernel reuse nvscope exists to prevent.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest

import nvscope


class SlowHash(nvscope.OptionSet):
    """An option set whose ``__hash__`` runs Python code that lets other threads in, as a dict insertion calls it."""

    __slots__ = ()

    def __hash__(self) -> int:
        time.sleep(0.002)  # releases the GIL: the window in which a second thread can read the same len(_salts)
        return super().__hash__()


def salts_from_threads(options: list[nvscope.OptionSet]) -> list[int]:
    from nvscope._exec._legacy import LEGACY

    barrier = threading.Barrier(len(options))
    salts: list[int] = [0] * len(options)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            barrier.wait()
            salts[index] = LEGACY.salt_for(options[index])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(options))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return salts


@pytest.mark.parametrize("round_", range(5))
def test_distinct_option_sets_get_distinct_salts_under_concurrency(round_: int) -> None:
    options: list[nvscope.OptionSet] = [SlowHash(enable=[f"salt_test_{round_}_{i}"]) for i in range(8)]
    salts = salts_from_threads(options)
    assert len(set(salts)) == len(options), salts  # no two option sets share a cache entry
    assert salts_from_threads(options) == salts  # and each keeps its salt: process-stable


def test_one_option_set_gets_one_salt_from_every_thread() -> None:
    shared = SlowHash(disable=["salt_test_shared"])
    salts = salts_from_threads([shared] * 8)
    assert len(set(salts)) == 1
    from nvscope._exec._legacy import LEGACY

    assert LEGACY.salt_for(nvscope.OptionSet(disable=["salt_test_shared"])) == salts[0]  # equal sets: one salt


def test_a_definition_that_cannot_be_rebuilt_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvscope._exec._frontends import DIRECT
    from nvscope._exec._legacy import LEGACY

    module = types.ModuleType("fake_frontend_without_fusion_functions")
    module.FusionDefinition = object  # type: ignore[attr-defined]
    module.DataType = object  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)

    class PrintsSomethingElse:
        """A FusionDefinition whose printed definition has no ``nvfuser_fusion...`` function to rebuild it from."""

        def __repr__(self) -> str:
            return "def some_other_name(fd: Any) -> None:\n    pass\n"

    fd: Any = PrintsSomethingElse()
    with pytest.raises(nvscope.UnsupportedError, match=r"no `nvfuser_fusion\.\.\.` function"):
        DIRECT.rebuild(fd, module, nvscope.OptionSet())
    with pytest.raises(nvscope.UnsupportedError):
        LEGACY.rebuild(fd, module, nvscope.OptionSet(enable=["fuse_matmul"]))
