"""Fusion ids name where a fusion sits in the program (issue 27 item 2, issue 35 item 1), not what nvscope saw first.

``<phase>/<name>@<module>:<qualname>:<key>`` for a fusion of a jitted function (its forward's for a backward), the key
a digest of the fusion's inputs (which trace of the function it belongs to), ``#k`` only for fusions nothing else
tells apart (one function jitted twice); a glob selects by the id, by the short form ``<phase>/<name>`` (every such
fusion), by the id without its key (every trace of the function) or by the numbered id. Observed
through the Thunder double: ids in audits and `nvscope.fusions`, which fusion the fake nvFuser ran with which options,
and the rows, culprits and lines of profile and bisect. The model-based proof over random programs is
tests/core/test_fusion_ids_model.py.
"""

from __future__ import annotations

import pickle
import types
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, jit, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import FusionInfo, OptionSet, audit, nv_options
from nvscope._bisect._bisect import bisect
from nvscope._core._fusion import exact_glob
from nvscope._core._site import inputs_digest
from nvscope._profile._profile import profile

SFC = ["static_fusion_count"]
HERE = "test_fusion_ids"
KEY = inputs_digest((Tensor((1.0, 1.0)),))  # the inputs of `t()`: each fusion's key (see test_a_key_is_...)
ENCODER = f"forward/nvFusion0@{HERE}:encoder:{KEY}"
DECODER = f"forward/nvFusion0@{HERE}:decoder:{KEY}"


# Two jitted functions, each with one fusion Thunder calls nvFusion0: module-level, so their qualnames are plain.
WRAPPERS: list[Any] = []


def encoder(x: Any) -> Any:
    return WRAPPERS[0](x)[0]


def decoder(x: Any) -> Any:
    return WRAPPERS[1](x)[0]


class TwoFunctions:
    """``step(x)``: the two jitted functions; ``breaks`` maps 0 or 1 to an option under which that one fails."""

    def __init__(self, double: ThunderDouble, breaks: dict[int, str] | None = None) -> None:
        breaks = breaks or {}
        self.double = double
        # Two different definitions (an identical one would share the first's compiled partition, nvscope._exec._shared,
        # and `ran` could not tell the functions apart by the definition that ran).
        WRAPPERS[:] = [double.make_wrapper("nvFusion0", breaks_with=breaks.get(i), ops=("linear",) * (i + 1))
                       for i in range(2)]
        self.wrappers = list(WRAPPERS)
        self.encoder, self.decoder = jit(encoder), jit(decoder)

    def __call__(self, x: Any) -> Any:
        return self.decoder(self.encoder(x))

    def ran(self, since: int = 0) -> list[tuple[int, OptionSet]]:
        """(which wrapper, options) of each execution since ``since``: wrapper i's definitions hold its ops."""
        return [(len(e.fd.calls) - 2, OptionSet(e.enable or (), e.disable or ()))
                for e in self.double.executions[since:]]


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def test_two_jitted_functions_are_named_after_their_functions(double: ThunderDouble) -> None:
    nvscope.thunder.install()
    step = TwoFunctions(double)
    found = nvscope.fusions(step, t())
    assert [f.id for f in found] == [ENCODER, DECODER]
    assert [(f.function, f.site, f.key, f.instance) for f in found] == [("encoder", f"{HERE}:encoder", KEY, 1),
                                                                        ("decoder", f"{HERE}:decoder", KEY, 1)]
    with audit() as log:
        step(t())
    assert [r.fusion for r in log.records] == [ENCODER, DECODER]


def test_an_id_does_not_depend_on_what_ran_first_or_what_was_scoped(double: ThunderDouble) -> None:
    """The issue's case: a listing audits everything; a later run scopes only the second function's fusion, or calls
    it first. Each is a fresh run of the program (uninstall, new objects), as another process would be."""
    listed = [f.id for f in nvscope.fusions(TwoFunctions(double), t())]
    nvscope.uninstall()
    step = TwoFunctions(double)
    step.decoder(t())  # the decoder alone first, unscoped: nvscope does not see it
    with audit() as log, nv_options(enable=SFC, fusions=listed[1]):
        step.decoder(t())
    assert [r.fusion for r in log.records] == [listed[1]]
    assert step.ran(len(double.executions) - 1) == [(1, OptionSet(SFC))]
    nvscope.uninstall()
    step = TwoFunctions(double)
    with audit() as log:
        step.decoder(t())
        step.encoder(t())
    assert [r.fusion for r in log.records] == [listed[1], listed[0]]


@pytest.mark.parametrize(("glob", "reached"), [
    ("*/nvFusion0", [0, 1]), ("forward/*", [0, 1]), ("forward/nvFusion0", [0, 1]), (ENCODER, [0]), (DECODER, [1]),
    (f"{DECODER}#1", [1]), ("forward/nvFusion0@*:encoder", [0]), (f"*@{HERE}:*", [0, 1]), ("forward/nvFusion0#2", []),
    (f"forward/nvFusion0@{HERE}:decoder", [1]), (f"*@*:{KEY}", [0, 1]), (f"forward/nvFusion0@{KEY}", []),
])
def test_a_glob_selects_by_id_by_phase_and_name_or_by_number(double: ThunderDouble, glob: str,
                                                             reached: list[int]) -> None:
    step = TwoFunctions(double)
    step(t())
    since = len(double.executions)
    with pytest.warns(nvscope.NoEffectWarning) if not reached else nullcontext(), nv_options(enable=SFC,
                                                                                              fusions=glob):
        step(t())  # "forward/nvFusion0#2" numbered the second to take the name; now only where nothing else can
    assert step.ran(since) == [(i, OptionSet(SFC) if i in reached else OptionSet()) for i in (0, 1)]


def jitted_encode(wrapper: Any) -> Any:
    """The same function (one qualname) jitted anew, with its own fusion: Thunder's traces are per jit."""

    def encode(x: Any) -> Any:
        return wrapper(x)[0]

    return jit(encode)


ENCODE = f"forward/nvFusion0@{HERE}:jitted_encode.<locals>.encode:{KEY}"


def test_one_function_jitted_twice_is_told_apart_by_number(double: ThunderDouble) -> None:
    first, second = (jitted_encode(double.make_wrapper("nvFusion0", ops=ops)) for ops in (("linear",), ("add",)))
    with audit() as log:
        first(t())
        second(t())
    assert [r.fusion for r in log.records] == [ENCODE, f"{ENCODE}#2"]
    assert [exact_glob(r.fusion) for r in log.records] == [ENCODE, f"{ENCODE}#2"]  # exact as printed
    since = len(double.executions)
    with nv_options(enable=SFC, fusions=f"{ENCODE}#2"):
        second(t())
        first(t())
    assert [OptionSet(e.enable or (), e.disable or ()) for e in double.executions[since:]] == [OptionSet(SFC),
                                                                                              OptionSet()]


def shaped_function(double: ThunderDouble) -> Any:
    """One jitted function with a trace per input size (2 or 3), each with its own nvFusion0."""
    by_size = {2: double.make_wrapper("nvFusion0"), 3: double.make_wrapper("nvFusion0", ops=("add",))}

    def shaped(x: Any) -> Any:
        return by_size[len(x.values)](x)

    return jit(shaped)


SHAPED = f"forward/nvFusion0@{HERE}:shaped_function.<locals>.shaped"


@pytest.mark.parametrize("warm_up", [2, 3])
def test_a_functions_traces_are_told_apart_by_their_inputs(double: ThunderDouble, warm_up: int) -> None:
    """One function, two input shapes: two traces, each with its nvFusion0. Each is named by its inputs, not by the
    order in which the function met them (the review's case: a warm-up on another shape before the training step), so
    an id selects the same trace whichever shape came first; the id without its key selects every trace."""
    jitted = shaped_function(double)
    jitted(t(warm_up))  # unscoped: a first trace, which nvscope does not see
    ids = {n: f"{SHAPED}:{inputs_digest((t(n),))}" for n in (2, 3)}
    assert ids[2] != ids[3]
    with audit() as log, nv_options(enable=SFC, fusions=ids[3]):
        jitted(t(3))
        jitted(t(2))
    assert [r.fusion for r in log.records] == [ids[3], ids[2]]
    assert [r.options for r in log.records] == [OptionSet(SFC), OptionSet()]
    since = len(double.executions)
    with nv_options(enable=SFC, fusions=SHAPED):
        jitted(t(2))
        jitted(t(3))
    assert [OptionSet(e.enable or (), e.disable or ()) for e in double.executions[since:]] == [OptionSet(SFC)] * 2


def test_a_key_is_the_same_in_every_process_and_follows_shape_strides_and_dtype() -> None:
    """The key of a Thunder fusion digests its inputs' shapes, strides and dtypes, not devices or addresses, so it is
    the same in another process; inputs that differ in any of these get another."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    x = torch.ones(4, 6)
    keys = {inputs_digest((x, 2.0)), inputs_digest((x.t(), 2.0)), inputs_digest((x.double(), 2.0)),
            inputs_digest((torch.ones(4, 7), 2.0)), inputs_digest((x, 2))}
    assert len(keys) == 5
    assert inputs_digest((x, 2.0)) == inputs_digest((torch.zeros(4, 6, device="meta"), 3.5))
    code = ("import torch; from nvscope._core._site import inputs_digest; "
            "print(inputs_digest((torch.ones(4, 6), 2.0)))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == inputs_digest((x, 2.0))


def test_exact_glob_adds_a_number_only_where_the_id_is_also_a_short_form(double: ThunderDouble) -> None:
    step = TwoFunctions(double)
    outside = double.make_wrapper("nvFusion0", ops=("mul",))  # run outside any jitted function: no site, no key
    ids = [f.id for f in nvscope.fusions(lambda x: outside(step(x)), t())]
    assert ids == [ENCODER, DECODER, "forward/nvFusion0"]
    assert [exact_glob(i) for i in ids] == [ENCODER, DECODER, "forward/nvFusion0#1"]
    assert exact_glob("backward/nvFusion3") == "backward/nvFusion3"  # alone with its short form: as it is
    assert exact_glob("forward/x*@m:f") == "forward/x[*]@m:f"
    for k, fusion_id in enumerate(ids):
        since = len(double.executions)
        with nv_options(enable=SFC, fusions=[exact_glob(fusion_id)]):
            outside(step(t()))
        got = [OptionSet(e.enable or (), e.disable or ()) for e in double.executions[since:]]
        assert got == [OptionSet(SFC) if i == k else OptionSet() for i in range(3)]


def test_profile_has_a_row_per_fusion(double: ThunderDouble) -> None:
    step = TwoFunctions(double)
    result = profile(step, t(), enable=SFC, rounds=5, steps_per_round=1, warmup=1, progress=False)
    assert [(r.fusion, r.calls) for r in result.rows] == [(ENCODER, 1), (DECODER, 1)]


@pytest.mark.parametrize("culprit", [0, 1])
def test_bisect_tells_the_two_apart_and_its_line_selects_the_culprit_alone(double: ThunderDouble,
                                                                          culprit: int) -> None:
    step = TwoFunctions(double, breaks={culprit: "fuse_matmul"})
    result = bisect(step, t(), enable=["fuse_matmul", "static_fusion_count"])
    assert result.reproduced and result.all_fusions == (ENCODER, DECODER)
    assert result.fusions == ((ENCODER, DECODER)[culprit],)
    assert result.line() == f"nv_options(enable=['fuse_matmul'], fusions=[{(ENCODER, DECODER)[culprit]!r}])"
    nvscope.uninstall()  # the line in a fresh run, the other function called first
    step = TwoFunctions(double, breaks={culprit: "fuse_matmul"})
    with nv_options(enable=["fuse_matmul"], fusions=list(result.fusions)), pytest.raises(Exception) as raised:
        step.decoder(t())
        step.encoder(t())
    assert any(f"fusion {result.fusions[0]} failed" in note for note in raised.value.__notes__)


def test_a_fusion_info_carries_its_site_and_number() -> None:
    second = FusionInfo("nvFusion0", "forward", ["add"], "f", instance=2, site="train:f")
    assert second.id == "forward/nvFusion0@train:f#2" and second.aliases() == ("forward/nvFusion0",
                                                                              "forward/nvFusion0@train:f#2")
    assert repr(second) == "FusionInfo('forward/nvFusion0@train:f#2', ops=['add'], function='f')"
    assert pickle.loads(pickle.dumps(second)) == second
    assert FusionInfo("nvFusion0", "forward").id == "forward/nvFusion0"  # no site: the short form, as before
    assert FusionInfo("nvFusion0", "forward", site="a:f") != FusionInfo("nvFusion0", "forward", site="b:f")
    for bad, error in ((0, ValueError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(error, match="instance="):
            FusionInfo("nvFusion0", "forward", instance=bad)  # type: ignore[arg-type]
    for site, error in (("", ValueError), ("a:f#2", ValueError), ("a:f*", ValueError), ("a/b", ValueError),
                        ("a f", ValueError), (3, TypeError)):
        with pytest.raises(error, match="site="):
            FusionInfo("nvFusion0", "forward", site=site)  # type: ignore[arg-type]


def test_a_failure_note_and_its_repro_script_name_the_one_fusion(double: ThunderDouble) -> None:
    step = TwoFunctions(double, breaks={1: "fuse_matmul"})
    step(t())
    with nv_options(enable=["fuse_matmul"]), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
        step(t())
    note = "\n".join(raised.value.__notes__)
    assert f"fusion {DECODER} failed" in note and f"forward-nvFusion0_test_fusion_ids_decoder_{KEY}-" in note


def test_after_uninstall_fusions_are_numbered_as_in_a_new_process(double: ThunderDouble) -> None:
    """nvscope.uninstall() is a fresh start: fusions seen afterwards are numbered in the order of sight, as in a new
    process (ids with a site or a digest come back the same; only ``#k`` follows the order), and no two fusions
    hold one id."""
    first, second = (jitted_encode(double.make_wrapper("nvFusion0", ops=ops)) for ops in (("linear",), ("add",)))
    with audit() as log:
        first(t())
        second(t())
    assert [r.fusion for r in log.records] == [ENCODE, f"{ENCODE}#2"]
    nvscope.uninstall()
    third = jitted_encode(double.make_wrapper("nvFusion0", ops=("mul",)))
    with audit() as log:
        second(t())
        third(t())
        first(t())
    assert [r.fusion for r in log.records] == [ENCODE, f"{ENCODE}#2", f"{ENCODE}#3"]


def test_ids_learned_from_another_process_make_the_culprit_line_exact() -> None:
    """A subprocess bisect learns the ids from its child: a fusion without a site whose short form another shares
    gets ``#1``; numbered ids and ids with a site are exact as they are."""
    from nvscope._core._ids import forget_ids, note_ids  # (names no fusion of the other tests has)

    forget_ids()
    try:
        assert exact_glob("forward/nvFusion7") == "forward/nvFusion7"
        note_ids(["forward/nvFusion7", "forward/nvFusion7@m:f", "forward/nvFusion7@m:f#2", "call/FusionDefinition#3",
                  "backward/nvFusion8@m:f", "junk"])
        assert [exact_glob(i) for i in ("forward/nvFusion7", "forward/nvFusion7@m:f", "forward/nvFusion7@m:f#2",
                                        "backward/nvFusion8@m:f", "call/FusionDefinition#3")] == [
            "forward/nvFusion7#1", "forward/nvFusion7@m:f", "forward/nvFusion7@m:f#2", "backward/nvFusion8@m:f",
            "call/FusionDefinition#3"]
    finally:
        forget_ids()


def test_a_long_glob_is_cut_in_messages() -> None:
    """Issue 35 item 11: a 180,000-character glob, an unbalanced one, a long phase or op name: one short message."""
    long = "x" * 180_000
    for call in (lambda: nv_options(enable=SFC, fusions=long), lambda: nv_options(enable=SFC, fusions=long + "["),
                 lambda: nv_options(enable=SFC, fusions=[f"forward/{long}", long]),
                 lambda: nvscope.phase(long), lambda: nvscope.holding(long + "-"),
                 lambda: FusionInfo(long, "forward", site=long + "#")):
        with pytest.raises((ValueError, TypeError)) as raised:
            call()
        assert len(str(raised.value)) < 1000 and " characters)" in str(raised.value), str(raised.value)[:300]
    scope = nv_options(enable=SFC, fusions=[f"forward/{long}"] * 3)
    assert len(repr(scope)) < 1000 and len(repr(nvscope.phase("forward") | f"forward/{long}")) < 1000


# --- direct definitions (issue 35 item 1, acceptance review) ------------------------------------------------------

HELPER = types.ModuleType("train_utils")  # another module of the program, executing the definitions it is given
exec(compile("def run(fd):\n    return fd.execute([1.0, 2.0])\n", "train_utils.py", "exec"), HELPER.__dict__)


@pytest.fixture
def frontend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pytest.importorskip("torch")  # the direct adapter rebuilds definitions from Python that imports torch
    reset_nvscope()
    module = load_frontend(monkeypatch, "nvfuser_direct")
    assert nvscope.nvfuser.install()
    yield module
    reset_nvscope()


def define(frontend: Any, *ops: str) -> Any:
    with frontend.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=frontend.DataType.Float)
        for op in ops:
            getattr(fd.ops, op)(0)
    return fd


def run_here(fd: Any) -> Any:
    return fd.execute([1.0, 2.0])


@pytest.mark.parametrize("first", [run_here, HELPER.run])
def test_a_direct_definition_has_one_id_whichever_module_executes_it_first(frontend: Any, first: Any) -> None:
    """The review's case: a definition executed by the script and by a helper module; the listing saw the script's
    call first, a profile of the step the helper's. Its id is its definition's digest alone; where it first executed
    is its ``function``."""
    fd = define(frontend, "linear", "add")
    with audit() as log:
        first(fd)
        (HELPER.run if first is run_here else run_here)(fd)
    (info,) = log.fusions()
    assert info.site is None and info.key is not None and info.id == f"call/FusionDefinition@{info.key}"
    assert info.function == ("test_fusion_ids:run_here" if first is run_here else "train_utils:run")
    # A fresh run of the program: the same definition, made anew, executed the other way first (the old one gone:
    # the double's record of executions holds the definitions).
    nvscope.uninstall()
    nvscope.nvfuser.install()
    del fd
    frontend.EXECUTIONS.clear()
    fd = define(frontend, "linear", "add")
    with audit() as again, nv_options(enable=SFC, fusions=info.id):
        (HELPER.run if first is run_here else run_here)(fd)
    assert [r.fusion for r in again.records] == [info.id] and list(frontend.EXECUTIONS[-1].enable) == SFC


def test_equal_direct_definitions_share_one_id_and_a_subclass_keeps_its_class(frontend: Any) -> None:
    """Twins (equal definitions, both alive) compute the same thing: one fusion, one id, whichever runs first."""
    a, b = define(frontend, "linear"), define(frontend, "linear")

    class Solver(frontend.FusionDefinition):  # type: ignore[misc,name-defined]
        pass

    with Solver() as c:
        c.define_tensor(shape=[2], dtype=frontend.DataType.Float)
        c.ops.linear(0)
    with audit() as log:
        run_here(b)
        HELPER.run(a)
        run_here(c)
    digest = log.records[0].info.key
    test = "test_equal_direct_definitions_share_one_id_and_a_subclass_keeps_its_class"
    solver = f"{HERE}:{test}.<locals>.Solver"
    assert [r.fusion for r in log.records] == [f"call/FusionDefinition@{digest}", f"call/FusionDefinition@{digest}",
                                               f"call/Solver@{solver}:{digest}"]
    since = len(frontend.EXECUTIONS)
    with nv_options(enable=SFC, fusions=log.records[0].fusion):  # the id reaches both twins
        run_here(a)
        run_here(b)
    assert [list(e.enable) for e in frontend.EXECUTIONS[since:]] == [SFC, SFC]


def test_a_step_that_builds_its_definitions_at_every_call_keeps_their_ids(frontend: Any) -> None:
    """A definition built anew at every call is the same fusion each time: its id never grows a number, so the id
    a listing printed selects it in every later call, alive or not (rescue's and bisect's probes depend on it)."""
    def step() -> Any:
        return run_here(define(frontend, "linear")), run_here(define(frontend, "add"))

    ids = []
    for _ in range(4):
        with audit() as log:
            step()
        ids.append([r.fusion for r in log.records])
    assert ids[0] == ids[1] == ids[2] == ids[3] and len(set(ids[0])) == 2 and "#" not in "".join(ids[0])
    since = len(frontend.EXECUTIONS)
    with nv_options(enable=SFC, fusions=ids[0][1]):
        step()
    assert [list(e.enable) for e in frontend.EXECUTIONS[since:]] == [[], SFC]


def test_one_function_jitted_at_every_call_keeps_its_ids(double: ThunderDouble) -> None:
    """Thunder: the same function jitted anew at every step (fusions equal in name, inputs and ops): one id each,
    never numbered; a different fusion under the same name is numbered (`test_one_function_jitted_twice_...`)."""
    ids = []
    for _ in range(3):
        with audit() as log:
            jitted_encode(double.make_wrapper("nvFusion0"))(t())
        ids.append([r.fusion for r in log.records])
    assert ids == [[ENCODE]] * 3


def test_twins_after_uninstall_share_their_id(frontend: Any) -> None:
    """``a`` listed, uninstall and install, then its twin ``b`` seen first: both get the id ``a`` was listed with,
    and a selector of it reaches both."""
    a, b = define(frontend, "linear"), define(frontend, "linear")
    with audit() as log:
        run_here(a)
    (listed,) = [r.fusion for r in log.records]
    nvscope.uninstall()
    nvscope.nvfuser.install()
    with audit() as log:
        run_here(b)
        run_here(a)
    assert [r.fusion for r in log.records] == [listed, listed]


# --- a backward whose forward ran before nvscope was installed (issue 35 item 1, acceptance review) ----------------

def test_a_backward_scoped_alone_after_an_uninstalled_forward_says_why_its_selector_misses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nvscope installs itself at the first scope: a forward run before it leaves its backward nothing that names the
    jitted function (Thunder's ctx holds the backward trace's own function), so the listed id cannot select it. A
    NoEffectWarning says so and how to avoid it; with nvscope installed first, the same id selects it."""
    torch = pytest.importorskip("torch")
    reset_nvscope()
    double = ThunderDouble(monkeypatch)
    try:
        def program() -> tuple[Any, Any]:
            model, _, _ = double.make_model()
            return jit(model), torch.ones(3, requires_grad=True)

        step, x = program()
        listed = nvscope.fusions(lambda: step(x).sum().backward())[1].id
        assert listed.startswith("backward/nvFusion1@thunder_double:")
        nvscope.uninstall()
        step, x = program()
        y = step(x)  # nvscope not installed yet
        since = len(double.executions)
        with pytest.warns(nvscope.NoEffectWarning) as said, nv_options(enable=SFC, fusions=listed):
            y.sum().backward()
        # Why, and the fix; then the scope's own warning (its selector matched none of the fusions that ran).
        assert "forward ran before nvscope was installed" in str(said[0].message)
        assert "nvscope.install()" in str(said[0].message) and "matched none" in str(said[1].message)
        assert [list(e.enable or ()) for e in double.executions[since:]] == [[]]
        nvscope.uninstall()  # a fresh run that follows the advice: nvscope installed before the first step
        step, x = program()
        nvscope.install()
        y = step(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with nv_options(enable=SFC, fusions=listed):
                y.sum().backward()
        assert list(double.executions[-1].enable) == SFC
    finally:
        reset_nvscope()


@pytest.mark.parametrize(("glob", "hint"), [
    ("forwad/*", "; did you mean 'forward/*'?"),
    ("Backward/nvFusion0", "; did you mean 'backward/nvFusion0'?"),
    ("xyz/*", ""),
])
def test_a_glob_whose_phase_matches_no_phase_is_refused(glob: str, hint: str) -> None:
    """A phase typo selected no fusion, silently: the scope's options then applied nowhere."""
    with nv_options(enable=["fast_math"]):
        with pytest.raises(ValueError) as refused:
            nv_options(enable=["fuse_matmul"], fusions=[glob])
        assert nvscope.current_options() == OptionSet(enable=["fast_math"])  # the active scope unchanged
    message = str(refused.value)
    assert "\n" not in message and message.endswith(f"matches none{hint}")
    assert message.startswith(f"fusions= got {glob!r}, but a fusion id begins with its phase, one of 'forward', "
                              "'backward', 'call'")


@pytest.mark.parametrize("glob", ["forward/*", "*/nvFusion0", "[fb]*/nvFusion0", "b*/x", "call/*", "*"])
def test_a_glob_whose_phase_part_matches_a_phase_is_taken(glob: str) -> None:
    nv_options(enable=["fuse_matmul"], fusions=[glob])
