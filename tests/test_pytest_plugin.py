"""The pytest plugin (nvscope/pytest_plugin.py), driven through pytester.

Inner runs load the plugin with ``-p nvscope.pytest_plugin`` and entry-point autoloading off, so they behave the
same whether or not nvscope is pip-installed; `test_entry_point_autoloads` covers the installed entry point.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

import nvscope

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
PLUGIN = ("-p", "nvscope.pytest_plugin")


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
    result.stdout.fnmatch_lines(["nvscope: no options", f"nvscope: {nvscope.catalog().source}"])


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
                assert nvscope.development_mode()

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
            assert nvscope.development_mode()  # on for the whole session

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
    ("--nv-disable", "fuse_matmul", "is an nvFuser enable option, not an disable option"),
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
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_bad*",
        "*UnknownOptionError: unknown nvFuser enable option 'fuse_matmu'; did you mean 'fuse_matmul'*",
    ])
    assert "the body ran" not in result.stdout.str()


def test_marker_no_fusion_warning_points_at_the_test(pytester: pytest.Pytester) -> None:
    # NoFusionWarning needs an installed adapter (events.ADAPTERS); fake one for the duration of each test.
    pytester.makepyfile("""
        import pytest
        from nvscope import _events as events

        @pytest.fixture(autouse=True)
        def adapter():
            events.ADAPTERS.add("fake")
            yield
            events.ADAPTERS.discard("fake")

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        def test_marked_without_fusion():
            pass

        def test_unmarked_under_the_command_line_options():
            pass
    """)
    result = pytester.runpytest(*PLUGIN, "--nv-disable", "fma")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_marker_no_fusion_warning_points_at_the_test.py:10: NoFusionWarning*"])
    assert result.stdout.str().count("NoFusionWarning") == 1  # the command-line scope's own warning is dropped


def test_scope_leaked_by_a_test_is_reported_and_cleaned(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        import nvscope

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        def test_leaks():
            nvscope.nv_options(disable=["fma"]).__enter__()

        def test_next_starts_clean():
            assert nvscope.current_options() == nvscope.OptionSet()
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError*scopes must exit in the reverse order*"])


def _entry_point() -> importlib.metadata.EntryPoint | None:
    found = [ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "nvscope"]
    return found[0] if found else None


def test_entry_point_autoloads(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    entry_point = _entry_point()
    if entry_point is None:
        pytest.skip("nvscope is not pip-installed here (no pytest11 entry point)")
    assert entry_point.value == "nvscope.pytest_plugin"
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    pytester.makepyfile("""
        import pytest
        import nvscope

        def test_unmarked_is_untouched():
            assert nvscope.current_options() == nvscope.OptionSet()
            assert not nvscope.development_mode()

        @pytest.mark.nv_options(enable=["fuse_matmul"])
        def test_marked_runs_in_development_mode():
            assert nvscope.development_mode()
            assert nvscope.current_options() == nvscope.OptionSet(enable=["fuse_matmul"])

        def test_and_restores_it():
            assert not nvscope.development_mode()
    """)
    # A subprocess: development mode is process-wide, and this suite turns it on for its own tests.
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider",
                                           "-W", "error::nvscope.DevelopmentModeWarning")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["nvscope: no options"])
