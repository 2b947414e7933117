"""`nvscope.uninstall()` is one reset (`nvscope._core._state`): after a realistic use (scopes over both doubles, a
selector, an audit, a failure under ``on_error="fallback"``) every registered holder is empty, and what a user sees
says so: nothing patched, no fusion table, a fusion that fell back compiles again and warns again, the audit reports
new partitions and no definition shared from before. What must outlive it does: fusion ids, the legacy salts.
"""

from __future__ import annotations

import pkgutil
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")  # the adapters rebuild definitions from Python that imports torch

from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import FallbackWarning, audit, nv_options
from nvscope._core import _state

FM = ["fuse_matmul"]


class Use:
    """Thunder on ``nvfuser_direct`` and a direct user of the legacy ``nvfuser`` frontend, both adapters installed:
    per side a fusion that fails under fuse_matmul and a healthy one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.legacy = load_frontend(monkeypatch, "nvfuser")
        self.double = ThunderDouble(monkeypatch)  # on nvfuser_direct
        self.install()
        self.breaking = self.double.make_wrapper("nvFusion0", breaks_with="fuse_matmul")
        self.healthy = self.double.make_wrapper("nvFusion1")
        self.fd, self.fd_breaking = self.define(), self.define(breaks=True)

    def install(self) -> None:
        """Both adapters, the direct one on the legacy frontend only (on Thunder's it would scope its partitions'
        executions a second time, as a direct user's)."""
        with self.monkeypatch.context() as hidden:
            hidden.delitem(sys.modules, "nvfuser_direct")
            assert nvscope.nvfuser.install() and nvscope.nvfuser.frontends() == ["nvfuser"]
        assert nvscope.thunder.install()

    def define(self, breaks: bool = False) -> Any:
        fe = self.legacy
        with fe.FusionDefinition() as fd:
            fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
            fd.ops.linear(0)
            if breaks:
                fd.define_scalar(fe.BREAKS_WITH + "fuse_matmul")
        return fd

    def step(self) -> None:
        """Each fusion once under the options (the failing ones fall back with a warning), once under a selector."""
        x = Tensor((1.0, 1.0))
        with nv_options(enable=FM, on_error="fallback"), pytest.warns(FallbackWarning) as said:
            self.breaking(x)
            self.healthy(x)
            assert self.fd_breaking.execute([1.0, 1.0]) == [2.0, 2.0]
            assert self.fd.execute([1.0, 1.0]) == [2.0, 2.0]
        assert len(said) == 2
        with nv_options(enable=["kernel_profile"], fusions=["*/nvFusion1*"]):
            self.healthy(x)

    def compiles(self, failing: bool) -> int:
        """Compile attempts under fuse_matmul so far, of the failing definitions or of the healthy ones."""
        return sum(("breaks-with" in c.definition) == failing
                   for fe in (self.double.fe, self.legacy) for c in fe.COMPILES if c.enable == tuple(FM))


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch) -> Iterator[Use]:
    reset_nvscope()
    for name in ("NVFUSER_ENABLE", "NVFUSER_DISABLE", "NVSCOPE_SHARE"):
        monkeypatch.delenv(name, raising=False)
    yield Use(monkeypatch)
    reset_nvscope()


def held(value: object) -> int:
    """How much a holder holds: an lru_cache's entries, a container's items."""
    info = getattr(value, "cache_info", None)
    return int(info().currsize) if callable(info) else len(value)  # type: ignore[arg-type]


def holders() -> dict[str, object]:
    """Every registered global that holds items, by name (an integer such as a seen-modules count is not one)."""
    found = {}
    for name in _state.registered():  # a global, or an attribute of one (``LEGACY._users``)
        value = pkgutil.resolve_name(name)
        if callable(getattr(value, "cache_info", None)) or hasattr(value, "__len__"):
            found[name] = value
    return found


def test_uninstall_empties_every_registered_holder(use: Use) -> None:
    with audit():
        use.step()
    full = {name for name, value in holders().items() if held(value)}
    assert {"nvscope._exec._shared.SHARED._entries", "nvscope._exec._adapter.INSTALLED._adapters",
            "nvscope._core._patches._PATCHES",
            "nvscope._core._policy._interned", "nvscope._core._fusion._compiled", "nvscope._exec._legacy.LEGACY._users",
            "nvscope._core._optionset.EMPTY._unions"} <= full  # the use reached them
    assert nvscope.uninstall() is True
    assert {name: held(value) for name, value in holders().items() if held(value)} == {}
    assert not nvscope.thunder.installed() and not nvscope.nvfuser.installed()
    assert nvscope.thunder.partitions(use.breaking) is None
    assert nvscope.uninstall() is False  # nothing left to undo


def test_after_uninstall_a_fusion_that_fell_back_compiles_again_and_warns(use: Use) -> None:
    with audit() as first:
        use.step()
    assert use.compiles(failing=True) == 2 and use.compiles(failing=False) == 2
    nvscope.uninstall()
    use.install()
    with audit() as second:
        use.step()  # warns again (pytest.warns inside): the failures were forgotten with the tables
    assert use.compiles(failing=True) == 4  # each failing definition tried again, once
    # No stale entry: the partitions are new, none shared from a definition compiled before; the ids are the same.
    scoped = [r for r in second.records if r.options]
    assert [r.route for r in scoped if r.error is None][:2] == ["new", "new"]
    assert all(r.shared_from is None for r in second.records)
    assert [r.fusion for r in second.records] == [r.fusion for r in first.records]


def test_an_adapters_own_uninstall_leaves_the_other_in_place(use: Use) -> None:
    use.step()
    assert nvscope.thunder.uninstall() is True
    assert nvscope.nvfuser.installed() and not nvscope.thunder.installed()
    with nv_options(enable=FM), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert use.fd.execute([1.0, 1.0]) == [2.0, 2.0]  # the direct adapter still scopes it
    assert use.legacy.EXECUTIONS[-1].enable == FM
    nvscope.nvfuser.uninstall()
    assert not nvscope.nvfuser.installed()
