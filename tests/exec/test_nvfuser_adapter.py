"""nvscope.nvfuser (direct users, legacy hooks, version gate) and nvscope._exec._fusion_table, against fake frontends.

The doubles need no torch, and neither does this file.
"""

from __future__ import annotations

import gc
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope._exec._fusion_table
import nvscope.nvfuser
import nvscope.thunder
from nvscope import OptionSet, UnsupportedError, audit, nv_options
from nvscope._exec._frontends import DIRECT, check_version, frontend_of
from nvscope._exec._fusion_table import FusionTable
from nvscope._exec._legacy import LEGACY

FM = ["fuse_matmul"]
SFC = ["static_fusion_count"]
KP = ["kernel_profile"]
MEE = ["matmul_expr_eval"]
RESET = "Reset the FusionCache manually"


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    reset_nvscope()
    yield
    reset_nvscope()


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    return lambda name: load_frontend(monkeypatch, name)


def define(fe: Any, *shapes: int, ops: tuple[str, ...] = ("linear",)) -> Any:
    """A definition with a tensor per shape and these ops (a linear by default: every option can affect it)."""
    with fe.FusionDefinition() as fd:
        for n in shapes:
            fd.define_tensor(shape=[n], dtype=fe.DataType.Float)
        for op in ops:
            getattr(fd.ops, op)(0)
    return fd


# --- FusionTable ------------------------------------------------------------------------------------------------------

def _table(own: OptionSet, build: Callable[[OptionSet], Any], maxsize: int | None = None) -> FusionTable[Any]:
    """A table outside the execution path: its partitions only."""
    return FusionTable(own, build, maxsize, info=nvscope.FusionInfo("nvFusion0", "forward"),
                       build_own=lambda: build(own), build_region=lambda: lambda *args: args)


class TestFusionTable:
    def make(self, maxsize: int = 2) -> tuple[FusionTable[list[OptionSet]], list[OptionSet]]:
        built: list[OptionSet] = []

        def build(options: OptionSet) -> list[OptionSet]:
            built.append(options)
            return [options]

        return _table(OptionSet(KP), build, maxsize), built

    def test_builds_once_per_set_and_reuses(self) -> None:
        table, built = self.make(maxsize=4)
        a, new_a = table.get(OptionSet(FM))
        b, new_b = table.get(OptionSet(SFC))
        a2, new_a2 = table.get(OptionSet(enable=("fuse_matmul",)))  # equal set, another object
        assert (new_a, new_b, new_a2) == (True, True, False)
        assert a is a2 and a is not b
        assert built == [OptionSet(FM), OptionSet(SFC)] and table.builds == 2 and table.evictions == 0
        assert len(table) == 2 and OptionSet(FM) in table and OptionSet(KP) not in table
        assert table.own_options == OptionSet(KP)

    def test_evicts_the_least_recently_used(self) -> None:
        table, built = self.make(maxsize=2)
        table.get(OptionSet(FM))
        table.get(OptionSet(SFC))
        table.get(OptionSet(FM))  # FM is now the most recent
        assert table.keys() == [OptionSet(SFC), OptionSet(FM)]
        table.get(OptionSet(KP))
        assert table.keys() == [OptionSet(FM), OptionSet(KP)] and table.evictions == 1
        _, new = table.get(OptionSet(FM))
        assert not new
        _, new = table.get(OptionSet(SFC))
        assert new and table.evictions == 2 and table.builds == 4 and len(table) == 2
        assert built.count(OptionSet(SFC)) == 2

    def test_maxsize_one(self) -> None:
        table, _ = self.make(maxsize=1)
        for enable in (FM, SFC, FM):
            assert table.get(OptionSet(enable))[1]
        assert table.keys() == [OptionSet(FM)] and table.evictions == 2

    def test_a_failing_build_leaves_the_table_unchanged(self) -> None:
        def build(options: OptionSet) -> object:
            raise RuntimeError("compile failed")

        table: FusionTable[object] = _table(OptionSet(), build, 2)
        with pytest.raises(RuntimeError, match="compile failed"):
            table.get(OptionSet(FM))
        assert len(table) == 0 and table.builds == 0

    @pytest.mark.parametrize("maxsize", [0, -1])
    def test_maxsize_must_be_positive(self, maxsize: int) -> None:
        with pytest.raises(ValueError, match="maxsize"):
            _table(OptionSet(), lambda o: o, maxsize)

    @pytest.mark.parametrize(("raw", "expected"), [(None, 8), ("3", 3), ("1", 1), (" 5 ", 5)])
    def test_nvscope_max_partitions(self, monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: int) -> None:
        if raw is None:
            monkeypatch.delenv("NVSCOPE_MAX_PARTITIONS", raising=False)
        else:
            monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", raw)
        assert _table(OptionSet(), lambda o: o).maxsize == expected

    @pytest.mark.parametrize("raw", ["0", "-2", "many", "", "2.5"])
    def test_nvscope_max_partitions_nonsense_warns_and_uses_the_default(self, monkeypatch: pytest.MonkeyPatch,
                                                                         raw: str) -> None:
        monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", raw)
        with pytest.warns(nvscope.ConfigWarning, match=rf"NVSCOPE_MAX_PARTITIONS={raw!r}.*positive integer.*8"):
            table: FusionTable[OptionSet] = _table(OptionSet(), lambda o: o)
        assert table.maxsize == 8


# --- helpers: version, frontend, salts, rebuild ----------------------------------------------------------------------

@pytest.mark.parametrize("version", ["0.2.22", "0.2.22.dev20250101", "0.1.0"])
def test_check_version_rejects_old(version: str) -> None:
    error = check_version(version)
    assert isinstance(error, UnsupportedError)
    with pytest.raises(UnsupportedError, match=rf"{version}.*0\.2\.23"):
        raise error


@pytest.mark.parametrize("version", ["0.2.23", "0.2.23.dev20250101", "0.2.35", "1.0"])
def test_check_version_accepts_new_or_unknown(version: str) -> None:
    assert check_version(version) is None
    assert check_version(None) is None


def test_frontend_of(load: Callable[[str], Any]) -> None:
    assert frontend_of(load("nvfuser_direct").FusionDefinition) is DIRECT
    assert frontend_of(load("nvfuser").FusionDefinition) is LEGACY


def test_salts_are_stable_and_distinct_per_set() -> None:
    a, b = LEGACY.salt_for(OptionSet(FM)), LEGACY.salt_for(OptionSet(FM, MEE))
    assert a != b
    assert LEGACY.salt_for(OptionSet(enable=("fuse_matmul",))) == a
    assert LEGACY.salt_for(OptionSet(FM, MEE)) == b


def test_rebuild_replays_the_printed_definition(load: Callable[[str], Any]) -> None:
    for name in ("nvfuser_direct", "nvfuser"):
        fe = load(name)
        fd = define(fe, 2, 5)
        copy = frontend_of(fe.FusionDefinition).rebuild(fd, fe, OptionSet())
        assert copy is not fd and type(copy) is fe.FusionDefinition and copy.calls == fd.calls and copy.finished


def test_rebuild_salts_on_the_legacy_frontend(load: Callable[[str], Any]) -> None:
    fe = load("nvfuser")
    LEGACY.acquire(fe, "test")
    try:
        fd = define(fe, 2)
        assert fd.scalars() == []  # definitions outside nvscope's partitions are not salted
        salted = LEGACY.rebuild(fd, fe, OptionSet(FM))
        assert salted.scalars() == [LEGACY.salt_for(OptionSet(FM))] and salted.calls[:-1] == fd.calls
        assert salted.calls[-1][2] == {"dtype": fe.DataType.Int}
    finally:
        LEGACY.release("test")


# --- direct users: nvscope.nvfuser.install() -------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::nvscope.NoFusionWarning")  # its scopes run nothing on purpose
def test_install_is_opt_in_and_idempotent(load: Callable[[str], Any]) -> None:
    fe = load("nvfuser_direct")
    original = fe.FusionDefinition.__dict__["execute"]
    fd = define(fe, 2)
    with nv_options(enable=FM):  # not installed: the user's own call is left alone
        fd.execute([1.0])
    assert fe.EXECUTIONS[-1].fd is fd and fe.EXECUTIONS[-1].enable == ()
    assert not nvscope.nvfuser.installed() and nvscope.nvfuser.frontends() == []
    assert nvscope.nvfuser.install() is True and nvscope.nvfuser.frontends() == ["nvfuser_direct"]
    # On demand: nvFuser's own execute while no scope exists, nvscope's while one does. (A frame held by an earlier
    # test's exception, in a reference cycle, counts until the collector frees it.)
    gc.collect()
    assert fe.FusionDefinition.__dict__["execute"] is original
    with nv_options(enable=FM):
        patched = fe.FusionDefinition.__dict__["execute"]
        assert patched is not original and patched.__wrapped__ is original
        assert nvscope.nvfuser.install() is True and nvscope.nvfuser.frontends() == ["nvfuser_direct"]
        assert fe.FusionDefinition.__dict__["execute"] is patched
    assert fe.FusionDefinition.__dict__["execute"] is original
    with nv_options(enable=FM):
        nvscope.nvfuser.uninstall()
    assert fe.FusionDefinition.__dict__["execute"] is original
    assert not nvscope.nvfuser.installed() and nvscope.nvfuser.frontends() == []
    nvscope.nvfuser.uninstall()
    assert fe.FusionDefinition.__dict__["execute"] is original


def test_direct_execute_honours_the_scope_on_a_rebuilt_fd(load: Callable[[str], Any]) -> None:
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    fd = define(fe, 2)
    enable = ["kernel_profile"]
    assert fd.execute([3.0], _enable_options=enable) == [6.0]  # no scope: untouched
    unscoped = fe.EXECUTIONS[-1]
    assert unscoped.fd is fd and unscoped.enable is enable
    with audit() as log:
        with nv_options(enable=FM):
            assert fd.execute([3.0], device="cuda:0") == [6.0]
            fd.execute([3.0], device="cuda:0")
        with nv_options(disable=MEE):
            fd.execute([3.0], _enable_options=KP)
        fd.execute([3.0])
    first, second, merged, default = fe.EXECUTIONS[-4:]
    assert first.fd is not fd and first.fd is second.fd and first.fd.calls == fd.calls
    assert (first.enable, first.disable, first.device) == (FM, [], "cuda:0")
    assert merged.fd not in (fd, first.fd) and (merged.enable, merged.disable) == (KP, MEE)
    assert default.fd is fd and default.enable == ()
    direct = "nvfuser_direct"
    assert [(r.route, r.options, r.frontend) for r in log.records] == [
        ("new", OptionSet(FM), direct), ("reused", OptionSet(FM), direct), ("new", OptionSet(KP, MEE), direct),
        ("default", OptionSet(), direct),  # audited like a Thunder fusion: unscoped executions too
    ]
    assert len({r.fusion for r in log.records}) == 1 and log.records[0].fusion.startswith("call/FusionDefinition")


def test_direct_execute_with_options_covering_the_scope_runs_as_is(load: Callable[[str], Any]) -> None:
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    fd = define(fe, 2)
    enable = ["fuse_matmul", "kernel_profile"]
    with pytest.warns(nvscope.NoEffectWarning), nv_options(enable=FM):
        fd.execute([1.0], _enable_options=enable)
    assert fe.EXECUTIONS[-1].fd is fd and fe.EXECUTIONS[-1].enable is enable


def test_a_failing_scoped_execute_names_its_options_and_writes_a_repro_with_them(
        load: Callable[[str], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path))
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[1], dtype=fe.DataType.Float)
        fd.ops.linear(0)
        fd.define_scalar(fe.BREAKS_WITH + "fuse_matmul")
    with nv_options(enable=FM), pytest.raises(RuntimeError) as raised:
        fd.execute([1.0], _disable_options=MEE)
    assert str(raised.value) == fe.ASSERT  # nvFuser's own error, untouched; the note says the rest
    (note,) = raised.value.__notes__
    assert re.match(r"nvscope: nvFuser call/FusionDefinition\S* failed with nvFuser options "
                    r"\+fuse_matmul -matmul_expr_eval\n", note), note
    assert "passed to execute: -matmul_expr_eval; scope: +fuse_matmul" in note
    script = Path(note.split("python ", 1)[1].splitlines()[0].strip())
    assert script.parent == tmp_path
    assert "fd.execute(inputs, _enable_options=['fuse_matmul'], _disable_options=['matmul_expr_eval'])" in \
        script.read_text()
    assert fd.execute([1.0]) == [2.0]  # unscoped, the same definition runs with its default options


def test_after_uninstall_scopes_no_longer_reach_direct_calls(load: Callable[[str], Any]) -> None:
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    fd = define(fe, 2)
    nvscope.nvfuser.uninstall()
    with nv_options(enable=FM):
        fd.execute([1.0])
    assert fe.EXECUTIONS[-1].fd is fd and fe.EXECUTIONS[-1].enable == ()


def test_legacy_direct_user_partitions_are_salted_and_quiet(load: Callable[[str], Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "nvfuser_direct", raising=False)  # the legacy frontend alone (an earlier test's
    fe = load("nvfuser")                                               # script may have left the direct one imported)
    real_warnings, real_exit = fe.warnings, fe.FusionDefinition.__dict__["__exit__"]
    assert nvscope.nvfuser.install() is True and nvscope.nvfuser.frontends() == ["nvfuser"]
    fd = define(fe, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=FM):
            fd.execute([1.0])
        with nv_options(enable=SFC):
            fd.execute([1.0])
    assert not [w for w in caught if RESET in str(w.message)]
    fm, sfc = fe.EXECUTIONS[-2:]
    assert fm.fd.scalars() == [LEGACY.salt_for(OptionSet(FM))] and sfc.fd.scalars() == [LEGACY.salt_for(OptionSet(SFC))]
    assert fd.scalars() == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fd.execute([1.0], _enable_options=FM)  # the user's own call with options: nvFuser's advice stands
    assert [w for w in caught if RESET in str(w.message)]
    nvscope.nvfuser.uninstall()
    assert fe.warnings is real_warnings and fe.FusionDefinition.__dict__["__exit__"] is real_exit


def test_version_gate_message_names_both_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    double = ThunderDouble(monkeypatch, version="0.2.20.dev1")
    nvscope.thunder.install()
    wrapper = double.make_wrapper()
    with nv_options(disable=MEE), pytest.raises(UnsupportedError) as raised:
        wrapper(1.0)
    assert "0.2.20.dev1" in str(raised.value) and "0.2.23" in str(raised.value)


def test_direct_concurrent_threads_each_get_their_own_options(load: Callable[[str], Any]) -> None:
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    fd = define(fe, 2)
    plans: list[list[str] | None] = [None, FM, SFC, None]
    barrier = threading.Barrier(len(plans))
    errors: list[BaseException] = []

    def work(enable: list[str] | None) -> None:
        try:
            barrier.wait(10)
            for _ in range(25):
                if enable is None:
                    fd.execute([1.0])
                else:
                    with nv_options(enable=enable):
                        fd.execute([1.0])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(p,)) for p in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and len(fe.EXECUTIONS) == 100


# --- both adapters on the legacy module: whoever uninstalls last removes the hooks -----------------------------------

@pytest.mark.parametrize("thunder_first", [True, False])
def test_legacy_hooks_survive_until_both_adapters_are_gone(monkeypatch: pytest.MonkeyPatch,
                                                           thunder_first: bool) -> None:
    double = ThunderDouble(monkeypatch, frontend="legacy")
    fe = double.fe
    real_warnings = fe.warnings
    nvscope.thunder.install()
    nvscope.nvfuser.install()
    first, second = ((nvscope.thunder, nvscope.nvfuser) if thunder_first else (nvscope.nvfuser, nvscope.thunder))
    first.uninstall()
    assert fe.warnings is not real_warnings  # the other adapter still relies on them
    second.uninstall()
    assert fe.warnings is real_warnings


def test_legacy_hooks_removed_when_thunder_uses_the_direct_frontend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thunder on nvfuser_direct does not use the legacy hooks, so it must not keep them alive."""
    ThunderDouble(monkeypatch, frontend="direct")
    legacy = load_frontend(monkeypatch, "nvfuser")
    real_warnings, real_exit = legacy.warnings, legacy.FusionDefinition.__dict__["__exit__"]
    nvscope.thunder.install()
    assert nvscope.nvfuser.install() is True and nvscope.nvfuser.frontends() == ["nvfuser", "nvfuser_direct"]
    assert legacy.warnings is not real_warnings
    nvscope.nvfuser.uninstall()
    assert legacy.warnings is real_warnings and legacy.FusionDefinition.__dict__["__exit__"] is real_exit
    nvscope.thunder.uninstall()


def test_legacy_hooks_removed_when_nvfuser_adapter_patched_only_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvscope.nvfuser patched nvfuser_direct only (legacy imported later, with Thunder): Thunder's uninstall
    must remove the legacy hooks it installed, or nobody will."""
    direct = load_frontend(monkeypatch, "nvfuser_direct")
    assert nvscope.nvfuser.install() is True and nvscope.nvfuser.frontends() == ["nvfuser_direct"]
    double = ThunderDouble(monkeypatch, frontend="legacy")
    real_warnings = double.fe.warnings
    nvscope.thunder.install()
    assert double.fe.warnings is not real_warnings
    nvscope.thunder.uninstall()
    assert double.fe.warnings is real_warnings
    nvscope.nvfuser.uninstall()
    assert "execute" in direct.FusionDefinition.__dict__


def breaking(fe: Any, n: int = 2) -> Any:
    """A definition that fails in the fake nvFuser when fuse_matmul is enabled."""
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[n], dtype=fe.DataType.Float)
        fd.ops.linear(0)
        fd.define_scalar(fe.BREAKS_WITH + "fuse_matmul")
    return fd


def test_uninstall_drops_direct_partitions_and_failures(load: Callable[[str], Any]) -> None:
    # Issue 35 item 4: after uninstall + install, a fusion that fell back compiles again under its options, and warns.
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    fd, healthy = breaking(fe), define(fe, 2)
    for _ in range(2):
        with nv_options(enable=FM, on_error="fallback"), pytest.warns(nvscope.FallbackWarning, match="fuse_matmul"):
            assert fd.execute([1.0]) == [2.0]
            assert healthy.execute([1.0]) == [2.0]
        nvscope.uninstall()
        assert nvscope.nvfuser.install()
    scoped = [("breaks-with" in c.definition) for c in fe.COMPILES if c.enable == tuple(FM)]
    assert scoped == [True, False] * 2  # each compiled (or tried) under the options once per install


def test_remembered_failures_keep_no_definition_alive(load: Callable[[str], Any]) -> None:
    # Issue 35 item 8: what a failure leaves behind is text; the definitions that failed go with their fusions.
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    for n in range(1, 4):
        fd = breaking(fe, n)
        with nv_options(enable=FM, on_error="fallback"), pytest.warns(nvscope.FallbackWarning):
            fd.execute([1.0] * n)
        del fd
    fe.EXECUTIONS.clear()  # the double's records of the defaults' runs hold the user's definitions
    gc.collect()
    assert list(fe.DEFINITIONS) == []
    fd = breaking(fe, 1)  # still recorded: no second compile attempt for an equal definition
    with nv_options(enable=FM, on_error="fallback"):
        assert fd.execute([1.0]) == [2.0]
    assert [c.enable for c in fe.COMPILES if c.enable] == [tuple(FM)] * 3


def test_a_shared_definition_never_runs_on_another_device(load: Callable[[str], Any]) -> None:
    # Issue 35 item 12: the shared key holds execute's device argument.
    fe = load("nvfuser_direct")
    nvscope.nvfuser.install()
    a, b = define(fe, 2), define(fe, 2)
    with nv_options(enable=FM):
        for fd, device in ((a, 0), (b, 1), (b, "cuda:0"), (a, 1), (a, None), (b, None)):
            assert fd.execute([1.0], device=device) == [2.0]
    ran = [e.fd for e in fe.EXECUTIONS]
    # One definition per device, shared by a and b there ("cuda:0" is device 0; None, the inputs' device, its own).
    assert ran[0] is ran[2] and ran[1] is ran[3] and ran[4] is ran[5] and len({id(fd) for fd in ran}) == 3
    assert [(c.enable, c.device) for c in fe.COMPILES] == [(tuple(FM), 0), (tuple(FM), 1), (tuple(FM), None)]
