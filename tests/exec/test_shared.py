"""One compile per distinct fusion definition and option set (nvscope._exec._shared), against the doubles.

What is observed: the fake nvFuser's compile attempts (``COMPILES``: a definition compiles at its first execution,
again only if that failed), its executions (which FusionDefinition ran, with which options), nvscope's audit records
(``shared_from``) and its warnings. Layers of a model repeat: fusions made by ``make_wrapper`` with the same ops and
inputs print the same definition, as Thunder's repeated layers do.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import FallbackWarning, OptionSet, audit, nv_options
from nvscope._bisect._bisect import bisect

FM = ["fuse_matmul"]
SFC = ["static_fusion_count"]
KP = ["kernel_profile"]


@pytest.fixture
def make_double(make_double: Callable[..., ThunderDouble],
                monkeypatch: pytest.MonkeyPatch) -> Callable[..., ThunderDouble]:
    """tests/conftest.py's, with nvscope's default sharing (its variables unset) and the Thunder adapter installed;
    so is `double` here."""
    for name in ("NVSCOPE_SHARE", "NVSCOPE_MAX_SHARED", "NVSCOPE_MAX_PARTITIONS"):
        monkeypatch.delenv(name, raising=False)

    def make(*args: Any, **kwargs: Any) -> ThunderDouble:
        double = make_double(*args, **kwargs)
        assert nvscope.thunder.install()
        return double

    return make


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def layers(double: ThunderDouble, n: int, **kwargs: Any) -> list[Any]:
    return [double.make_wrapper(f"nvFusion{i}", **kwargs) for i in range(n)]


def compiles(double: ThunderDouble) -> list[tuple[str, tuple[str, ...]]]:
    return [(c.definition, c.enable) for c in double.fe.COMPILES]


def test_identical_definitions_compile_once_per_option_set(double: ThunderDouble) -> None:
    fusions = layers(double, 4)
    other = double.make_wrapper("nvFusion9", ops=("matmul",))  # another definition
    with audit() as log:
        for enable in (FM, SFC, FM):
            with nv_options(enable=enable):
                for fusion in [*fusions, other]:
                    assert fusion(t()) == [t() * 2]
    # Two definitions x two option sets: four compiles, whatever the number of fusions or steps.
    assert sorted(e for _, e in compiles(double)) == sorted([tuple(FM), tuple(FM), tuple(SFC), tuple(SFC)])
    assert len(set(compiles(double))) == 4
    # Every execution got its scope's options; the layers ran one definition per option set.
    scoped = double.executions
    assert [list(e.enable) for e in scoped] == [FM] * 5 + [SFC] * 5 + [FM] * 5
    assert len({id(e.fd) for e in scoped[:4]}) == 1 and scoped[4].fd is not scoped[0].fd
    assert scoped[0].fd is not scoped[5].fd and scoped[0].fd is scoped[10].fd
    # The audit says which partition ran another fusion's compiled definition, and whose.
    first = [(r.fusion, r.route, r.shared_from) for r in log.records[:5]]
    owner = "forward/nvFusion0"
    assert first == [(owner, "new", None), ("forward/nvFusion1", "new", owner), ("forward/nvFusion2", "new", owner),
                     ("forward/nvFusion3", "new", owner), ("forward/nvFusion9", "new", None)]
    assert log.summary().endswith("15 fusion executions, 4 new partitions compiled, 6 shared a definition compiled "
                                  "for another fusion")


def test_defaults_are_never_shared_with_a_scope(double: ThunderDouble) -> None:
    a, b = layers(double, 2)
    a(t())  # Thunder's own cache: outside nvscope
    with nv_options(enable=FM):
        a(t())
        b(t())
    b(t())
    defaults = [e.fd for e in double.executions if not e.enable]
    scoped = [e.fd for e in double.executions if e.enable]
    assert not {id(fd) for fd in defaults} & {id(fd) for fd in scoped}
    assert scoped[0] is scoped[1]


def test_different_inputs_are_different_definitions(double: ThunderDouble) -> None:
    a, b = layers(double, 2)
    with nv_options(enable=FM):
        a(t(2))
        b(t(3))
        b(t(2))
    assert len(double.fe.COMPILES) == 2
    assert double.executions[2].fd is double.executions[0].fd


def test_inputs_that_thunder_tells_apart_never_share_even_when_printed_alike(double: ThunderDouble) -> None:
    # The doubles' printer leaves the input dtype out (every tensor prints as DataType.Float) while Thunder's
    # descriptors carry it: a printer that misses an input property must not make two definitions one.
    a, b = layers(double, 2)
    with audit() as log, nv_options(enable=FM):
        a(t(2))
        b(Tensor((1.0, 1.0), dtype="float64"))
        b(t(2))
    assert repr(double.executions[0].fd) == repr(double.executions[1].fd)
    assert len(double.fe.COMPILES) == 2
    assert double.executions[1].fd is not double.executions[0].fd
    assert double.executions[2].fd is double.executions[0].fd  # same inputs again: shared
    assert [r.shared_from for r in log.records] == [None, None, "forward/nvFusion0"]


def test_nvscope_share_off_compiles_per_fusion(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_SHARE", "0")
    fusions = layers(double, 3)
    with audit() as log, nv_options(enable=FM):
        for fusion in fusions:
            fusion(t())
    assert len(double.fe.COMPILES) == 3 and len({id(e.fd) for e in double.executions}) == 3
    assert [r.shared_from for r in log.records] == [None] * 3


def test_uninstall_drops_the_shared_definitions(double: ThunderDouble) -> None:
    a, b = layers(double, 2)
    with nv_options(enable=FM):
        a(t())
    nvscope.uninstall()
    assert nvscope.thunder.install()
    with nv_options(enable=FM):
        b(t())
    assert len(double.fe.COMPILES) == 2 and double.executions[0].fd is not double.executions[1].fd


def test_the_bound_forgets_the_least_recently_used(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_MAX_SHARED", "1")
    a, b, c = layers(double, 3)
    with nv_options(enable=FM):
        a(t(2))
        a(t(3))  # a second definition: the first is forgotten by the shared cache (a's partition still holds it)
        b(t(2))  # compiles again (and now the shape-3 definition is forgotten)
        c(t(2))  # the registered one
    assert len(double.fe.COMPILES) == 3
    assert double.executions[3].fd is double.executions[2].fd is not double.executions[0].fd


def test_a_shared_failure_is_one_compile_attempt_and_one_warning(double: ThunderDouble) -> None:
    fusions = layers(double, 3, breaks_with="fuse_matmul")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with audit() as log:
            for _ in range(2):
                with nv_options(enable=FM, on_error="fallback"):
                    outputs = [fusion(t()) for fusion in fusions]
                assert outputs == [[t() * 2]] * 3  # the defaults' outputs
    fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in fallbacks]
    message = str(fallbacks[0].message)
    assert "fusion forward/nvFusion0 failed" in message and "same nvFuser definition" in message
    assert [c.enable for c in double.fe.COMPILES].count(tuple(FM)) == 1  # one attempt under the options
    fell_back = [(r.fusion, r.route) for r in log.records if r.route == "fallback"]
    assert sorted(set(fell_back)) == [(f"forward/nvFusion{i}", "fallback") for i in range(3)]
    later = next(r for r in log.records if r.fusion == "forward/nvFusion2" and r.route == "fallback")
    assert later.error is not None and "failed under these options in fusion forward/nvFusion0" in later.error


def test_a_known_shared_failure_raises_under_on_error_raise(double: ThunderDouble) -> None:
    a, b = layers(double, 2, breaks_with="fuse_matmul")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with nv_options(enable=FM, on_error="fallback"):
            a(t())
    with nv_options(enable=FM), pytest.raises(RuntimeError) as raised:
        b(t())
    assert "failed under these options in fusion forward/nvFusion0" in str(raised.value)
    notes = getattr(raised.value, "__notes__", [])
    assert len(notes) == 1 and "forward/nvFusion1" in notes[0] and "fuse_matmul" in notes[0]
    assert [c.enable for c in double.fe.COMPILES].count(tuple(FM)) == 1


@pytest.mark.parametrize("share", ["1", "0"])
def test_fallback_after_eviction_does_not_compile_or_warn_again(double: ThunderDouble,
                                                                monkeypatch: pytest.MonkeyPatch, share: str) -> None:
    # Issue 27 item 8: one partition per fusion; a failing fallback scope alternated with another scope.
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "1")
    monkeypatch.setenv("NVSCOPE_SHARE", share)
    fusion = double.make_wrapper(breaks_with="fuse_matmul")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with nv_options(enable=FM, on_error="fallback"):
                assert fusion(t()) == [t() * 2]
            with nv_options(enable=SFC):
                assert fusion(t()) == [t() * 2]
    table = nvscope.thunder.partitions(fusion)
    assert table is not None and table.evictions >= 4  # the failing partition really was evicted and rebuilt
    assert sum(issubclass(w.category, FallbackWarning) for w in caught) == 1
    assert [c.enable for c in double.fe.COMPILES].count(tuple(FM)) == 1


def test_legacy_frontend_shares_through_nvfusers_own_cache(make_double: Callable[..., ThunderDouble]) -> None:
    # The legacy frontend's global FusionCache keys on the definition: nvscope's salt depends on the options only,
    # so equal definitions under one option set are one cache entry (one compile), without nvscope's shared cache.
    double = make_double("legacy")
    fusions = layers(double, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Reset the FusionCache" warning either
        for enable in (FM, SFC):
            with nv_options(enable=enable):
                for fusion in fusions:
                    fusion(t())
        for fusion in fusions:
            fusion(t())  # the defaults: unsalted, an entry of their own
    assert [c.enable for c in double.fe.COMPILES] == [tuple(FM), tuple(SFC), ()]
    assert len({id(e.fd) for e in double.executions}) == 9  # distinct definitions: sharing is nvFuser's cache's


def test_direct_nvfuser_users_share_too(monkeypatch: pytest.MonkeyPatch) -> None:
    reset_nvscope()
    monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    fe = load_frontend(monkeypatch, "nvfuser_direct")
    try:
        nvscope.nvfuser.install()
        definitions = []
        for _ in range(3):
            with fe.FusionDefinition() as fd:
                fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
                fd.ops.linear(0)
            definitions.append(fd)
        with audit() as log:
            for options in (FM, KP):
                with nv_options(enable=options):
                    for fd in definitions:
                        assert fd.execute([t()]) == [t() * 2]
        assert [c.enable for c in fe.COMPILES] == [tuple(FM), tuple(KP)]
        assert [list(e.enable) for e in fe.EXECUTIONS] == [FM] * 3 + [KP] * 3
        owners = [r.shared_from for r in log.records]
        assert owners[0] is None and owners[1] == owners[2] == log.records[0].fusion
        assert all(r.options in (OptionSet(FM), OptionSet(KP)) for r in log.records)
    finally:
        reset_nvscope()


def test_two_threads_building_equal_definitions_compile_once(double: ThunderDouble,
                                                             run_threads: Callable[..., list[Any]]) -> None:
    fusions = layers(double, 8)

    def work(i: int) -> None:
        with nv_options(enable=FM):
            fusions[i](t())

    run_threads(8, work)
    assert len(double.fe.COMPILES) == 1 and len({id(e.fd) for e in double.executions}) == 1


def test_bisect_compiles_each_definition_once_per_option_set_and_reports_the_compile_time(
        double: ThunderDouble) -> None:
    # Ten fusions, nine of one definition and one that breaks under fuse_matmul: every probe is an option set on some
    # of them, so the probes compile at most two definitions per distinct option set, and say how long that took.
    double.fe.COMPILE_DELAY = 0.02
    fusions = layers(double, 10)
    fusions[6] = double.make_wrapper("nvFusion6", breaks_with="fuse_matmul")

    def step(x: Tensor) -> Any:
        for fusion in fusions:
            (x,) = fusion(x)
        return x

    result = bisect(step, t(), enable=["fuse_matmul", "kernel_profile"], progress=False)
    assert result.reproduced and result.fusions == ("forward/nvFusion6",)
    scoped = [c for c in double.fe.COMPILES if c.enable or c.disable]
    option_sets = {p.options for p in result.log}
    healthy = [c for c in scoped if "breaks-with" not in c.definition]
    # The nine equal fusions: one compile per option set, whatever the probes and the fusions they selected. (The
    # broken definition is attempted again by each probe that reaches it: a failed compile keeps nothing.)
    assert len(healthy) == len({(c.enable, c.disable) for c in healthy}) <= len(option_sets)
    assert len(scoped) - len(healthy) <= sum(p.bad for p in result.log)
    assert result.compile_s is not None and result.compile_s >= 0.02 * len(healthy) * 0.9
    assert f"{result.compile_s:.1f} s of it compiling" in result.report()
    assert result.as_dict()["compile_s"] == result.compile_s


def test_a_failure_on_a_cache_hit_falls_back_and_warns_at_the_callers_line(double: ThunderDouble) -> None:
    # A cache hit of a repeated scoped call runs in the Thunder patch (not through nvscope._exec._execute.execute): a
    # failure there is handled the same way, and the warning still points at the line that called the fusion.
    fusion = double.make_wrapper()
    with nv_options(enable=FM, on_error="fallback"):
        fusion(t())  # builds the partition: the fusion's memo now holds it
        double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory"))
        with pytest.warns(FallbackWarning, match="CUDA out of memory") as caught:
            assert fusion(t()) == [t() * 2]
        assert fusion.last_used is double.executions[-1].fd  # what ran last (the defaults): Thunder's tools read it
        assert fusion(t()) == [t() * 2]  # the defaults directly, no new warning
    assert caught[0].filename == __file__
    assert [list(e.enable) for e in double.executions] == [FM, [], []]


def execute(fd: Any) -> Any:
    """``fd.execute`` looked up at the call: nvscope patches it only while a scope or an audit exists."""
    return fd.execute([t()])


def direct_definitions(fe: Any, n: int, breaks_with: str | None = None) -> list[Any]:
    """``n`` direct FusionDefinitions that print the same definition (one breaks under ``breaks_with``, if given)."""
    definitions = []
    for _ in range(n):
        with fe.FusionDefinition() as fd:
            fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
            fd.ops.linear(0)
            if breaks_with is not None:
                fd.define_scalar(fe.BREAKS_WITH + breaks_with)
        definitions.append(fd)
    return definitions


@pytest.mark.parametrize("adapter", ["thunder", "direct"])
def test_a_run_time_failure_after_the_compile_is_that_fusions_alone(make_double: Callable[..., ThunderDouble],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   adapter: str) -> None:
    # Issue 35 item 2: A compiles and runs, then one execution of it fails (out of memory, say) under fallback. The
    # definition compiled fine: its twin C runs it with the options, under on_error="raise" too, without compiling.
    if adapter == "thunder":
        double = make_double()
        fe = double.fe
        a, c = (functools.partial(fusion, t()) for fusion in layers(double, 2))
    else:
        fe = load_frontend(monkeypatch, "nvfuser_direct")
        assert nvscope.nvfuser.install()
        a, c = (functools.partial(execute, fd) for fd in direct_definitions(fe, 2))
    with nv_options(enable=FM, on_error="fallback"):
        assert a() == [t() * 2]  # compiles and runs
        fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory"))
        with pytest.warns(FallbackWarning, match="CUDA out of memory") as caught:
            assert a() == [t() * 2]
    assert "share this failure" not in str(caught[0].message)
    with nv_options(enable=FM):
        assert c() == [t() * 2]
    with nv_options(enable=FM, on_error="fallback"), warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: C's executions are fine
        assert c() == [t() * 2]
    assert [list(e.enable) for e in fe.EXECUTIONS] == [FM, [], FM, FM]
    assert fe.EXECUTIONS[2].fd is fe.EXECUTIONS[0].fd  # the definition A compiled
    assert [c.enable for c in fe.COMPILES] == [tuple(FM), ()]  # and A's defaults, at its fallback


def test_a_failure_of_the_first_execution_is_the_definitions(double: ThunderDouble) -> None:
    # The same injected failure at the definition's first execution (its compile): shared, as a compile failure.
    a, c = layers(double, 2)
    double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory"))
    with nv_options(enable=FM, on_error="fallback"), pytest.warns(FallbackWarning, match="share this failure"):
        assert a(t()) == [t() * 2]
    with nv_options(enable=FM), pytest.raises(RuntimeError, match="failed under these options in fusion"):
        c(t())
    assert [c.enable for c in double.fe.COMPILES] == [()]  # A's defaults: nothing compiled under the options


@pytest.mark.parametrize("adapter", ["thunder", "direct"])
def test_legacy_frontend_a_shared_failure_is_one_compile_attempt_and_one_warning(
        make_double: Callable[..., ThunderDouble], monkeypatch: pytest.MonkeyPatch, adapter: str) -> None:
    # Issue 35 item 6: the legacy frontend's layers share nvFuser's cache entry, so one failing compile is theirs.
    if adapter == "thunder":
        double = make_double("legacy")
        fe = double.fe
        fusions = layers(double, 3, breaks_with="fuse_matmul")
        calls = [functools.partial(fusion, t()) for fusion in fusions]
    else:
        fe = load_frontend(monkeypatch, "nvfuser")
        assert nvscope.nvfuser.install()
        calls = [functools.partial(execute, fd) for fd in direct_definitions(fe, 3, "fuse_matmul")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with nv_options(enable=FM, on_error="fallback"):
                assert [call() for call in calls] == [[t() * 2]] * 3
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1 and "same nvFuser definition" in fallbacks[0], fallbacks
    assert [c.enable for c in fe.COMPILES].count(tuple(FM)) == 1


def test_legacy_frontend_a_run_time_failure_is_not_shared(make_double: Callable[..., ThunderDouble]) -> None:
    double = make_double("legacy")
    a, c = layers(double, 2)
    with nv_options(enable=FM, on_error="fallback"):
        a(t())
        double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory"))
        with pytest.warns(FallbackWarning, match="CUDA out of memory"):
            a(t())
    with nv_options(enable=FM):
        assert c(t()) == [t() * 2]
    assert [list(e.enable) for e in double.executions] == [FM, [], FM]
    assert [c.enable for c in double.fe.COMPILES] == [tuple(FM), ()]


@pytest.mark.parametrize("frontend", ["direct", "legacy"])
def test_the_audit_counts_a_rebuilt_partition_on_its_compiled_definition_as_no_compile(
        make_double: Callable[..., ThunderDouble], monkeypatch: pytest.MonkeyPatch, frontend: str) -> None:
    # Issue 35 item 7: one partition per fusion, two option sets alternated three times: two compiles.
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "1")
    double = make_double(frontend)
    fusion = double.make_wrapper()
    with audit() as log:
        for _ in range(3):
            for enable in (FM, SFC):
                with nv_options(enable=enable):
                    fusion(t())
    assert [c.enable for c in double.fe.COMPILES] == [tuple(FM), tuple(SFC)]
    assert [r.route for r in log.records] == ["new"] * 6  # each scope rebuilt the evicted partition
    summary = log.summary().splitlines()[-1]
    assert summary.startswith("6 fusion executions, 2 new partitions compiled"), summary
    assert "4 rebuilt partitions ran their definition compiled before" in summary, summary
