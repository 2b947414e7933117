"""Each fusion has one id in every run of its program (issue 35, item 1): a model-based test over random programs.

A program is drawn: distinct jitted functions (the Thunder double), each with forward fusions per trace (one trace
per input size it is called with) and maybe a backward fusion, or direct FusionDefinitions (the fake nvFuser
frontend) executed from distinct functions, some from the same one. Every fusion of the program holds an op of its
own (``fd.ops.op<k>``), which is how the test knows which fusion an audit record or an nvFuser execution is, without
asking nvscope. The reference: a listing run (everything audited, in program order) gives each fusion its id. Then
variants of the same program, each a fresh run (``nvscope.uninstall()``, new objects): its calls in another order
(also a function's input shapes: which trace it meets first), each call (for Thunder: its forward and its backward
apart) inside a scope or outside every scope, audit on or off, nvscope installed before the first call or only by the
first scope or audit (Thunder), a direct definition executed through this module or through another one (direct),
the previous run's fusions still alive and seen again after the fresh ones (direct). In every variant a scope selects
a random set of fusions by their ids:

* audited, every record carries the listed id of its fusion; an equal fusion seen afresh while the one that held its
  id before ``nvscope.uninstall()`` is alive gets the same id (equal fusions are one fusion);
* audited or not, exactly the selected fusions that ran in a scope (for a backward: in its own scope or its
  forward's) executed with the scope's options; except a backward whose forward ran before nvscope was installed,
  which nvscope cannot name after its function: it gets no options from a selector by id, and a NoEffectWarning says
  why (docs/fusions.md). Equal definitions alive together (twins, one id) are outside this model:
  tests/core/test_fusion_ids.py.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thunder_double import ThunderDouble, jit, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import OptionSet, audit, nv_options

torch = pytest.importorskip("torch")  # Thunder's backward is a torch.autograd.Function; direct rebuilds import it

pytestmark = pytest.mark.filterwarnings("ignore::nvscope.NoEffectWarning", "ignore::nvscope.NoFusionWarning")

SFC = OptionSet(["static_fusion_count"])

# What the module-level functions below run in the current variant: name -> the callable built from the program.
BODIES: dict[str, Any] = {}


# Distinct functions of the program (module-level: distinct qualnames, as distinct functions of a program have).
def encoder(x: Any) -> Any:
    return BODIES["encoder"](x)


def decoder(x: Any) -> Any:
    return BODIES["decoder"](x)


def head(x: Any) -> Any:
    return BODIES["head"](x)


def loss(x: Any) -> Any:
    return BODIES["loss"](x)


def run_model() -> None:
    BODIES["run_model"]()


def run_loss() -> None:
    BODIES["run_loss"]()


def run_metrics() -> None:
    BODIES["run_metrics"]()


JITTED = {f.__name__: f for f in (encoder, decoder, head, loss)}
DIRECT = {f.__name__: f for f in (run_model, run_loss, run_metrics)}

# Another module of the program that executes definitions it is given (a training utility): the module executing a
# direct definition first must not name it.
HELPER = types.ModuleType("fusion_helper")
exec(compile("def execute_all(fds):\n    for fd in fds:\n        fd.execute([1.0, 2.0])\n", "fusion_helper.py", "exec"),
     HELPER.__dict__)
VIA_HELPER: list[bool] = [False]  # whether the direct bodies execute through HELPER in the current call


def execute_all(fds: list[Any]) -> None:
    for fd in fds:
        fd.execute([1.0, 2.0])

# A Thunder unit: (function, sizes it is called with in program order, forward fusions per trace, with a backward).
thunder_units = st.lists(
    st.tuples(st.sampled_from(sorted(JITTED)), st.lists(st.sampled_from([2, 3]), min_size=1, max_size=3),
              st.integers(1, 2), st.booleans()),
    min_size=1, max_size=4, unique_by=lambda unit: unit[0])
# A direct unit: (function, how many definitions it executes, one after the other).
direct_units = st.lists(st.tuples(st.sampled_from(sorted(DIRECT)), st.integers(1, 2)), min_size=1, max_size=3,
                        unique_by=lambda unit: unit[0])


@contextmanager
def fresh(monkeypatch: pytest.MonkeyPatch, thunder: bool) -> Iterator[Any]:
    """A fresh run: nvscope as after import, the doubles' modules new, the previous run's fusions gone (a fusion
    still alive keeps its id, and one seen afresh is numbered after it); yields the Thunder double or the frontend."""
    BODIES.clear()
    DEFINED.clear()
    reset_nvscope()
    with monkeypatch.context() as patches:
        if thunder:
            yield ThunderDouble(patches)
        else:
            frontend = load_frontend(patches, "nvfuser_direct")
            nvscope.nvfuser.install()
            yield frontend
        reset_nvscope()


def op_of(fd: Any) -> int:
    """Which fusion of the program a FusionDefinition is: the k of its ``fd.ops.op<k>``."""
    (k,) = [int(name[len("ops.op"):]) for name, _, _ in fd.calls if name.startswith("ops.op")]
    return k


def build_thunder(double: ThunderDouble, units: list[tuple[str, list[int], int, bool]]) -> tuple[
        list[Any], dict[tuple[str, int], list[int]], dict[tuple[str, int], int | None]]:
    """The jitted functions (new objects, as in a new run), and the fusions (their k) of each (function, size)."""
    forward: dict[tuple[str, int], list[int]] = {}
    backward: dict[tuple[str, int], int | None] = {}
    jitted = []
    k = 0
    for name, sizes, fusions, has_backward in units:
        for size in dict.fromkeys(sizes):
            forward[name, size] = list(range(k, k + fusions))
            k += fusions
            backward[name, size] = k if has_backward else None
            k += has_backward
        wrappers = {key: [double.make_wrapper(f"nvFusion{i}", ops=(f"op{n}",)) for i, n in enumerate(ks)]
                    for key, ks in forward.items() if key[0] == name}
        backs = {key: double.make_wrapper("nvFusion0", ops=(f"op{n}",))
                 for key, n in backward.items() if key[0] == name and n is not None}

        def body(x: Any, name: str = name, wrappers: Any = wrappers, backs: Any = backs) -> Any:
            size = x.shape[0]
            with torch.no_grad():
                y = x
                for wrapper in wrappers[name, size]:
                    y = wrapper(y)[0]
            fusion = backs.get((name, size))
            if fusion is None:
                return y
            return double.Function.apply(lambda grads: fusion(*grads), (y,), x)[0]

        BODIES[name] = body
        jitted.append(jit(JITTED[name]))
    return jitted, forward, backward


DEFINED: list[Any] = []  # the definitions the last `build_direct` made


def build_direct(frontend: Any, units: list[tuple[str, int]]) -> dict[str, list[int]]:
    k = 0
    fusions: dict[str, list[int]] = {}
    DEFINED.clear()
    for name, count in units:
        fds = []
        for n in range(k, k + count):
            with frontend.FusionDefinition() as fd:
                fd.define_tensor(shape=[2], dtype=frontend.DataType.Float)
                getattr(fd.ops, f"op{n}")(0)
            fds.append(fd)
            DEFINED.append(fd)
        fusions[name] = list(range(k, k + count))
        k += count

        def body(fds: list[Any] = fds) -> None:
            (HELPER.execute_all if VIA_HELPER[0] else execute_all)(fds)

        BODIES[name] = body
    return fusions


@st.composite
def variants(draw: st.DrawFn, calls: int, fusions: int, count: int = 3) -> list[dict[str, Any]]:
    """``count`` variants: the order of the calls, per call whether its forward and its backward are scoped (and,
    direct, whether it executes through another module), audit on or off, nvscope installed before the first call
    or not, the previous run's fusions alive or not, the fusions the scope selects."""
    return [{"order": draw(st.permutations(range(calls))),
             "scoped": draw(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=calls, max_size=calls)),
             "via_helper": draw(st.lists(st.booleans(), min_size=calls, max_size=calls)),
             "audit": draw(st.booleans()), "install": draw(st.booleans()), "survivors": draw(st.booleans()),
             "targets": draw(st.sets(st.integers(0, fusions - 1), min_size=1, max_size=fusions))}
            for _ in range(count)]


def check(variant: dict[str, Any], ids: dict[int, str], records: list[Any], executions: list[Any],
          expected: dict[int, list[bool]]) -> None:
    """The records carry the listed ids; each execution of fusion k had the options iff expected (in order)."""
    for record in records:
        (op,) = record.info.ops
        assert record.fusion == ids[int(op[2:])], (record.fusion, ids)
    got: dict[int, list[bool]] = {}
    for execution in executions:
        got.setdefault(op_of(execution.fd), []).append(
            OptionSet(execution.enable or (), execution.disable or ()) == SFC)
    assert got == expected, (variant, ids)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(units=thunder_units, data=st.data())
def test_each_thunder_fusion_has_one_id_in_every_run(monkeypatch: pytest.MonkeyPatch,
                                                     units: list[tuple[str, list[int], int, bool]],
                                                     data: st.DataObject) -> None:
    calls = [(u, size) for u, (_, sizes, _, _) in enumerate(units) for size in sizes]  # (unit, size), program order

    def run(jitted: list[Any], u: int, size: int, scope: Any, forward: bool, backward: bool) -> None:
        x = torch.ones(size, requires_grad=True)
        with scope() if forward else nullcontext():
            y = jitted[u](x)
        if units[u][3]:
            with scope() if backward else nullcontext():
                y.sum().backward()

    with fresh(monkeypatch, thunder=True) as double:  # the listing: every fusion audited, in program order
        jitted, forward, backward = build_thunder(double, units)
        with audit() as log:
            for u, size in calls:
                run(jitted, u, size, nullcontext, False, False)
        ids = {int(r.info.ops[0][2:]): r.fusion for r in log.records}
    total = sum(len(ks) + (backward[key] is not None) for key, ks in forward.items())
    assert len(ids) == len(set(ids.values())) == total  # one id per fusion, none shared
    for variant in data.draw(variants(len(calls), total)):
        ordered = [calls[i] for i in variant["order"]]
        selected = [ids[k] for k in sorted(variant["targets"])]
        expected: dict[int, list[bool]] = {}
        unnamed = 0  # scoped backwards whose forward ran before nvscope was installed
        named_at_first: dict[int, bool] = {}  # a backward fusion's id is made when nvscope first sees it
        with fresh(monkeypatch, thunder=True) as double, warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            # Installed before the first call, or by the first scope or audit (nvscope's automatic install).
            installed = variant["install"] or variant["audit"]
            if variant["install"]:
                nvscope.thunder.install()
            jitted, forward, backward = build_thunder(double, units)
            since = len(double.executions)
            with ExitStack() as stack:
                log = stack.enter_context(audit()) if variant["audit"] else None
                for i, (u, size) in enumerate(ordered):
                    fw, bw = variant["scoped"][variant["order"][i]]
                    named = installed or fw  # the forward patch sees the forward: its backward knows its function
                    installed = installed or fw or (bw and units[u][3])
                    run(jitted, u, size, lambda chosen=selected: nv_options(SFC, fusions=chosen), fw, bw)
                    name = units[u][0]
                    for k in forward[name, size]:
                        expected.setdefault(k, []).append(fw and k in variant["targets"])
                    k_back = backward[name, size]
                    if k_back is not None:  # a backward runs under its forward's scope and its own
                        if fw or bw or variant["audit"]:
                            named_at_first.setdefault(k_back, named)
                        expected.setdefault(k_back, []).append(
                            (fw or bw) and named_at_first.get(k_back, named) and k_back in variant["targets"])
                        unnamed += bw and not named
            check(variant, ids, [] if log is None else log.records, double.executions[since:], expected)
        warned = [w for w in said if "forward ran before nvscope was installed" in str(w.message)]
        assert len(warned) == unnamed and all(w.category is nvscope.NoEffectWarning for w in warned)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(units=direct_units, data=st.data())
def test_each_direct_definition_has_one_id_in_every_run(monkeypatch: pytest.MonkeyPatch,
                                                        units: list[tuple[str, int]], data: st.DataObject) -> None:
    with fresh(monkeypatch, thunder=False) as frontend:
        fusions = build_direct(frontend, units)
        with audit() as log:
            for name, _ in units:
                DIRECT[name]()
        ids = {int(r.info.ops[0][2:]): r.fusion for r in log.records}
    total = sum(count for _, count in units)
    assert len(ids) == len(set(ids.values())) == total
    for variant in data.draw(variants(len(units), total)):
        # After an uninstall numbering starts again, as in a new process: the program's fusions, seen first, get the
        # ids they have in every run; equal definitions that survived the uninstall, seen after them, are numbered next.
        now = dict(ids)
        selected = [now[k] for k in sorted(variant["targets"])]
        expected: dict[int, list[bool]] = {}
        with fresh(monkeypatch, thunder=False) as frontend:
            survivors: list[Any] = []
            if variant["survivors"]:  # the program's fusions seen, then nvscope uninstalled and installed again
                with audit():
                    build_direct(frontend, units)
                    survivors = list(DEFINED)
                    execute_all(survivors)
                nvscope.uninstall()
                nvscope.nvfuser.install()
            fusions = build_direct(frontend, units)
            since = len(frontend.EXECUTIONS)
            with audit() if variant["audit"] else nullcontext() as log:
                for u in variant["order"]:
                    name = units[u][0]
                    scoped = variant["scoped"][u][0]
                    VIA_HELPER[0] = variant["via_helper"][u]
                    with nv_options(SFC, fusions=selected) if scoped else nullcontext():
                        DIRECT[name]()
                    for k in fusions[name]:
                        expected.setdefault(k, []).append(scoped and k in variant["targets"])
            VIA_HELPER[0] = False
            check(variant, now, [] if log is None else log.records, frontend.EXECUTIONS[since:], expected)
            with audit() as again:
                execute_all(survivors)  # seen again after the program's own: equal definitions, the same id
            # (a program's fusion that ran unscoped and unaudited was never seen, so its survivor may take the id)
            assert all(r.fusion == ids[op_of(fd)] for r, fd in zip(again.records, survivors, strict=True)), \
                again.records
