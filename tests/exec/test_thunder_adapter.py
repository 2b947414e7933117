"""The Thunder adapter (nvscope.thunder) against a recording double of Thunder's nvFuser executor (thunder_double).

What is observed is what the fake nvFuser records at each ``execute``: which FusionDefinition ran (Thunder's own,
from its ``get_fd`` cache, or a partition's), the option lists it got and the thread; Thunder's NVTX range names;
what Thunder's tools read off the wrapper (``last_used``, ``last_inputs``); and nvscope's audit records. Only the
backward tests need torch (real autograd); the rest runs without it.
"""

from __future__ import annotations

import contextvars
import gc
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import AUTOGRAD, IMPL, ThunderDouble

import nvscope
import nvscope.thunder
from nvscope import OptionSet, UnsupportedError, audit, nv_options

FM = ["fuse_matmul"]
SFC = ["static_fusion_count"]
KP = ["kernel_profile"]
MEE = ["matmul_expr_eval"]
RESET = "Reset the FusionCache manually"


def reaches_no_fusion() -> pytest.WarningsRecorder:
    """What a scope that runs no fusion says as it exits: these tests' scopes without a call show the plumbing."""
    return pytest.warns(nvscope.NoFusionWarning, match="without executing any nvFuser fusion")


def changes_no_fusion() -> pytest.WarningsRecorder:
    """What a scope says that adds nothing to Thunder's own options: each fusion ran its default kernels."""
    return pytest.warns(nvscope.NoEffectWarning, match="changed no fusion")


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def default_fd(wrapper: Any, *args: Any) -> Any:
    """Thunder's own FusionDefinition for these inputs (built now if it was not yet)."""
    return wrapper.get_fd(wrapper.to_descriptors(args))


def patched_entries(double: ThunderDouble) -> tuple[Any, Any, Any, Any]:
    return (vars(double.Wrapper).get("__call__"), vars(double.Function).get("forward"),
            vars(double.Function).get("backward"), double.impl.execute_with_dtensors)


def run_in_thread(target: Callable[[], Any], name: str) -> None:
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            target()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=runner, name=name)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


# --- install / uninstall / autoinstall -----------------------------------------------------------------------------

@pytest.mark.parametrize("missing", [IMPL, AUTOGRAD])
def test_install_without_thunders_executor_changes_nothing(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch,
                                                           missing: str) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    before = patched_entries(double)
    assert nvscope.thunder.install() is False
    assert not nvscope.thunder.installed()
    assert nvscope.thunder.unsupported() is None  # not "unsupported": there is nothing to drive
    assert patched_entries(double) == before
    with nv_options(enable=FM):  # the autoinstall hook tries too, and fails the same way
        assert not nvscope.thunder.installed()
    assert patched_entries(double) == before


def test_install_patches_and_is_idempotent(double: ThunderDouble) -> None:
    call, forward, backward, with_dtensors = patched_entries(double)
    assert nvscope.thunder.unsupported() is None
    assert nvscope.thunder.install() is True
    assert nvscope.thunder.installed()
    with reaches_no_fusion(), nv_options(enable=FM):  # the per-fusion patches are in place while a scope exists
        patched = patched_entries(double)
        assert patched[0] is not call and patched[0].__wrapped__ is call
        assert patched[1] is not forward and patched[1].__func__.__wrapped__ is forward.__func__
        assert patched[2] is not backward and patched[2].__func__.__wrapped__ is backward.__func__
        assert patched[3] is not with_dtensors and patched[3].__wrapped__ is with_dtensors
        assert nvscope.thunder.install() is True
        assert all(a is b for a, b in zip(patched_entries(double), patched, strict=True))


def test_thunder_runs_its_own_call_while_no_scope_exists_anywhere(double: ThunderDouble) -> None:
    """The per-fusion patches are in place from a scope's first frame to its last one's end (a copied context, a
    bound callable, an audit keep them); with none, Thunder's own functions run untouched, but for the forward's
    hook (once per step, while installed), which names the jitted function for the backward's fusion ids."""
    call, forward, backward, _ = patched_entries(double)
    own = (call, backward)

    def on_demand() -> tuple[Any, Any]:
        entries = patched_entries(double)
        return entries[0], entries[2]

    gc.collect()  # a frame held by an earlier test's exception, in a reference cycle, counts until it is freed
    assert nvscope.thunder.install()
    assert on_demand() == own
    assert patched_entries(double)[1].__func__.__wrapped__ is forward.__func__  # in place while installed
    with reaches_no_fusion(), nv_options(enable=FM):
        assert all(a is not b for a, b in zip(on_demand(), own, strict=True))
        elsewhere = contextvars.copy_context()
        bound = nvscope.bind(lambda: None)
    assert patched_entries(double)[0] is not call  # the copy and the bound callable still hold the scope
    del elsewhere
    assert patched_entries(double)[0] is not call
    del bound
    assert on_demand() == own
    with audit():
        assert patched_entries(double)[0] is not call
    assert on_demand() == own
    nvscope.thunder.uninstall()
    assert patched_entries(double)[:3] == (call, forward, backward)


def test_another_tools_patch_of_the_call_survives_scopes(installed: ThunderDouble) -> None:
    """A profiler that wraps Thunder's __call__ while no scope exists is put back when the last scope ends (nvscope
    takes away only its own value); one that wraps nvscope's hook inside a scope keeps it (it calls the hook)."""
    cls = installed.Wrapper
    own = vars(cls)["__call__"]
    seen: list[str] = []

    def profiled(self: Any, *args: Any) -> Any:
        seen.append(self.name)
        return own(self, *args)

    cls.__call__ = profiled
    wrapper = installed.make_wrapper("nvFusion0")
    with nv_options(enable=FM):
        wrapper(Tensor((1.0,)))
        assert installed.executions[-1].enable == FM
    gc.collect()
    assert vars(cls)["__call__"] is profiled
    wrapper(Tensor((1.0,)))
    assert seen == ["nvFusion0"]
    with reaches_no_fusion(), nv_options(enable=FM):
        hook = vars(cls)["__call__"]

        def outer(self: Any, *args: Any) -> Any:
            seen.append("outer")
            return hook(self, *args)

        cls.__call__ = outer
    gc.collect()
    assert vars(cls)["__call__"] is outer
    with nv_options(enable=FM):
        wrapper(Tensor((1.0,)))
    assert installed.executions[-1].enable == FM and seen[-1] == "outer"


def test_a_bound_generator_closed_by_the_collector_cleans_up_under_its_scope(installed: ThunderDouble) -> None:
    """A generator left in a reference cycle is closed by the collector, which may finalize the frame it captured
    first: its cleanup still runs its fusions with the captured options, and nothing stays demanded afterwards."""
    wrapper = installed.make_wrapper("nvFusion0")
    cleaned: list[Any] = []

    def body() -> Iterator[int]:
        try:
            yield 1
        finally:
            wrapper(Tensor((1.0,)))
            cleaned.append(installed.executions[-1].enable)

    own = vars(installed.Wrapper)["__call__"]
    gc.collect()
    gc.disable()
    try:
        with reaches_no_fusion(), nv_options(enable=FM):
            make = nvscope.bind(body)
        generator = make()
        next(generator)
        cycle: list[Any] = [generator]
        cycle.append(cycle)
        del generator, make, cycle
        gc.collect()
    finally:
        gc.enable()
    assert cleaned == [FM]
    gc.collect()
    assert vars(installed.Wrapper)["__call__"] is own  # every step released what it demanded


def test_a_context_copied_in_a_scope_keeps_its_options_after_the_scope_exits(installed: ThunderDouble) -> None:
    """An asyncio task made inside a scope runs in a copy of the context: its fusions get the scope's options even
    when they run after the creating code left the scope (and no other scope exists then)."""
    wrapper = installed.make_wrapper("nvFusion0")
    with reaches_no_fusion(), nv_options(enable=FM):
        task_context = contextvars.copy_context()
    wrapper(Tensor((1.0,)))
    assert installed.executions[-1].enable == []
    task_context.run(wrapper, Tensor((1.0,)))
    assert installed.executions[-1].enable == FM
    del task_context
    wrapper(Tensor((1.0,)))
    assert installed.executions[-1].enable == []


def test_uninstall_restores_the_exact_originals_and_is_idempotent(double: ThunderDouble) -> None:
    originals = patched_entries(double)
    nvscope.thunder.install()
    assert nvscope.thunder.uninstall() is True
    assert not nvscope.thunder.installed()
    assert all(a is b for a, b in zip(patched_entries(double), originals, strict=True))
    assert nvscope.thunder.uninstall() is False
    assert all(a is b for a, b in zip(patched_entries(double), originals, strict=True))


# Thunder shapes nvscope does not know: each lacks one thing the adapter relies on.
REFUSED = [
    *[{"drop": (name,)} for name in ("get_fd", "to_descriptors", "name", "use_cache", "last_used", "last_inputs",
                                     "store_inputs", "enable_options", "disable_options")],
    {"drop": ("ThunderFunction.forward",)},
    {"drop": ("ThunderFunction.backward",)},
    {"lru_cache": True},  # closed Thunder PR 2806: create_fd through nvFuser's LruFusionCache
]


@pytest.mark.parametrize("shape", REFUSED, ids=lambda s: ",".join(s.get("drop", ())) or "lru_cache")
def test_install_refuses_an_unknown_thunder_and_changes_nothing(make_double: Callable[..., ThunderDouble],
                                                                shape: dict[str, Any]) -> None:
    double = make_double(thunder_version="0.3.0", **shape)
    before = patched_entries(double)
    with pytest.raises(UnsupportedError) as raised:
        nvscope.thunder.install()
    message = str(raised.value)
    what = shape["drop"][0] if "drop" in shape else "nvFuser's LruFusionCache"
    assert what in message and "Thunder 0.3.0" in message and "Thunder 0.2.6" in message
    assert "Nothing was patched" in message and "NVFUSER_ENABLE" in message  # what happens, and the way out
    assert nvscope.thunder.unsupported() == message  # what `nvscope doctor` prints
    assert not nvscope.thunder.installed()
    assert all(a is b for a, b in zip(patched_entries(double), before, strict=True))


def test_every_scope_is_refused_under_an_unknown_thunder_not_only_the_first(
        make_double: Callable[..., ThunderDouble]) -> None:
    """Automatic installation meets the refusal at each scope entry: no later scope runs silently without options."""
    double = make_double(thunder_version="0.3.0", drop=("ThunderFunction.backward",))
    for _ in range(3):
        with pytest.raises(UnsupportedError, match=r"Thunder 0\.3\.0"):
            with nv_options(enable=FM):
                pass  # pragma: no cover - the entry raises
        assert nvscope.current_options() == OptionSet()  # the active scope is unchanged
    assert not nvscope.thunder.installed()
    double.make_wrapper()(t())  # unscoped fusions still run, Thunder's own way
    assert double.executions[-1].enable == []


def test_a_definition_that_comes_compiled_is_refused_in_a_scope(make_double: Callable[..., ThunderDouble]) -> None:
    """A Thunder whose new definitions share compiled caches, without the create_fd marker install looks for."""
    double = make_double(lru_cache=True)
    del double.impl.create_fd
    assert nvscope.thunder.install() is True
    wrapper = double.make_wrapper()
    with nv_options(enable=FM), pytest.raises(UnsupportedError, match="compiled cache already") as raised:
        wrapper(t())
    assert double.executions == []  # nothing ran with the default's kernels under the scope's name
    assert not getattr(raised.value, "__notes__", None)  # nvscope's own refusals are not fusion failures
    wrapper(t())  # unscoped: Thunder's own
    assert double.executions[-1].enable == []


def test_explicit_uninstall_stops_autoinstall_until_install(double: ThunderDouble) -> None:
    nvscope.thunder.install()
    nvscope.thunder.uninstall()
    wrapper = double.make_wrapper()
    with nv_options(enable=FM):
        assert not nvscope.thunder.installed()
        wrapper(t())
    assert double.executions[-1].enable == [] and double.executions[-1].fd is default_fd(wrapper, t())
    assert nvscope.thunder.install() is True
    nvscope.thunder.uninstall()
    with nv_options(enable=FM):
        assert not nvscope.thunder.installed()
    nvscope.thunder.install()
    nvscope.thunder.uninstall()
    nvscope.uninstall()  # back to a fresh import: scopes install again
    with nv_options(enable=FM):
        assert nvscope.thunder.installed()
        wrapper(t())
    assert double.executions[-1].enable == ["fuse_matmul"]


def test_entering_a_scope_installs_automatically(double: ThunderDouble) -> None:
    assert not nvscope.thunder.installed()
    wrapper = double.make_wrapper()
    with nv_options():  # an empty scope installs nothing
        assert not nvscope.thunder.installed()
    with nv_options(enable=FM):
        assert nvscope.thunder.installed()
        wrapper(t())
    assert double.executions[-1].enable == FM


@pytest.mark.filterwarnings("ignore::nvscope.NoFusionWarning")  # these scopes only install; no fusion runs
def test_thunder_imported_after_a_first_scope_is_still_found(make_double: Callable[..., ThunderDouble]) -> None:
    with nv_options(enable=FM):
        assert not nvscope.thunder.installed()
    make_double()  # sys.modules grows: the next scope looks again
    with nv_options(enable=FM):
        assert nvscope.thunder.installed()


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_nvscope_autoinstall_0_disables_autoinstall(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch,
                                                    value: str) -> None:
    monkeypatch.setenv("NVSCOPE_AUTOINSTALL", value)
    with nv_options(enable=FM):
        assert not nvscope.thunder.installed()
    assert nvscope.thunder.install() is True  # explicit install still works


# --- no scope, merging, partitions -----------------------------------------------------------------------------------

def test_unscoped_call_runs_thunders_own_fd_with_thunders_options(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(enable=FM, disable=MEE)
    out = wrapper(t())
    (execution,) = installed.executions
    assert execution.fd is default_fd(wrapper, t())
    assert execution.enable is wrapper.enable_options and execution.disable is wrapper.disable_options
    assert execution.thread == threading.current_thread().name
    assert out[0] == 2 * t()
    assert nvscope.thunder.partitions(wrapper) is None
    assert wrapper.last_used is execution.fd  # Thunder's own __call__ ran
    assert installed.ranges == ["nvFusion0"]


def test_scope_merges_with_compile_time_options_in_a_partition(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(enable=FM)
    with audit() as log, nv_options(disable=MEE):
        out = wrapper(t())
    (execution,) = installed.executions
    assert execution.enable == FM and execution.disable == MEE
    assert wrapper.get_fd.cache_info().currsize == 0  # Thunder's cache was not touched: a partition's FD ran
    assert execution.fd is not default_fd(wrapper, t())
    assert out[0] == 2 * t()
    (record,) = log.records
    assert record.route == "new" and record.options == OptionSet(FM, MEE)


def test_scope_adding_nothing_uses_thunders_default(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(enable=FM + SFC, disable=MEE)
    with audit() as log, changes_no_fusion(), nv_options(enable=FM, disable=MEE):
        wrapper(t())
    (execution,) = installed.executions
    assert execution.fd is default_fd(wrapper, t())
    assert execution.enable is wrapper.enable_options and execution.disable is wrapper.disable_options
    assert [r.route for r in log.records] == ["default"]
    assert log.records[0].options == OptionSet(FM + SFC, MEE)


def test_one_partition_per_option_set(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    with audit() as log:
        with nv_options(enable=FM):
            wrapper(t())
        with nv_options(enable=SFC):
            wrapper(t())
        with nv_options(enable=FM):
            wrapper(t())
        wrapper(t())
    fm, sfc, fm_again, unscoped = (e.fd for e in installed.executions)
    assert fm is fm_again and fm is not sfc
    assert unscoped is default_fd(wrapper, t()) and unscoped not in (fm, sfc)
    assert [(r.route, r.options) for r in log.records] == [
        ("new", OptionSet(FM)), ("new", OptionSet(SFC)), ("reused", OptionSet(FM)), ("default", OptionSet()),
    ]
    table = nvscope.thunder.partitions(wrapper)
    assert table is not None and table.keys() == [OptionSet(SFC), OptionSet(FM)] and table.builds == 2


def test_default_and_partition_fds_never_mix(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(disable=MEE)
    sequence: list[list[str] | None] = [None, FM, None, SFC, FM, None, KP, None]
    for enable in sequence:
        if enable is None:
            wrapper(t())
        else:
            with nv_options(enable=enable):
                wrapper(t())
    default = default_fd(wrapper, t())
    for enable, execution in zip(sequence, installed.executions, strict=True):
        if enable is None:
            assert execution.fd is default and execution.enable == [] and execution.disable == MEE
        else:
            assert execution.fd is not default and execution.enable == enable and execution.disable == MEE
    assert len({id(e.fd) for e in installed.executions}) == 4


def test_input_descriptors_key_each_partitions_own_cache(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    a, b = t(2), t(3)
    with nv_options(enable=FM):
        wrapper(a)
        wrapper(b)
        wrapper(a)
    fd_a, fd_b, fd_a2 = (e.fd for e in installed.executions)
    assert fd_a is fd_a2 and fd_a is not fd_b
    assert fd_a.descriptors == wrapper.to_descriptors((a,)) and fd_b.descriptors == wrapper.to_descriptors((b,))
    # The first call also builds (never compiles) one definition to read the fusion's ops (nvscope.fusions): the
    # wrapper never ran, so there is no Thunder definition to read them from.
    assert [call[0] for call in installed.descriptor_calls[:4]] == [a, a, b, a]
    assert len(installed.built) == 3 and wrapper.get_fd.cache_info().currsize == 0  # Thunder's cache untouched


def test_partitions_are_lru_bounded(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()

    def run(enable: list[str]) -> Any:
        with nv_options(enable=enable):
            wrapper(t())
        return installed.executions[-1].fd

    first_fm = run(FM)
    table = nvscope.thunder.partitions(wrapper)
    assert table is not None
    table.maxsize = 2
    first_sfc = run(SFC)
    assert run(FM) is first_fm  # FM is now the most recently used
    with audit() as log:
        run(KP)  # a third set: evicts the least recently used, SFC
        assert table.evictions == 1 and table.keys() == [OptionSet(FM), OptionSet(KP)]
        assert run(FM) is first_fm  # survived
        second_sfc = run(SFC)  # rebuilt, evicting KP
    # The partition is new, but its definition is the one compiled before: kept by the process-wide shared cache
    # (nvscope._exec._shared; tests/exec/test_shared.py checks NVSCOPE_SHARE=0, where it is compiled anew).
    assert second_sfc is first_sfc
    assert [r.route for r in log.records] == ["new", "reused", "new"]
    assert table.evictions == 2 and len(table) == 2


def test_first_scoped_calls_from_two_threads_share_one_table(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    cache_info = wrapper.get_fd.cache_info
    barrier = threading.Barrier(2)

    def slow_cache_info() -> Any:  # widens the window between "no table yet" and the table being stored
        threading.Event().wait(0.05)
        return cache_info()

    wrapper.get_fd.cache_info = slow_cache_info

    def work() -> None:
        with nv_options(enable=FM):
            barrier.wait(10)
            wrapper(t())

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    first, second = installed.executions
    assert first.fd is second.fd  # one partition, compiled once
    table = nvscope.thunder.partitions(wrapper)
    assert table is not None and table.builds == 1


# --- Thunder's contract in a scope: last_used, last_inputs, use_cache, NVTX, get_nvfuser_repro -------------------

def test_scoped_runs_leave_the_definition_that_ran_for_thunders_tools(installed: ThunderDouble) -> None:
    x = t()
    wrapper = installed.make_wrapper(store_inputs=True)
    with nv_options(enable=FM, disable=MEE):
        wrapper(x)
    scoped = installed.executions[-1]
    assert wrapper.last_used is scoped.fd and wrapper.last_inputs == (x,)
    assert scoped.fd is not default_fd(wrapper, x)
    y = t(3)
    wrapper(y)
    assert wrapper.last_used is installed.executions[-1].fd is default_fd(wrapper, y) and wrapper.last_inputs == (y,)


def test_thunders_tools_after_a_shared_default_run(installed: ThunderDouble) -> None:
    """Issue 38 item 2: under ``share=True`` a fusion's defaults run in nvscope's partition, whose definition may be
    another fusion's; Thunder's tools still see what ran: last_used/last_inputs, the repro, Thunder's range name."""
    first, second = (installed.make_wrapper(f"nvFusion{i}", store_inputs=True, enable=KP) for i in range(2))
    x = t(3)
    with nv_options(share=True):
        first(x)
        second(x)
    ran = installed.executions[-1]
    assert ran.fd is installed.executions[-2].fd  # the second fusion ran the first one's compiled definition
    assert second.last_used is ran.fd and second.last_inputs == (x,) and ran.enable == KP
    assert installed.ranges[-2:] == ["nvFusion0", "nvFusion1"]  # Thunder's names: these are the defaults
    script = installed.get_nvfuser_repro(second)
    assert "_enable_options=['kernel_profile']" in script
    exec(compile(script, "<repro>", "exec"), {"__name__": "__main__"})
    assert installed.executions[-1].enable == KP


def test_get_nvfuser_repro_after_a_scoped_run_runs_with_the_options(installed: ThunderDouble) -> None:
    """Thunder's get_nvfuser_repro raised "needs to be executed" after scoped-only runs; now its script has them."""
    wrapper = installed.make_wrapper(store_inputs=True)
    with nv_options(enable=FM, disable=MEE):
        wrapper(t(3))
    script = installed.get_nvfuser_repro(wrapper)
    assert "_enable_options=['fuse_matmul'], _disable_options=['matmul_expr_eval']" in script
    exec(compile(script, "<repro>", "exec"), {"__name__": "__main__"})  # as `python repro.py` would run it
    rerun = installed.executions[-1]
    assert (rerun.enable, rerun.disable) == (FM, MEE) and [i.values for i in rerun.inputs] == [t(3).values]
    assert rerun.fd.calls == installed.executions[-2].fd.calls and rerun.fd is not installed.executions[-2].fd

    wrapper(t(3))  # unscoped: the default definition, whose repro has no options
    assert "_enable_options" not in installed.get_nvfuser_repro(wrapper)


def test_last_repro_script_of_a_partition_definition_has_its_options(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(save_fake_inputs=True)
    with nv_options(enable=SFC):
        wrapper(t())
    assert "_enable_options=['static_fusion_count']" in installed.executions[-1].fd.last_repro_script()


def test_use_cache_off_is_honoured_in_a_partition(installed: ThunderDouble) -> None:
    """nv_skip_cache: Thunder builds one definition and reuses it whatever the inputs; so does each partition."""
    wrapper = installed.make_wrapper(use_cache=False)
    with nv_options(enable=FM):
        wrapper(t(2))
        wrapper(t(3))
    first, second = installed.executions
    assert first.fd is second.fd and first.enable == FM
    wrapper(t(4))  # the default path builds and keeps its own: the partition's definition never leaks into it
    default = installed.executions[-1]
    assert default.fd is not first.fd and default.enable == [] and wrapper.last_used is default.fd
    with nv_options(enable=FM):
        wrapper(t(5))
    assert installed.executions[-1].fd is first.fd and wrapper.last_used is default.fd


def test_nvtx_range_names_the_options(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(enable=KP)
    wrapper(t())
    with nv_options(enable=FM, disable=MEE):
        wrapper(t())
    with changes_no_fusion(), nv_options(enable=KP):  # adds nothing: Thunder's own call, its own name
        wrapper(t())
    assert installed.ranges == ["nvFusion0", "nvFusion0 [+fuse_matmul +kernel_profile -matmul_expr_eval]",
                                "nvFusion0"]


def test_a_name_with_ops_keeps_the_options_next_to_the_fusion_name(installed: ThunderDouble) -> None:
    """Thunder >= 0.2.7 names the wrapper "nvFusion0: (add, mul)": the range keeps the ops, the record the fusion."""
    wrapper = installed.make_wrapper(name="nvFusion0: (add, mul)")
    with audit() as log, nv_options(enable=FM):
        wrapper(t())
    wrapper(t())
    assert installed.ranges == ["nvFusion0 [+fuse_matmul]: (add, mul)", "nvFusion0: (add, mul)"]
    assert [r.fusion for r in log.records] == ["forward/nvFusion0"]


def test_threads_under_different_scopes_never_see_each_others_options(installed: ThunderDouble) -> None:
    """One fusion, several threads, each under its own scope: options, range names and definitions never cross.

    (Real nvFuser executions cannot overlap: the execute binding holds the GIL. The double's execute is Python, so
    threads interleave between its bytecodes, which is harsher than the real thing.)
    """
    wrapper = installed.make_wrapper()
    plans: list[list[str] | None] = [None, FM, None, SFC, KP, None]
    barrier = threading.Barrier(len(plans))
    errors: list[BaseException] = []
    installed.fe.DELAY = 0.0005  # long enough for other threads to run Thunder's __call__ meanwhile

    def work(enable: list[str] | None) -> None:
        try:
            barrier.wait(10)
            for _ in range(30):
                if enable is None:
                    wrapper(t())
                else:
                    with nv_options(enable=enable):
                        wrapper(t())
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(p,), name=f"worker-{i}") for i, p in enumerate(plans)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert len(installed.executions) == 30 * len(plans) and installed.fe.OVERLAPS
    by_options: dict[tuple[str, ...], set[int]] = {}
    for execution in installed.executions:  # each thread's executions got exactly its own options
        plan = plans[int(execution.thread.split("-")[1])]
        assert execution.enable == ([] if plan is None else plan)
        by_options.setdefault(tuple(execution.enable), set()).add(id(execution.fd))
    assert all(len(fds) == 1 for fds in by_options.values()) and len(by_options) == 4
    assert set(installed.ranges) == {"nvFusion0", "nvFusion0 [+fuse_matmul]", "nvFusion0 [+static_fusion_count]",
                                     "nvFusion0 [+kernel_profile]"}


# --- backward (real autograd: needs torch) ------------------------------------------------------------------------

def test_backward_outside_the_scope_gets_the_forwards_options(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, backward_fusion = installed.make_model(disable=MEE)
    x = torch.ones(3, requires_grad=True)
    with audit() as log:
        with nv_options(enable=FM):
            y = model(x)
        y.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))
    assert [(r.fusion, r.phase, r.options, r.route) for r in log.records] == [
        ("forward/nvFusion0", "forward", OptionSet(FM, MEE), "new"),
        ("backward/nvFusion1", "backward", OptionSet(FM, MEE), "new"),
    ]
    backward = installed.executions[-1]
    assert backward.enable == FM and backward.disable == MEE
    assert backward_fusion.get_fd.cache_info().currsize == 0
    assert nvscope.current_options() == OptionSet()


def test_backward_after_the_scope_exited_gets_the_forwards_options_with_nothing_else_open(
        installed: ThunderDouble) -> None:
    """``with nv_options(...): loss = model(x)`` then ``loss.backward()`` with no scope or audit left anywhere: the
    autograd graph keeps the forward's scope, and with it the patches, until the backward has run."""
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    x = torch.ones(3, requires_grad=True)
    with nv_options(enable=FM, disable=MEE):
        y = model(x)
    y.sum().backward()
    backward = installed.executions[-1]
    assert backward.enable == FM and backward.disable == MEE
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_backward_inside_a_scope_gets_that_scope(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, forward_fusion, backward_fusion = installed.make_model()
    x = torch.ones(3, requires_grad=True)
    with audit() as log:
        y = model(x)
        with nv_options(enable=SFC):
            y.sum().backward()
    assert [(r.fusion, r.phase, r.options) for r in log.records] == [
        ("forward/nvFusion0", "forward", OptionSet()), ("backward/nvFusion1", "backward", OptionSet(SFC)),
    ]
    forward, backward = installed.executions
    assert forward.fd is default_fd(forward_fusion, x) and forward.enable == []
    assert backward.enable == SFC and backward.fd is not default_fd(backward_fusion, x)


def test_unscoped_forward_and_backward_stay_default(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, backward_fusion = installed.make_model(enable=KP)
    x = torch.ones(3, requires_grad=True)
    with audit() as log:
        model(x).sum().backward()
    assert [(r.phase, r.route) for r in log.records] == [("forward", "default"), ("backward", "default")]
    assert installed.executions[-1].fd is default_fd(backward_fusion, x)
    assert installed.executions[-1].enable is backward_fusion.enable_options


def test_backward_on_another_thread_gets_the_forwards_options(installed: ThunderDouble) -> None:
    """PyTorch may run backward on its autograd device thread, where the caller's scope is invisible."""
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    x = torch.ones(3, requires_grad=True)
    with audit() as log:
        with nv_options(enable=FM, disable=MEE):
            y = model(x)
        run_in_thread(lambda: y.sum().backward(), "autograd-device-thread")
    backward = installed.executions[-1]
    assert backward.thread == "autograd-device-thread"
    assert backward.enable == FM and backward.disable == MEE
    assert (log.records[-1].thread, log.records[-1].phase) == ("autograd-device-thread", "backward")
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_backward_thread_scope_is_merged_with_the_captured_options(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    x = torch.ones(3, requires_grad=True)
    with nv_options(enable=FM):
        y = model(x)
    seen: list[OptionSet] = []

    def backward() -> None:
        with nv_options(disable=MEE):
            y.sum().backward()
            seen.append(nvscope.current_options())

    run_in_thread(backward, "autograd-device-thread")
    execution = installed.executions[-1]
    assert execution.enable == FM and execution.disable == MEE
    assert seen == [OptionSet(disable=MEE)]  # the captured options were popped after backward


# --- version gate, collectives, legacy frontend ----------------------------------------------------------------------

def test_old_nvfuser_raises_in_a_scope_and_works_without(make_double: Callable[..., ThunderDouble]) -> None:
    double = make_double(version="0.2.22")
    assert nvscope.thunder.install() is True  # installing does not raise: unscoped Thunder keeps working
    wrapper = double.make_wrapper()
    wrapper(t())
    with nv_options(enable=FM), pytest.raises(UnsupportedError, match=r"0\.2\.22.*0\.2\.23"):
        wrapper(t())
    wrapper(t())
    assert [e.enable for e in double.executions] == [[], []]


def test_async_collective_tensors_are_waited_on_in_a_scope(installed: ThunderDouble,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ModuleType("torch.distributed._functional_collectives")

    class AsyncCollectiveTensor:
        def __init__(self, value: Tensor) -> None:
            self.value = value
            self.shape, self.dtype = value.shape, value.dtype

        def wait(self) -> Tensor:
            return self.value

    fake.AsyncCollectiveTensor = AsyncCollectiveTensor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed._functional_collectives", fake)
    wrapper = installed.make_wrapper()
    with nv_options(enable=FM):
        out = wrapper(AsyncCollectiveTensor(t(4)))
    assert out[0] == 2 * t(4)
    assert installed.executions[-1].fd.descriptors == wrapper.to_descriptors((t(4),))
    assert installed.executions[-1].inputs == (t(4),) and installed.executions[-1].enable == FM


@pytest.fixture
def legacy(make_double: Callable[..., ThunderDouble]) -> ThunderDouble:
    double = make_double(frontend="legacy")
    assert double.impl.FusionDefinition.__module__ == "nvfuser"
    return double


def test_legacy_partitions_are_salted_per_option_set(legacy: ThunderDouble) -> None:
    nvscope.thunder.install()
    wrapper = legacy.make_wrapper()
    other = legacy.make_wrapper("nvFusion1")
    for enable in (FM, SFC, FM):
        with nv_options(enable=enable):
            wrapper(t())
    with nv_options(enable=FM):
        other(t())
    wrapper(t())
    fm, sfc, fm_again, other_fm, unscoped = (e.fd for e in legacy.executions)
    assert fm is fm_again
    assert len(fm.scalars()) == 1 and fm.scalars() == other_fm.scalars()  # one salt per option set, any fusion
    assert len(sfc.scalars()) == 1 and fm.scalars() != sfc.scalars()
    assert unscoped.scalars() == [] and unscoped is default_fd(wrapper, t())


def test_legacy_reset_warning_only_for_executions_nvscope_did_not_partition(legacy: ThunderDouble) -> None:
    nvscope.thunder.install()
    wrapper = legacy.make_wrapper()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nv_options(enable=FM, disable=MEE):
            wrapper(t())
            wrapper(t())
        wrapper(t())  # no options at all: nvFuser does not warn
    assert not [w for w in caught if RESET in str(w.message)]
    assert legacy.executions[0].enable == FM

    own = default_fd(wrapper, t())
    for scoped in (False, True):  # a user's own call with options, outside nvscope's partitions
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if scoped:
                with nv_options(enable=SFC):
                    own.execute([t()], _enable_options=FM)
            else:
                own.execute([t()], _enable_options=FM)
        assert [w for w in caught if RESET in str(w.message)], scoped


def test_legacy_reset_warning_is_not_silenced_on_other_threads(legacy: ThunderDouble,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    nvscope.thunder.install()
    original = legacy.fe.FusionDefinition.execute
    inside, done = threading.Event(), threading.Event()

    def paused_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        inside.set()
        assert done.wait(10)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(legacy.fe.FusionDefinition, "execute", paused_execute)
    wrapper = legacy.make_wrapper()

    def scoped() -> None:
        with nv_options(enable=FM):
            wrapper(t())

    thread = threading.Thread(target=scoped)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread.start()
        assert inside.wait(10)  # the other thread is inside a partitioned (quiet) execution now
        legacy.fe.warnings.warn(RESET + " (from this thread)")
        done.set()
        thread.join(10)
    assert [str(w.message) for w in caught if RESET in str(w.message)] == [RESET + " (from this thread)"]
    assert legacy.executions[-1].enable == FM


def test_uninstall_restores_the_legacy_module(legacy: ThunderDouble) -> None:
    fe = legacy.fe
    real_warnings, real_exit = fe.warnings, fe.FusionDefinition.__dict__["__exit__"]
    nvscope.thunder.install()
    assert fe.warnings is not real_warnings and fe.FusionDefinition.__dict__["__exit__"] is not real_exit
    nvscope.thunder.uninstall()
    assert fe.warnings is real_warnings and fe.FusionDefinition.__dict__["__exit__"] is real_exit


# --- audit ---------------------------------------------------------------------------------------------------------

def test_audit_records_and_summary(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper("nvFusionAudited")
    with audit() as log:
        wrapper(t())
        with nv_options(enable=FM):
            wrapper(t())
            wrapper(t())
    assert len(log) == 3
    first, second, third = log.records
    assert (first.fusion, first.options, first.route, first.phase) == (
        "forward/nvFusionAudited", OptionSet(), "default", "forward")
    assert (second.route, third.route) == ("new", "reused")
    assert second.options == OptionSet(FM) and second.thread == threading.current_thread().name
    assert {r.frontend for r in log.records} == {"nvfuser_direct"}
    summary = log.summary()
    assert "nvFusionAudited" in summary and "NVFUSER_ENABLE=fuse_matmul" in summary
    assert "3 fusion executions, 1 new partitions compiled" in summary
    wrapper(t())  # not audited any more
    assert len(log) == 3
