"""How sure `nvscope.rescue` is of a cure: a failure that does not happen at every run (flaky) gets its rate measured
and a cure must pass as many runs as prove it at ``alpha`` over every candidate, else the report says it is not
proven; a deterministic failure costs one run of the defaults more. Also: a "cure" that turns an exception into
wrong numbers for the whole step cures nothing; a cured fusion that fails again is named; SIGTERM ends a rescue with
no probe left running. The fusion's failures are scripted per execution (no randomness)."""

from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rescue_probes import chain as chained
from rescue_probes import counting_program, fake_sanitizer, starts
from thunder_double import ThunderDouble

import nvscope
from nvscope import OptionSet
from nvscope._rescue._search import rate_lower_bound, runs_needed

ROOT = Path(__file__).resolve().parents[2]


def chain(double: ThunderDouble, n: int = 3, eager: str = "double") -> Callable[[], float]:
    """nvFusion1 carries a ``fails:`` mark whose verdicts the test scripts (`scripted`); the others are healthy.
    ``eager``: its region's kind ("unsupported": it cannot run in PyTorch, so no route cures it)."""
    return chained(double, {1: "scripted::"}, n, {1: eager})


def scripted(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch, defaults: Iterator[str | None],
             cured_by: str | None = None, wrong_with: str | None = None) -> list[tuple[frozenset[str], str | None]]:
    """nvFusion1's verdict at each execution: under ``cured_by`` (a disable option) none; under ``wrong_with`` wrong
    numbers; else the next of ``defaults`` (whatever other options it runs with). Returns the log: (options, how)."""
    log: list[tuple[frozenset[str], str | None]] = []

    def _fails(self: Any, enable: Any, disable: Any) -> str | None:
        if not any(str(s) == "fails:scripted::" for s in self.scalars()):
            return None
        on = frozenset([*(enable or ()), *(f"-{n}" for n in disable or ())])
        how = None if cured_by in on else "wrong" if wrong_with in on else next(defaults)
        log.append((on, how))
        return how

    monkeypatch.setattr(double.fe.FusionDefinition, "_fails", _fails)
    return log


def cycle(*verdicts: str | None) -> Iterator[str | None]:
    while True:
        yield from verdicts


def tail(failures: int, runs: int, p: float) -> float:
    """P(at least ``failures`` of ``runs`` fail | rate p)."""
    return sum(math.comb(runs, i) * p ** i * (1 - p) ** (runs - i) for i in range(failures, runs + 1))


@settings(max_examples=40, deadline=None)
@given(runs=st.integers(1, 30), data=st.data(), level=st.sampled_from([0.005, 0.025, 0.05]))
def test_the_rate_bound_and_the_runs_needed(runs: int, data: st.DataObject, level: float) -> None:
    failures = data.draw(st.integers(0, runs))
    p_low = rate_lower_bound(failures, runs, level)
    if failures:  # Clopper-Pearson: the rate at which seeing as many failures or more has probability `level`
        assert tail(failures, runs, max(p_low - 1e-6, 0)) <= level <= tail(failures, runs, min(p_low + 1e-6, 1))
    m = data.draw(st.integers(1, 500))
    needed = runs_needed(p_low, level / m)
    if failures == 0:
        assert p_low == 0 and needed is None
    else:
        assert needed is not None and (1 - p_low) ** needed <= level / m < (1 - p_low) ** (needed - 1)


def test_a_deterministic_failure_costs_one_run_of_the_defaults_more(installed: ThunderDouble,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = scripted(installed, monkeypatch, cycle("raise"), cured_by="-infer_contiguity")
    result = nvscope.rescue(chain(installed), candidates=["-resize_scheduler", "-infer_contiguity"], progress=False)
    (rescued,) = result.rescues
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.rescued and result.proved
    assert [on for on, _ in log[:3]] == [frozenset()] * 2 + [frozenset({"-resize_scheduler"})]
    assert "cured by -infer_contiguity (confirmed;" in result.report()


def test_a_flaky_failure_no_option_cures_is_never_reported_proved(installed: ThunderDouble,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = scripted(installed, monkeypatch, cycle("raise", None))  # every other execution fails, whatever the options
    result = nvscope.rescue(chain(installed, eager="unsupported"), max_set_size=1, progress=False)
    assert [on for on, _ in log[:6]] == [frozenset()] * 6  # the diagnosis, then 5 runs (repeat=5) measure the rate
    assert not result.rescued and result.exit_code() == 1 and result.proved is not True
    report = result.report()
    assert "PROVED" not in report and "flaky under the defaults: it failed again in 2 of 5 runs" in report
    # Each candidate's confirmation meets a failing run: no cure, and nothing said proven.
    assert result.rescues[0].cure is None and "NO CURE" in report


def test_a_set_that_cures_once_then_fails_has_the_failure_measured(installed: ThunderDouble,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The diagnosis and its check fail (deterministic, so far); -resize_scheduler passes its try and fails its
    # confirmation, which a deterministic failure does not do: 5 more runs of the defaults find it flaky.
    log = scripted(installed, monkeypatch, itertools.chain(["raise", "raise"], cycle(None, "raise")))
    result = nvscope.rescue(chain(installed, eager="unsupported"), candidates=["-resize_scheduler"], progress=False)
    (rescued,) = result.rescues
    assert [on for on, _ in log[2:9]] == [frozenset({"-resize_scheduler"})] * 2 + [frozenset()] * 5
    assert rescued.cure is None and not result.rescued
    assert "forward/nvFusion1 is flaky under the defaults: it failed again in 3 of 6 runs" in result.report()


def test_a_flaky_failures_cure_is_proven_by_as_many_runs_as_alpha_asks(installed: ThunderDouble,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The defaults fail in 5 of 6 runs: the diagnosis, then (flaky) 4 of 5; -infer_contiguity always cures.
    scripted(installed, monkeypatch, iter(["raise", None, *["raise"] * 100]), cured_by="-infer_contiguity")
    candidates = ["-resize_scheduler", "-infer_contiguity"]
    result = nvscope.rescue(chain(installed), candidates=candidates, alpha=0.1, progress=False)
    (rescued,) = result.rescues
    p_low = 0.3426  # tail(4, 5, p_low) == 0.05 (0.1 / 2)
    assert tail(4, 5, p_low - 1e-4) < 0.05 < tail(4, 5, p_low + 1e-4)
    needed = math.ceil(math.log(0.1 / 2 / 2) / math.log(1 - p_low))  # 9: alpha / 2 over 2 candidates
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.rescued and result.exit_code() == 0
    assert sum(a.cured for a in rescued.attempts if a.options == rescued.cure) == needed
    assert rescued.sure.startswith(f"proven at alpha=0.1 over 2 candidates: {needed} clean runs")
    assert f"({rescued.sure};" in result.report()


def test_a_flaky_cure_past_the_runs_it_is_given_is_said_not_proven(installed: ThunderDouble,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The defaults fail in 2 of 6 runs: proving a cure at alpha=0.05 needs more runs than the rescue gives it.
    scripted(installed, monkeypatch, iter(["raise", None, "raise", None, None, None, *["raise"] * 100]),
             cured_by="-infer_contiguity")
    result = nvscope.rescue(chain(installed), candidates=["-infer_contiguity"], progress=False)
    (rescued,) = result.rescues
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and not result.rescued
    assert rescued.sure.startswith("NOT statistically proven: 2 clean runs; flaky under the defaults: it failed "
                                   "again in 1 of 5 runs")
    assert "a proof at alpha=0.05 over 1 candidate needs" in rescued.sure
    assert "NOT proved (forward/nvFusion1: NOT statistically proven" in result.report()


def test_a_cure_that_turns_the_exception_into_wrong_numbers_cures_nothing(installed: ThunderDouble,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(installed.fe.FusionDefinition, "validate")  # only the step's reference sees the numbers
    scripted(installed, monkeypatch, cycle("raise"), cured_by="-infer_contiguity", wrong_with="-resize_scheduler")
    result = nvscope.rescue(chain(installed), reference=lambda: 8.0,
                            candidates=["-resize_scheduler", "-infer_contiguity"], progress=False)
    (rescued,) = result.rescues
    assert [(a.options.label(), a.cured) for a in rescued.attempts][:2] == [("-resize_scheduler", False),
                                                                            ("-infer_contiguity", True)]
    assert "differs from its reference" in rescued.attempts[0].detail
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.rescued


def test_a_cured_fusion_that_fails_again_is_named(installed: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    # Deterministic to the rescue (the diagnosis and its check fail), -resize_scheduler passes its two runs, then
    # the run with the cures so far fails at the same fusion.
    scripted(installed, monkeypatch, iter(["raise", "raise", None, None, "raise", *[None] * 100]))
    result = nvscope.rescue(chain(installed), candidates=["-resize_scheduler"], progress=False)
    (rescued,) = result.rescues
    assert result.unattributed is None and not result.rescued and result.exit_code() == 1
    assert rescued.sure.startswith("it failed again with its cure")
    assert "not attributed" not in result.report()
    assert "forward/nvFusion1: it failed again with its cure" in result.proof




def test_sanitize_repeats_a_clean_first_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = counting_program(tmp_path, monkeypatch)
    fake_sanitizer(tmp_path, monkeypatch, fault_from=3)  # a flaky fault: memcheck sees it from its third run on
    monkeypatch.setenv("FAILS", "3=oob::-infer_contiguity")
    result = nvscope.rescue(f"{script}:step", sanitize=True, repeat=3, candidates=["-infer_contiguity"],
                            progress=False)
    (rescued,) = result.rescues  # the third memcheck run of the defaults saw it
    assert rescued.fusion == "forward/nvFusion3" and rescued.failure.kind == "memory"
    assert rescued.cure == OptionSet(disable=["infer_contiguity"]) and result.rescued


@pytest.mark.parametrize("how", ["SIGTERM to the API", "Ctrl-C to the CLI"])
def test_a_signal_ends_a_rescue_with_no_probe_and_no_script_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 how: str) -> None:
    script = counting_program(tmp_path, monkeypatch)
    monkeypatch.setenv("FAILS", "2=raise::-infer_contiguity")
    monkeypatch.setenv("HANG_AT", "2")  # a worker's second probe hangs
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path / "repro"))
    runner = tmp_path / "run.py"
    runner.write_text(textwrap.dedent(f"""
        import nvscope
        nvscope.rescue({f"{script}:step"!r}, candidates=["-resize_scheduler", "fast_math"], timeout=120,
                       progress=False)
    """))
    command = ([str(runner)] if how.startswith("SIGTERM") else
               ["-m", "nvscope", "rescue", "--quiet", "--timeout", "120", "--candidates=-resize_scheduler",
                "--candidates=fast_math", f"{script}:step"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    rescue = subprocess.Popen([sys.executable, *command], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "hanging").exists() and rescue.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "hanging").exists(), rescue.stderr.read() if rescue.poll() is not None else "no hang"
        rescue.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
        code = rescue.wait(60)
    finally:
        if rescue.poll() is None:
            rescue.kill()
            rescue.wait()
    with rescue.stderr:
        said = rescue.stderr.read()
    if how.startswith("SIGTERM"):
        assert code == -signal.SIGTERM and not said  # ended by the signal, as its sender meant
    else:
        assert code == 130 and said == "nvscope rescue: error: interrupted: no probe is left running\n"
    pids = starts(tmp_path)
    assert len(pids) == 3  # the diagnosis, its check, the worker
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not list((tmp_path / "repro").rglob("rescue-*.py"))  # each fusion's script, written before it ran
