"""A scoped fusion that fails: its exception names the options, and the repro script it points to reproduces.

Against the doubles: a fusion made with ``breaks_with="fuse_matmul"`` fails in the fake nvFuser's execute whenever
``fuse_matmul`` is enabled, with nvFuser's message, as the bf16 Linear-GELU-Linear backward does on the H200
(tests/gpu/test_failures_gpu.py is the real thing). The repro scripts are run as a user would, ``python repro.py`` in
a fresh process without NVFUSER_* variables, with the fake frontend installed there as ``nvfuser_direct``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import thunder_double
from fake_nvfuser_frontend import ASSERT, Tensor
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import OptionSet, nv_options

CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ThunderDouble]:
    reset_nvscope()
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path / "repros"))
    for name in ("NVFUSER_ENABLE", "NVFUSER_DISABLE", "NVSCOPE_REPRO"):
        monkeypatch.delenv(name, raising=False)
    double = ThunderDouble(monkeypatch)
    assert nvscope.thunder.install()
    yield double
    reset_nvscope()


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def fail(wrapper: Any, *args: Any, **scope: Any) -> RuntimeError:
    with nv_options(**(scope or CODEGEN)), pytest.raises(RuntimeError) as raised:
        wrapper(*args)
    assert str(raised.value) == ASSERT  # nvFuser's own error, untouched
    return raised.value


def note_of(error: BaseException) -> str:
    notes = getattr(error, "__notes__", [])
    assert len(notes) == 1, notes
    return str(notes[0])


def repro_command(note: str) -> list[str]:
    """The note's repro command, split into words as a POSIX shell would."""
    line = next(line for line in note.splitlines() if "repro script:" in line)
    return shlex.split(line.split("repro script: ", 1)[1])


def script_path(note: str) -> Path:
    words = repro_command(note)
    assert words[-2] == "python", words
    return Path(words[-1])


def run_fresh(script: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``python script`` in a new interpreter where ``nvfuser_direct`` is the fake frontend and no NVFUSER_* is set."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    shutil.copy(thunder_double.FRONTEND_FILE, site / "nvfuser_direct.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVFUSER_")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60,
                          cwd=tmp_path)


def test_the_error_keeps_its_type_and_names_fusion_phase_and_options(double: ThunderDouble) -> None:
    wrapper = double.make_wrapper(breaks_with="fuse_matmul")
    note = note_of(fail(wrapper, t()))
    assert note.startswith("nvscope: Thunder fusion forward/nvFusion0 failed with nvFuser options "
                           "+fuse_matmul -matmul_expr_eval")
    assert "compile-time: (none); scope: +fuse_matmul -matmul_expr_eval" in note
    assert "for a whole process: NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=matmul_expr_eval" in note
    assert "NVSCOPE_REPRO_DIR" in note and "NVSCOPE_REPRO=0" in note  # how to move or turn off the scripts
    assert script_path(note).is_file()


def test_a_name_with_ops_is_shortened_to_the_fusion_in_the_note_and_the_script_name(double: ThunderDouble) -> None:
    wrapper = double.make_wrapper(name="nvFusion3: (linear, gelu, linear)", breaks_with="fuse_matmul")
    note = note_of(fail(wrapper, t()))
    assert note.startswith("nvscope: Thunder fusion forward/nvFusion3 failed with nvFuser options ")
    assert script_path(note).name.startswith("forward-nvFusion3-")


def test_compile_time_and_scope_options_are_named_apart(double: ThunderDouble) -> None:
    wrapper = double.make_wrapper(enable=["kernel_profile"], breaks_with="fuse_matmul")
    note = note_of(fail(wrapper, t(), enable=["fuse_matmul"]))
    assert "failed with nvFuser options +fuse_matmul +kernel_profile\n" in note
    assert "compile-time: +kernel_profile; scope: +fuse_matmul" in note


def test_the_repro_script_reproduces_in_a_fresh_process(double: ThunderDouble, tmp_path: Path) -> None:
    wrapper = double.make_wrapper(breaks_with="fuse_matmul")
    script = script_path(note_of(fail(wrapper, t(3))))
    text = script.read_text()
    assert "_enable_options=['fuse_matmul'], _disable_options=['matmul_expr_eval']" in text
    assert "Tensor(values=(1.0, 1.0, 1.0), dtype='float32')" in text  # inputs like the failing ones
    done = run_fresh(script, tmp_path)
    assert done.returncode != 0 and ASSERT in done.stderr, done.stdout + done.stderr

    # The control: nvFuser's own script for the same definition (no options) runs fine, so the options reproduce.
    plain = tmp_path / "plain.py"
    plain.write_text(text.replace(", _enable_options=['fuse_matmul'], _disable_options=['matmul_expr_eval']", ""))
    done = run_fresh(plain, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_backward_failure_says_backward_through_autograd(double: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = double.make_model(breaks_with="fuse_matmul")
    x = torch.ones(3, requires_grad=True)
    with nv_options(**CODEGEN):
        y = model(x)  # the forward fusion is fine
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT FAILED") as raised:
        y.sum().backward()  # runs under the forward's options, outside the scope
    note = note_of(raised.value)  # the autograd engine re-raises the very exception, note and all
    assert "Thunder fusion backward/nvFusion1 failed with nvFuser options +fuse_matmul -matmul_expr_eval" in note
    assert nvscope.current_options() == OptionSet()


def test_after_a_failure_the_scope_is_gone_and_the_default_runs(double: ThunderDouble) -> None:
    wrapper = double.make_wrapper(breaks_with="fuse_matmul")
    fail(wrapper, t())
    assert nvscope.current_options() == OptionSet()
    out = wrapper(t())
    assert out[0] == 2 * t() and double.executions[-1].enable == [] and wrapper.last_used is double.executions[-1].fd


def test_one_script_per_failing_definition_and_inputs(double: ThunderDouble, tmp_path: Path) -> None:
    wrapper = double.make_wrapper(breaks_with="fuse_matmul")
    first = script_path(note_of(fail(wrapper, t())))
    again = script_path(note_of(fail(wrapper, t())))
    other = script_path(note_of(fail(wrapper, t(5))))
    assert first == again and other != first
    assert sorted(p.name for p in (tmp_path / "repros").iterdir()) == sorted({first.name, other.name})


def test_nvscope_repro_0_writes_nothing(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    monkeypatch.setenv("NVSCOPE_REPRO", "0")
    note = note_of(fail(double.make_wrapper(breaks_with="fuse_matmul"), t()))
    assert "repro script: off (NVSCOPE_REPRO=0)" in note and "NVFUSER_ENABLE=fuse_matmul" in note
    assert not (tmp_path / "repros").exists()


def test_a_repro_that_cannot_be_written_never_hides_the_error(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(blocked / "below"))  # below a file: makedirs fails
    note = note_of(fail(double.make_wrapper(breaks_with="fuse_matmul"), t()))
    assert "repro script: not written (" in note and "+fuse_matmul" in note


def test_the_default_directory_is_a_temporary_one(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVSCOPE_REPRO_DIR")
    path = script_path(note_of(fail(double.make_wrapper(breaks_with="fuse_matmul"), t())))
    assert path.parent.name.startswith("nvscope-repro-") and path.parent.parent == Path(tempfile.gettempdir())
    shutil.rmtree(path.parent)


def test_process_wide_nvfuser_variables_are_part_of_the_repro_command(double: ThunderDouble,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVFUSER_DISABLE", "kernel_reuse")
    note = note_of(fail(double.make_wrapper(breaks_with="fuse_matmul"), t()))
    assert "repro script: NVFUSER_DISABLE=kernel_reuse python " in note


def test_the_repro_command_is_one_absolute_shell_word_per_item(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """A relative NVSCOPE_REPRO_DIR with spaces, and an NVFUSER_* value with shell syntax in it: the command line,
    pasted into a shell from another directory, runs that script with that value."""
    here = tmp_path / "work dir"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", "my repros/today")
    monkeypatch.setenv("NVFUSER_ENABLE", "p2p_protocol(put)")
    note = note_of(fail(double.make_wrapper(breaks_with="fuse_matmul"), t()))
    words = repro_command(note)
    assert words[:2] == ["NVFUSER_ENABLE=p2p_protocol(put)", "python"] and len(words) == 3, words
    script = Path(words[2])
    assert script.is_absolute() and script.parent == here / "my repros" / "today" and script.is_file()
    shown = subprocess.run(["sh", "-c", f"printf '%s\\n' {note.split('repro script: ', 1)[1].splitlines()[0]}"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert shown.returncode == 0 and shown.stdout.splitlines() == words, shown.stdout + shown.stderr
    monkeypatch.chdir(tmp_path)
    done = run_fresh(script, tmp_path)
    assert done.returncode != 0 and ASSERT in done.stderr, done.stdout + done.stderr


def test_failures_outside_a_scope_are_thunders_own(double: ThunderDouble) -> None:
    """Compile-time options alone: Thunder's own call, nvFuser's own error, no note."""
    wrapper = double.make_wrapper(enable=["fuse_matmul"], breaks_with="fuse_matmul")
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT FAILED") as raised:
        wrapper(t())
    assert not getattr(raised.value, "__notes__", None)
    with pytest.warns(nvscope.NoEffectWarning), nv_options(enable=["fuse_matmul"]), \
            pytest.raises(RuntimeError) as raised:  # adds nothing: Thunder's too
        wrapper(t())
    assert not getattr(raised.value, "__notes__", None)


def test_get_nvfuser_repro_after_the_failure_is_the_failing_definition_with_options(double: ThunderDouble,
                                                                                  tmp_path: Path) -> None:
    wrapper = double.make_wrapper(breaks_with="fuse_matmul", store_inputs=True)
    fail(wrapper, t())
    script = tmp_path / "from_thunder.py"
    script.write_text(double.get_nvfuser_repro(wrapper))
    done = run_fresh(script, tmp_path)
    assert done.returncode != 0 and ASSERT in done.stderr, done.stdout + done.stderr


def test_a_partition_definitions_own_repro_carries_its_options(double: ThunderDouble) -> None:
    wrapper = double.make_wrapper()
    with nv_options(enable=["static_fusion_count"]):
        wrapper(t())
    fd = double.executions[-1].fd
    with_inputs = fd.repro_script_for([t()])
    assert with_inputs.rstrip().endswith("fd.execute(inputs, _enable_options=['static_fusion_count'], "
                                         "_disable_options=[])")
    without = fd.repro_script_for()  # nvFuser writes no execute call without inputs: nvscope says what to run
    assert "# to execute it with these options: fd.execute(inputs, _enable_options=['static_fusion_count']" in without
    own = double.make_wrapper("nvFusion1")
    own(t())
    assert "_enable_options" not in double.executions[-1].fd.repro_script_for([t()])  # Thunder's own: untouched


def test_an_error_whose_notes_are_not_a_list_is_raised_untouched() -> None:
    """PEP 678: add_note raises TypeError when __notes__ is not a list; that must never replace the user's error."""
    from nvscope._exec import _repro

    error = RuntimeError("nvFuser's own")
    error.__notes__ = ("set by someone else",)  # type: ignore[attr-defined]
    _repro.annotate(error, "Thunder fusion", nvscope.FusionInfo("nvFusion0", "forward"), OptionSet(),
                    OptionSet(["fuse_matmul"]),
                    OptionSet(["fuse_matmul"]), lambda: "print('repro')\n")
    assert error.__notes__ == ("set by someone else",)  # type: ignore[attr-defined]


def test_the_failure_note_is_read_the_same_from_the_error_and_from_the_failure_text(double: ThunderDouble) -> None:
    """One reader for nvscope's note: on the exception (repro_paths, the bisect), and in the text a fusion record
    keeps of the failure (the profile's rows), where the note is followed by other notes and lines."""
    from nvscope._exec._repro import failure_note, repro_paths

    error = fail(double.make_wrapper(breaks_with="fuse_matmul"), t())
    error.__notes__.append("a note of someone else's")  # type: ignore[attr-defined]
    note = failure_note(error)
    assert note == note_of_nvscope(error)
    text = "\n".join([f"RuntimeError: {error}", "another note", note, "a note of someone else's"])
    assert failure_note(text) == note
    assert repro_paths(error) == (str(script_path(note)),)
    assert failure_note(RuntimeError("plain")) is None and failure_note("RuntimeError: plain\n  indented") is None


def note_of_nvscope(error: BaseException) -> str:
    (note,) = [n for n in getattr(error, "__notes__", []) if n.startswith("nvscope: ")]
    return str(note)
