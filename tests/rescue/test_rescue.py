"""`nvscope.rescue` on the Thunder double: fusions that go wrong under nvFuser's defaults (the frontend double's
``fails:`` marks) in process, and in child processes (faults, the environment's options, compute-sanitizer)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rescue_probes import add_to, calls, chain, counting_program, fake_sanitizer, late_thunder_program, reset, starts
from thunder_double import ThunderDouble, chain_program

import nvscope
import nvscope.thunder
from nvscope import OptionSet
from nvscope._rescue._report import Failure, FusionRescue


def test_a_healthy_step_has_nothing_to_rescue(installed: ThunderDouble) -> None:
    result = nvscope.rescue(chain(installed, {}), reference=lambda: 16.0, progress=False)
    assert result.healthy and result.rescued and result.exit_code() == 0
    assert "nothing to rescue" in result.report() and result.line().startswith("# nothing to rescue")
    assert result.fusions == tuple(f"forward/nvFusion{i}" for i in range(4))
    # Thunder's own path: no fusion ran under options.
    assert all(not e.enable and not e.disable for e in installed.executions)


def test_the_diagnosis_sees_thunders_own_path_inside_a_sharing_scope(installed: ThunderDouble) -> None:
    """Issue 38: rescue must see the defaults as the user's program runs them; sharing the defaults is another path
    (nvscope's partition). Inside ``share=True``, the healthy step still runs Thunder's own fusions, each compiling."""
    with nvscope.nv_options(share=True):
        result = nvscope.rescue(chain(installed, {}), reference=lambda: 16.0, progress=False)
    assert result.healthy and result.fusions == tuple(f"forward/nvFusion{i}" for i in range(4))
    assert len(installed.fe.COMPILES) == 4  # one per fusion, as Thunder compiles them: nothing shared


def test_a_raising_fusion_gets_the_escape_hatch_and_the_rest_keep_their_defaults(installed: ThunderDouble) -> None:
    step = chain(installed, {2: "raise::-resize_scheduler"})
    with pytest.raises(RuntimeError, match="sync_information"):
        step()  # it does fail under the defaults
    result = nvscope.rescue(step, reference=lambda: 16.0, progress=False)
    (rescued,) = result.rescues
    assert rescued.fusion == "forward/nvFusion2" and rescued.failure.kind == "raise"
    assert rescued.failure.location == "csrc/device_lower/analysis/sync_information.cpp:504"
    assert rescued.cure == OptionSet(disable=["resize_scheduler"])
    assert rescued.attempts[0].options == rescued.cure  # the first escape hatch its ops allow
    assert result.proved is True and result.exit_code() == 0
    assert result.line() == "nv_options(disable=['resize_scheduler'], fusions=['forward/nvFusion2'])"
    assert result.decorator() == "@with_nv_options(disable=['resize_scheduler'], fusions=['forward/nvFusion2'])"
    assert nvscope.current_options() == OptionSet()
    with nvscope.nv_options(disable=["resize_scheduler"], fusions=["forward/nvFusion2"]):
        assert step() == 16.0
    assert nvscope.RescueResult.from_json(result.to_json()) == result


def test_two_failing_fusions_are_found_one_after_the_other(installed: ThunderDouble) -> None:
    step = chain(installed, {0: "raise::-resize_scheduler", 3: "raise::-infer_contiguity|fast_math"})
    result = nvscope.rescue(step, progress=False)
    assert [(r.fusion, r.cure) for r in result.rescues] == [
        ("forward/nvFusion0", OptionSet(disable=["resize_scheduler"])),
        ("forward/nvFusion3", OptionSet(disable=["infer_contiguity"]))]
    assert result.line().startswith("with nv_options(") and result.rescued


def test_no_cure_says_so_writes_the_repro_and_exits_1(installed: ThunderDouble) -> None:
    step = chain(installed, {1: "raise::"}, eager={1: "unsupported"})  # no PyTorch route either
    result = nvscope.rescue(step, candidates=["-resize_scheduler", "fast_math"], progress=False)
    (rescued,) = result.rescues
    assert rescued.cure is None and len(rescued.attempts) == 2 and not result.rescued and not rescued.route
    assert result.exit_code() == 1 and "NO CURE" in result.report()
    assert "on_error='fallback' is no rescue" in result.report()
    assert rescued.repro_scripts and Path(rescued.repro_scripts[0]).is_file()
    assert "fails:raise::" in rescued.issue and "Also fails with: -resize_scheduler, fast_math" in rescued.issue


def test_a_set_of_two_when_no_single_option_cures(installed: ThunderDouble) -> None:
    step = chain(installed, {1: "raise::fast_math&-resize_scheduler"}, eager={1: "unsupported"})
    result = nvscope.rescue(step, candidates=["-resize_scheduler", "fast_math", "fast_math,-resize_scheduler"],
                            progress=False)
    assert result.rescues[0].cure == OptionSet(["fast_math"], ["resize_scheduler"])
    one = nvscope.rescue(step, candidates=["-resize_scheduler", "fast_math", "fast_math,-resize_scheduler"],
                         max_set_size=1, progress=False)
    assert one.rescues[0].cure is None and one.exit_code() == 1


def test_nvfusers_validate_names_the_fusion_with_wrong_numbers_and_the_search_cures_it(
        installed: ThunderDouble) -> None:
    # nvFusion1 computes 3 * x under the defaults: its validate (outputs against ATen's) fails; -resize_scheduler cures
    step = chain(installed, {1: "wrong::-resize_scheduler"})
    result = nvscope.rescue(step, reference=lambda: 16.0, candidates=["-infer_contiguity", "-resize_scheduler"],
                            progress=False)
    (rescued,) = result.rescues
    assert rescued.fusion == "forward/nvFusion1" and rescued.failure.kind == "numbers"
    assert "validate" in rescued.failure.line and result.unattributed is None
    assert [(a.options, a.cured) for a in rescued.attempts][:2] == [
        (OptionSet(disable=["infer_contiguity"]), False), (OptionSet(disable=["resize_scheduler"]), True)]
    assert result.proved is True and result.exit_code() == 0 and "validate" in result.checks
    assert "wrong numbers" in result.report()
    # its repro script: written while the process was alive, nvFuser's own, the defaults' definition and inputs
    (script,) = rescued.repro_scripts
    assert "fails:wrong::-resize_scheduler" in Path(script).read_text() and script in rescued.issue
    # it runs the fusion through nvFuser's validate, so that running it fails where the numbers are wrong
    assert Path(script).read_text().rstrip().splitlines()[-1] == "fd.validate(inputs)"
    with nvscope.nv_options(disable=["resize_scheduler"], fusions=["forward/nvFusion1"]):
        assert step() == 16.0


def test_without_validate_wrong_numbers_are_the_whole_steps_and_the_report_says_why(
        installed: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(installed.fe.FusionDefinition, "validate")  # a frontend before nvFuser's validate
    result = nvscope.rescue(chain(installed, {1: "wrong::-resize_scheduler"}), reference=lambda: 16.0, progress=False)
    assert result.unattributed is not None and result.unattributed.kind == "numbers" and not result.rescues
    assert result.exit_code() == 1 and "not attributed to a fusion" in result.report()
    assert "has no FusionDefinition.validate: wrong numbers are checked for the whole step only" in result.report()
    # validate=False: the same, without the note
    off = nvscope.rescue(chain(installed, {1: "wrong::-resize_scheduler"}), reference=lambda: 16.0, validate=False,
                         progress=False)
    assert off.unattributed is not None and "validate" not in off.checks and "FusionDefinition.validate" not in str(off)


def test_a_healthy_step_runs_once(installed: ThunderDouble) -> None:
    step = chain(installed, {})
    nvscope.rescue(step, reference=lambda: 16.0, progress=False)
    # the diagnosis is the only run: four fusions, each executed once (validate's execute is that execution)
    assert len(installed.executions) == 4


@pytest.mark.parametrize("bad, message", [
    ({"max_set_size": 0}, "max_set_size"), ({"jobs": 0}, "jobs"), ({"budget_s": 0}, "budget_s"),
    ({"sanitize": True}, "sanitize="), ({"candidates": ["nope_option"]}, "nope_option"),
    # Issue 35 item 6: Python's plain "unexpected keyword argument", where the other tools name the closest
    ({"sanitze": True}, r"rescue\(\) got an unexpected keyword argument 'sanitze'; did you mean 'sanitize'\? "
                        r"\(rescue\(\) takes reference, max_set_size, "),
])
def test_bad_arguments_are_refused_before_anything_runs(installed: ThunderDouble, bad: dict[str, object],
                                                        message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        nvscope.rescue(chain(installed, {}), progress=False, **bad)  # type: ignore[arg-type]
    assert installed.executions == []


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return chain_program(tmp_path, monkeypatch, 4)


@pytest.mark.parametrize("how", ["abort", "segv"])
def test_a_fault_that_kills_the_process_is_named_and_cured_in_children(script: Path, how: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILS", f"2={how}::-infer_contiguity")
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path / "repro"))
    result = nvscope.rescue(f"{script}:step", reference="eager", jobs=2,
                            candidates=["-resize_scheduler", "-infer_contiguity"], progress=False)
    (rescued,) = result.rescues
    assert rescued.fusion == "forward/nvFusion2" and rescued.failure.kind == "fault"
    assert ("SIGABRT" if how == "abort" else "SIGSEGV") in rescued.failure.line
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.proved and result.exit_code() == 0
    # The process died in the fusion: its repro was written before it ran, and the report carries the rest
    (script_path,) = rescued.repro_scripts
    repro = Path(script_path).read_text()
    assert "fails:" + f"{how}::-infer_contiguity" in repro and "fd.execute(inputs)" in repro  # definition, inputs
    assert "    4.0,\n" in repro.split("inputs = [")[1]  # the inputs it ran with (the double's are numbers)
    for text in (repro, rescued.issue):
        assert "Fails under: the defaults" in text and "Passes with: -infer_contiguity" in text
        assert "Versions: " in text
    # only the failing fusion's script is kept
    assert sorted(p.name for p in Path(script_path).parent.glob("rescue-*.py")) == [Path(script_path).name]


def test_a_program_target_and_an_option_of_the_environment(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Linear-GELU-Linear case: fails only with NVFUSER_ENABLE=fast_math set for the process; -resize_scheduler
    # cures it anyway.
    monkeypatch.setenv("FAILS", "1=raise:fast_math:-resize_scheduler")
    monkeypatch.setenv("NVFUSER_ENABLE", "fast_math")
    result = nvscope.rescue(str(script), candidates=["-infer_contiguity", "-resize_scheduler"], progress=False)
    (rescued,) = result.rescues
    assert rescued.env_cause == ("NVFUSER_ENABLE",) and rescued.cure == OptionSet(disable=["resize_scheduler"])
    assert "change that variable" in result.report() and result.exit_code() == 0
    assert json.loads(result.to_json())["rescues"][0]["failure"]["location"].endswith("sync_information.cpp:504")




def test_sanitize_names_the_fusion_that_writes_out_of_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = counting_program(tmp_path, monkeypatch)
    fake_sanitizer(tmp_path, monkeypatch)
    monkeypatch.setenv("FAILS", "3=oob::-infer_contiguity")
    result = nvscope.rescue(f"{script}:step", sanitize=True, candidates=["-resize_scheduler", "-infer_contiguity"],
                            progress=False)
    (rescued,) = result.rescues
    assert rescued.fusion == "forward/nvFusion3" and rescued.failure.kind == "memory"
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.proved
    assert "memcheck" in result.checks
    ran = calls(tmp_path)  # a sanitizer's probe is one process: no workers
    assert len(ran) == len(starts(tmp_path)) == len({c.pid for c in ran}) > len(rescued.attempts)


# Nine sets the fusion's ops allow; only the last cures.
NINE = ["-resize_scheduler", "fast_math", "id_model", "-parallel_compile", "fast_math,id_model",
        "-resize_scheduler,fast_math", "-resize_scheduler,id_model", "-parallel_compile,id_model", "-infer_contiguity"]


def test_the_search_runs_in_long_lived_workers_with_the_verdicts_of_fresh_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = counting_program(tmp_path, monkeypatch)
    # nvFusion2 fails only with NVFUSER_ENABLE=fast_math set (a probe without it says so); -infer_contiguity cures it
    monkeypatch.setenv("FAILS", "2=raise:fast_math:-infer_contiguity")
    monkeypatch.setenv("NVFUSER_ENABLE", "fast_math")

    def rescued(**how: Any) -> tuple[nvscope.RescueResult, Any]:
        reset(tmp_path)
        result = nvscope.rescue(f"{script}:step", reference="eager", jobs=2, candidates=NINE, progress=False, **how)
        return result, calls(tmp_path)

    def verdicts(result: nvscope.RescueResult) -> Any:
        return result.proved, [(r.fusion, r.cure, r.env_cause, [(a.options, a.cured, a.detail) for a in r.attempts])
                               for r in result.rescues]

    pooled, ran = rescued()
    fresh, ran_fresh = rescued(fresh_probes=True)
    assert verdicts(pooled) == verdicts(fresh)
    (rescue_,) = pooled.rescues
    assert rescue_.cure == OptionSet(disable=["infer_contiguity"]) and rescue_.env_cause == ("NVFUSER_ENABLE",)
    assert pooled.proved and pooled.exit_code() == 0
    assert len([a for a in rescue_.attempts if not a.detail.startswith("confirm")]) == len(NINE)
    # fresh_probes: a process per call of the step
    assert len({c.pid for c in ran_fresh}) == len(ran_fresh) == len(starts(tmp_path)) > len(NINE)
    # workers: the nine search probes ran in two processes (--jobs 2), far fewer processes in all
    per_pid = Counter(c.pid for c in ran)
    workers = [pid for pid, n in per_pid.items() if n > 1]
    assert len(workers) == 2 and sum(per_pid[w] for w in workers) == len(NINE)
    assert len(set(per_pid)) == len(ran_fresh) - len(NINE) + 2
    # the diagnosis, the probe without NVFUSER_ENABLE, the confirmation and the proof's runs: each a fresh process
    assert [per_pid[c.pid] for c in ran[:2] + ran[-3:]] == [1] * 5
    # within a worker, a probe compiles its target under the candidate only: the other fusions keep what the
    # worker compiled (its first probe reaches nvFusion3 too: the target, not cured, ran in PyTorch)
    deltas = []
    for worker in workers:
        compiled = [c.compiled or 0 for c in ran if c.pid == worker]  # each call ended (None: it did not)
        assert compiled[0] == 4 and 0 not in compiled  # nvFusion0, nvFusion1, the target and nvFusion3
        deltas += [b - a for a, b in itertools.pairwise(compiled)]
    assert sorted(deltas) == [1] * (len(NINE) - 2)


@pytest.mark.parametrize("how", ["abort", "cuda"])
def test_a_probe_that_kills_its_worker_or_hits_a_cuda_error_is_reported_and_the_next_runs_in_a_new_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    script = counting_program(tmp_path, monkeypatch)
    monkeypatch.setenv("FAILS", f"2={'abort' if how == 'abort' else 'raise'}::-infer_contiguity")
    if how == "cuda":  # the probe's process lives on, its CUDA context would not
        monkeypatch.setenv("CUDA_RAISE", "1")
    result = nvscope.rescue(f"{script}:step", reference="eager", candidates=["-resize_scheduler", "fast_math",
                                                                            "-infer_contiguity"], progress=False)
    (rescued,) = result.rescues
    tried = [(a.options.label(), a.cured) for a in rescued.attempts]
    assert tried == [("-resize_scheduler", False), ("+fast_math", False), ("-infer_contiguity", True),
                     ("-infer_contiguity", True)]
    said = "killed by SIGABRT: CUDA error" if how == "abort" else "RuntimeError: CUDA error: an illegal memory"
    assert all(said in a.detail for a in rescued.attempts[:2]) and said in rescued.failure.line
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.proved
    # diagnosis, its check (one more run of the defaults), three search probes, the confirmation, the proof's two
    # runs: eight processes, none reused
    ran = calls(tmp_path)
    assert len(ran) == len({c.pid for c in ran}) == len(starts(tmp_path)) == 8
    assert [c.compiled is None for c in ran] == [how == "abort"] * 4 + [False] * 4


def test_ctrl_c_during_a_workers_probe_leaves_no_process_behind(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    script = counting_program(tmp_path, monkeypatch)
    monkeypatch.setenv("FAILS", "2=raise::-infer_contiguity")
    monkeypatch.setenv("HANG_AT", "2")  # a worker's second probe hangs (a fresh process calls the step once)
    main, over = threading.get_ident(), threading.Event()

    def press_ctrl_c() -> None:
        while not (tmp_path / "hanging").exists():
            if over.wait(0.05):
                return
        signal.pthread_kill(main, signal.SIGINT)

    pressing = threading.Thread(target=press_ctrl_c, daemon=True)
    pressing.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            nvscope.rescue(f"{script}:step", candidates=["-resize_scheduler", "fast_math", "-infer_contiguity"],
                           timeout=120, progress=False)
    finally:
        over.set()
        pressing.join()
    pids = starts(tmp_path)
    assert len(pids) == 3  # the diagnosis, the route's proof (the check of the defaults too) and the worker
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_targets_reference_is_compared_with_the_tolerance_given(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    script = counting_program(tmp_path, monkeypatch)
    monkeypatch.setenv("EAGER_OFF", "1e-3")  # the reference differs from the step by 0.1 %
    tight = nvscope.rescue(f"{script}:step", reference="eager", progress=False)
    assert tight.unattributed is not None and tight.unattributed.kind == "numbers" and tight.exit_code() == 1
    loose = nvscope.rescue(f"{script}:step", reference="eager", tolerance=1e-2, progress=False)
    assert loose.healthy and loose.exit_code() == 0


@pytest.mark.parametrize("target", ["late.py", "late.py:step"])
def test_a_target_that_imports_thunder_late_and_never_installs_nvscope_is_rescued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """The program (or the step) imports Thunder after the rescue's observation began and never calls
    nvscope.thunder.install(): the adapter installs at the import, as under `nvscope run`, and the fusions are seen."""
    script = late_thunder_program(tmp_path, monkeypatch)
    monkeypatch.setenv("FAILS", "1=raise::-resize_scheduler")
    result = nvscope.rescue(str(script.parent / target), candidates=["-infer_contiguity", "-resize_scheduler"],
                            progress=False)
    assert result.fusions == ("forward/nvFusion0", "forward/nvFusion1", "forward/nvFusion2")
    (rescued,) = result.rescues
    assert rescued.fusion == "forward/nvFusion1" and rescued.cure == OptionSet(disable=["resize_scheduler"])
    assert result.proved and result.exit_code() == 0


@pytest.mark.parametrize("target, how, error, message", [
    ("{script}:nosuch", {}, ValueError, "train.py has no function 'nosuch'"),
    ("{script}:notcallable", {}, TypeError, "train.py:notcallable is a int, not a function"),
    ("{script}:step", {"reference": "eagr"}, ValueError, "the reference: .*train.py has no function 'eagr'"),
    ("{script}:step", {"reference": "notcallable"}, TypeError, "the reference: .*train.py:notcallable is a int"),
    ("{syntax}:step", {}, ValueError, r"bad.py does not compile: .*\(line 1\)"),
    ("{syntax}", {}, ValueError, r"bad.py does not compile: "),
    ("no_such_module_here:step", {"module": True}, ValueError,
     "cannot import module 'no_such_module_here': no module named 'no_such_module_here'"),
    ("no_such_module_here", {"module": True}, ValueError, "cannot import module 'no_such_module_here'"),
])
def test_a_target_that_cannot_run_as_given_is_one_clear_error_and_leaves_nothing_behind(
        script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, how: dict[str, Any],
        error: type[Exception], message: str) -> None:
    add_to(script, "notcallable = 3")
    syntax = tmp_path / "bad.py"
    syntax.write_text("def step(:\n    pass\n")
    monkeypatch.setenv("FAILS", "1=raise::-resize_scheduler")  # a fusion that would fail: nothing may blame it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(error, match=message):
        nvscope.rescue(target.format(script=script, syntax=syntax), progress=False, **how)
    assert os.listdir(tmp_path / "tmp") == []  # no directory for repro scripts left, empty or not


def test_a_healthy_target_leaves_no_empty_directory(script: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert nvscope.rescue(f"{script}:step", reference="eager", progress=False).healthy
    assert os.listdir(tmp_path / "tmp") == []


def test_a_reference_that_raises_is_reported_as_such_and_blames_no_fusion(
        installed: ThunderDouble, script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> float:
        raise ZeroDivisionError("division by zero")

    in_process = nvscope.rescue(chain(installed, {}), reference=broken, progress=False)
    add_to(script, "def broken():\n    raise ZeroDivisionError('division by zero')")
    monkeypatch.setenv("FAILS", "3=raise::-resize_scheduler")  # the last fusion: the one a dead child was blamed on
    target = nvscope.rescue(f"{script}:step", reference="broken", progress=False)
    for result in (in_process, target):
        assert result.unattributed == Failure(None, "reference", "ZeroDivisionError: division by zero")
        assert result.exit_code() == 1 and not result.rescued
        lines = result.report().splitlines()
        assert "not attributed to a fusion: the reference raised: ZeroDivisionError: division by zero" in lines
        assert any(line.startswith("NOT rescued: the reference raised: fix it; nothing to search") for line in lines)
        assert "some fusion has no cure" not in result.report()
        assert result.rescues == ()  # no search: without its reference no probe can be judged


def test_a_step_through_which_no_fusion_runs_is_not_healthy(installed: ThunderDouble,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nvscope._tools._common.machine_cause", lambda: None)  # a machine that runs fusions
    result = nvscope.rescue(lambda: 1.0, progress=False)
    assert result.no_fusion and not result.healthy and not result.rescued and result.exit_code() == 1
    assert "no nvFuser fusion ran: is the step jitted by thunder.jit with nvFuser (is Thunder installed)?" in \
        result.report()
    assert "nothing to rescue" not in result.report() and json.loads(result.to_json())["no_fusion"]
    assert nvscope.RescueResult.from_json(result.to_json()) == result


def test_a_step_that_fails_outside_any_fusion_says_so(script: Path) -> None:
    add_to(script, "def fails_after():\n    step()\n    raise ValueError('a bug of the step, not nvFuser')")
    result = nvscope.rescue(f"{script}:fails_after", progress=False)
    assert result.unattributed is not None and result.unattributed.kind == "step" and result.exit_code() == 1
    assert result.report().splitlines()[-2].startswith("NOT rescued: the step fails outside any fusion; nothing to "
                                                       "search;")


def test_a_cure_whose_final_run_fails_is_not_called_a_missing_cure() -> None:
    cure = OptionSet(disable=["resize_scheduler"])
    failure = Failure("forward/nvFusion1", "raise", "RuntimeError: boom")
    result = nvscope.RescueResult(("forward/nvFusion1",), (FusionRescue("forward/nvFusion1", failure, cure),),
                                  proved=False, proof="1 of 2 runs failed: RuntimeError: boom")
    assert result.exit_code() == 1
    assert "NOT rescued: every failing fusion has a cure, but the final run with all of them failed" in result.report()
    assert "some fusion has no cure" not in result.report()


def test_the_versions_are_the_ones_the_step_ran_with(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child that loaded the step says them (its path may hold another Thunder than the rescue's process)."""
    add_to(script, "sys.modules['thunder'].__version__ = '9.9.child'")
    monkeypatch.setenv("FAILS", "1=raise::")
    result = nvscope.rescue(f"{script}:step", candidates=["-resize_scheduler"], progress=False)
    assert result.versions["Thunder"] == "9.9.child"
    (rescued,) = result.rescues
    assert "Thunder 9.9.child" in rescued.issue
    assert "Thunder 9.9.child" in Path(rescued.repro_scripts[0]).read_text()
