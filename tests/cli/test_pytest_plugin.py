"""The pytest plugin (_nvscope_pytestplugin.py, nvscope/pytest_plugin.py), driven through pytester.

Inner runs load the plugin with ``-p _nvscope_pytestplugin`` and entry-point autoloading off, so they behave the
same whether or not nvscope is pip-installed; `test_entry_point_autoloads` covers the installed entry point.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
# The inner runs start from this test's warning filters: Python's default for nvscope's warnings there, as in a
# user's project, not this suite's "error" (pyproject.toml), so that they report them as a user's run would.
pytestmark = pytest.mark.filterwarnings("default::nvscope.NvscopeWarning")

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ("-p", "_nvscope_pytestplugin")


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An isolated pytester: no autoloaded plugins, no NVSCOPE_/NVFUSER_ variables, nvscope importable."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in list(os.environ):
        if name.startswith(("NVSCOPE_", "NVFUSER_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return pytester


def test_no_options_is_a_no_op_with_a_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import nvscope

        def test_plain():
            assert nvscope.current_options() == nvscope.OptionSet()
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)
    # One line: the catalog's would import nvscope in every pytest run (it comes with --nv-enable/--nv-disable).
    assert [line for line in result.stdout.lines if line.startswith("nvscope:")] == ["nvscope: no options"]


# Written by the inner session after every other hook: which of nvscope's modules the run imported.
LOADED = """
    import sys
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(config):
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "nvscope")
        (config.rootpath / "loaded.txt").write_text(" ".join(loaded))
"""
PLAIN = "def test_plain():\n    pass\n"
MARKED = "import pytest\n\n@pytest.mark.nv_options(enable=['fuse_matmul'])\ndef test_marked():\n    pass\n"


@pytest.mark.parametrize(("args", "test", "imports_nvscope"), [
    pytest.param((), PLAIN, False, id="plain"),
    # The marker is registered without nvscope: --strict-markers accepts it, `pytest --markers` lists it.
    pytest.param(("-v", "--strict-markers", "--collect-only"), MARKED, False, id="strict-markers"),
    pytest.param(("--markers",), PLAIN, False, id="markers"),
    pytest.param((), MARKED, True, id="marker"),
    pytest.param(("--nv-disable", "fma"), PLAIN, True, id="flag"),
    # A flag naming nothing: nvscope loads to find that out, and the run has no options.
    pytest.param(("--nv-enable", ","), PLAIN, True, id="empty-flag"),
])
def test_the_plugin_imports_nvscope_only_for_a_flag_or_a_marker(pytester: pytest.Pytester, args: tuple[str, ...],
                                                                 test: str, imports_nvscope: bool) -> None:
    pytester.makeconftest(LOADED)
    pytester.makepyfile(test_it=test)
    # A subprocess: this process has imported nvscope already.
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    loaded = (pytester.path / "loaded.txt").read_text().split()
    assert ("nvscope.pytest_plugin" in loaded) is imports_nvscope, loaded
    if not imports_nvscope:
        assert loaded == []
    if args[:1] == ("--markers",):
        result.stdout.fnmatch_lines(["@pytest.mark.nv_options(enable=[[]...[]], disable=[[]...[]], inherit=True): *"])
    elif "-v" in args:
        result.stdout.fnmatch_lines(["*test_marked*"])


def test_the_former_plugin_name_still_loads_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        from nvscope import OptionSet, current_options

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        def test_marked():
            assert current_options() == OptionSet(enable=["fuse_matmul"], disable=["fma"])
    """)
    result = pytester.runpytest("-p", "nvscope.pytest_plugin", "--nv-disable", "fma", "--strict-markers")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["nvscope: options NVFUSER_DISABLE=fma (scoped around each test)"])


def test_markers_merge_module_class_function_around_the_call_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        import nvscope
        from nvscope import OptionSet, current_options

        pytestmark = pytest.mark.nv_options(disable=["matmul_expr_eval"])

        @pytest.fixture
        def outside():
            assert current_options() == OptionSet()  # fixture setup runs outside the scope
            yield
            assert current_options() == OptionSet()  # and so does its teardown

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        class TestClass:
            @pytest.mark.nv_options(enable="static_fusion_count")
            def test_function_class_module(self, outside):
                assert current_options() == OptionSet(["fuse_matmul", "static_fusion_count"], ["matmul_expr_eval"])
                assert nvscope.is_development_mode()

            def test_class_module(self):
                assert current_options() == OptionSet(["fuse_matmul"], ["matmul_expr_eval"])

        def test_module_only():
            assert current_options() == OptionSet(disable=["matmul_expr_eval"])

        @pytest.mark.nv_options(enable=["fuse_matmul"], inherit=False)
        def test_inherit_false():
            assert current_options() == OptionSet(enable=["fuse_matmul"])

        @pytest.mark.nv_options(["kernel_profile"], ["fma"])
        def test_positional_arguments():
            assert current_options() == OptionSet(["kernel_profile"], ["fma", "matmul_expr_eval"])
    """)
    result = pytester.runpytest(*PLUGIN, "-v")
    result.assert_outcomes(passed=5)


def test_command_line_options_for_the_whole_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        import nvscope
        from nvscope import OptionSet, current_options

        SESSION = OptionSet(["fuse_matmul", "static_fusion_count"], ["matmul_expr_eval"])

        @pytest.fixture
        def outside():
            assert current_options() == OptionSet()
            assert nvscope.is_development_mode()  # on for the whole session

        def test_session(outside):
            assert current_options() == SESSION

        @pytest.mark.nv_options(disable=["fma"])
        def test_marker_nested_in_session():
            assert current_options() == SESSION | OptionSet(disable=["fma"])

        @pytest.mark.nv_options(enable=["kernel_profile"], inherit=False)
        def test_marker_inherit_false_drops_the_session_options():
            assert current_options() == OptionSet(enable=["kernel_profile"])
    """)
    result = pytester.runpytest(*PLUGIN, "--nv-enable", "fuse_matmul,static_fusion_count",
                                "--nv-disable", "matmul_expr_eval")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "nvscope: options NVFUSER_ENABLE=fuse_matmul,static_fusion_count NVFUSER_DISABLE=matmul_expr_eval "
        "(scoped around each test)",
        "nvscope: *catalog*",
    ])


def test_repeated_command_line_flags(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from nvscope import OptionSet, current_options

        def test_it():
            assert current_options() == OptionSet(enable=["fuse_matmul", "kernel_profile"])
    """)
    result = pytester.runpytest(*PLUGIN, "--nv-enable", "fuse_matmul", "--nv-enable", "kernel_profile")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("flag", "name", "expected"), [
    ("--nv-enable", "fuse_matmu", "did you mean 'fuse_matmul'"),
    ("--nv-enable", "FUSE_MATMUL", "did you mean 'fuse_matmul'"),
    # the hint speaks the flags' syntax, not nv_options'
    ("--nv-disable", "fuse_matmul",
     "is an nvFuser enable option, not a disable option: pass it as --nv-enable fuse_matmul\n"),
    ("--nv-enable", "matmul_expr_eval",
     "is an nvFuser disable option, not an enable option: pass it as --nv-disable matmul_expr_eval\n"),
])
def test_unknown_command_line_name_is_a_usage_error(pytester: pytest.Pytester, flag: str, name: str,
                                                    expected: str) -> None:
    pytester.makepyfile("def test_never(): raise AssertionError('ran')")
    result = pytester.runpytest(*PLUGIN, flag, name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected in result.stderr.str()
    assert "ran" not in result.stdout.str()


def test_marker_with_a_bad_name_errors_that_test_at_setup(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        SET_UP = []

        @pytest.fixture
        def expensive():
            SET_UP.append(1)

        @pytest.mark.nv_options(enable=["fuse_matmu"])
        def test_bad(expensive):
            raise AssertionError("the body ran")

        def test_fixture_never_set_up_and_others_still_run():
            assert SET_UP == []
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, errors=1)
    message = ("test_marker_with_a_bad_name_errors_that_test_at_setup.py::test_bad: "
               "@pytest.mark.nv_options(enable=['fuse_matmu']): "
               "unknown nvFuser enable option 'fuse_matmu'; did you mean 'fuse_matmul'")
    output = result.stdout.str()
    assert "the body ran" not in output
    # One clear line, no traceback through nvscope's (or pytest's) code.
    section = output[output.index("ERROR at setup of test_bad"):output.index("= short test summary")]
    lines = [line for line in section.splitlines()[1:] if line.strip("= ")]
    assert len(lines) == 1 and lines[0].startswith(message), section


def test_a_bad_class_or_module_marker_names_where_it_is(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_module="""
            import pytest

            pytestmark = pytest.mark.nv_options(disable="FMA")

            def test_module_marker():
                pass
        """,
        test_class="""
            import pytest

            @pytest.mark.nv_options(enabled=["fuse_matmul"])
            class TestClass:
                @pytest.mark.nv_options(enable="fuse_matmul")
                def test_in_class(self):
                    pass
        """,
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(errors=2)
    lines = result.stdout.lines
    assert ("test_module.py::test_module_marker: @pytest.mark.nv_options(disable='FMA') (on test_module.py): "
            "unknown nvFuser disable option 'FMA'; did you mean 'fma'? (`nvscope options` lists them all)") in lines
    assert any(line.startswith("test_class.py::TestClass::test_in_class: @pytest.mark.nv_options(enabled=["
                               "'fuse_matmul']) (on test_class.py::TestClass): ") and "'enabled'" in line
               for line in lines), lines


def test_marker_no_fusion_warning_points_at_the_test(pytester: pytest.Pytester) -> None:
    # NoFusionWarning (of this kind) needs an installed adapter; fake one's patch for the duration of each test.
    pytester.makepyfile("""
        import types
        import pytest
        from nvscope._core import _patches

        @pytest.fixture(autouse=True)
        def adapter():
            _patches.apply("fake", types.SimpleNamespace(), "attribute", 1)
            yield
            _patches.restore("fake")

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        def test_marked_without_fusion():
            pass

        def test_unmarked_under_the_command_line_options():
            pass
    """)
    result = pytester.runpytest(*PLUGIN, "--nv-disable", "fma")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_marker_no_fusion_warning_points_at_the_test.py:11: NoFusionWarning*"])
    assert result.stdout.str().count("NoFusionWarning") == 1  # the command-line scope's own warning is dropped


LEAKS = """
    import pytest
    import nvscope

    @pytest.mark.nv_options(enable=["fuse_matmul"])
    def test_leaks():
        nvscope.nv_options(disable=["fma"]).__enter__()
        nvscope.nv_options(enable=["kernel_profile"]).__enter__()

    @pytest.mark.nv_options(enable=["fuse_matmul"])
    def test_leaks_and_fails():
        nvscope.nv_options(disable=["fma"]).__enter__()
        raise AssertionError("the test's own failure")

    def test_next_starts_clean():
        assert nvscope.current_options() == nvscope.OptionSet()

    @pytest.mark.nv_options(disable=["fma"])
    def test_and_markers_still_apply():
        assert nvscope.current_options() == nvscope.OptionSet(disable=["fma"])
"""


@pytest.mark.parametrize("session", [(), ("--nv-enable", "static_fusion_count")])
def test_scope_leaked_by_a_test_fails_it_by_name_and_the_next_starts_clean(pytester: pytest.Pytester,
                                                                          session: tuple[str, ...]) -> None:
    pytester.makepyfile(test_leak=LEAKS if not session else LEAKS.replace(
        "nvscope.OptionSet(disable=[\"fma\"])", "nvscope.OptionSet([\"static_fusion_count\"], [\"fma\"])").replace(
        "assert nvscope.current_options() == nvscope.OptionSet()\n",
        "assert nvscope.current_options() == nvscope.OptionSet([\"static_fusion_count\"])\n"))
    # The old-style hookwrapper raised from its teardown, which pluggy reports as PluggyTeardownRaisedWarning.
    result = pytester.runpytest(*PLUGIN, *session, "-p", "no:randomly", "-W", "error::pytest.PytestWarning",
                                "-W", "error::DeprecationWarning")
    result.assert_outcomes(passed=2, failed=2)
    output = result.stdout.str()
    assert "PluggyTeardownRaised" not in output and "Traceback" not in output
    assert any(line.startswith(
        "test_leak.py::test_leaks: the test left 2 nvscope scope(s) open (innermost first): "
        "nv_options(enable=['kernel_profile'], disable=[]), nv_options(enable=[], disable=['fma']); use `with "
        "nv_options(...):`") for line in result.stdout.lines), output
    # A test that failed anyway keeps its own failure; the scope it left open is a warning naming it.
    assert "E       AssertionError: the test's own failure" in result.stdout.lines
    assert ("test_leak.py:9: UnclosedScopeWarning: the test left 1 nvscope scope(s) open (innermost first): "
            "nv_options(enable=[], disable=['fma'])") in output


OLD_PLUGGY = """
    # Loaded before nvscope's plugin: a pytest whose pluggy (< 1.2) has no new-style hook wrappers.
    import pytest

    _hookimpl = pytest.hookimpl

    def hookimpl(*args, **kwargs):
        if "wrapper" in kwargs:
            raise TypeError("HookimplMarker.__call__() got an unexpected keyword argument 'wrapper'")
        return _hookimpl(*args, **kwargs)

    pytest.hookimpl = hookimpl
"""


def test_a_pluggy_without_new_style_wrappers_still_works(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(old_pluggy=OLD_PLUGGY, test_old=LEAKS)
    # A subprocess: this process has imported the plugin already, with new-style wrappers.
    result = pytester.runpytest_subprocess("-p", "old_pluggy", *PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    # Proof that the old-style hookwrapper ran: this (new) pluggy warns when one raises from its teardown.
    assert "PluggyTeardownRaisedWarning: A plugin raised an exception during an old-style hookwrapper" in (
        result.stdout.str())
    result.stdout.fnmatch_lines(["test_old.py::test_leaks: the test left 2 nvscope scope(s) open*",
                                 "E       AssertionError: the test's own failure"])


def _entry_point() -> importlib.metadata.EntryPoint | None:
    found = [ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "nvscope"]
    return found[0] if found else None


def test_entry_point_autoloads(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    entry_point = _entry_point()
    if entry_point is None:
        pytest.skip("nvscope is not pip-installed here (no pytest11 entry point)")
    # _nvscope_pytestplugin; nvscope.pytest_plugin in an environment installed before it (which registers it too).
    assert entry_point.value in ("_nvscope_pytestplugin", "nvscope.pytest_plugin"), entry_point.value
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    pytester.makepyfile("""
        import pytest
        import nvscope

        def test_unmarked_is_untouched():
            assert nvscope.current_options() == nvscope.OptionSet()
            assert not nvscope.is_development_mode()

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        def test_marked_runs_in_development_mode():
            assert nvscope.is_development_mode()
            assert nvscope.current_options() == nvscope.OptionSet(enable=["fuse_matmul"])

        def test_and_restores_it():
            assert not nvscope.is_development_mode()
    """)
    # A subprocess: development mode is process-wide, and this suite turns it on for its own tests.
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider",
                                           "-W", "error::nvscope.DevelopmentModeWarning")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["nvscope: no options"])
