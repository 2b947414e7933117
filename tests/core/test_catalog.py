"""The option catalog: content, the messages of rejected names, and narrowing to an installed nvFuser version."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

import nvscope
from nvscope import UnknownOptionError, nv_options
from nvscope._core import _catalog as option_catalog
from nvscope._core import _catalog_cache
from nvscope._core import _catalog_data as data
from nvscope._core import _catalog_probe as _probe

EFFECTS = {"codegen", "runtime", "debug"}


@pytest.fixture
def fresh_catalog() -> Iterator[None]:
    """Forget the cached catalog before and after the test (for tests that fake an nvFuser installation)."""
    _catalog_cache._reset_cache()
    try:
        yield
    finally:
        _catalog_cache._reset_cache()


def fake_nvfuser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist_info: str) -> None:
    """Put a ``<dist>-<version>.dist-info`` directory (with its METADATA) first on sys.path and reset the caches."""
    site = tmp_path / "site"
    (site / dist_info).mkdir(parents=True)
    dist, _, version = dist_info.removesuffix(".dist-info").rpartition("-")
    (site / dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    for name in ("nvfuser", "nvfuser_direct"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(site))
    _catalog_cache._reset_cache()


# --- content -------------------------------------------------------------------------------------------------------


def test_no_nvfuser_installed_in_the_test_environment(fresh_catalog: None) -> None:
    # The content tests below assume the whole bundled table; make the assumption visible.
    assert option_catalog.installed_nvfuser() is None
    assert nvscope.catalog().nvfuser is None
    assert "no nvFuser installed" in nvscope.catalog().source


def test_catalog_is_cached() -> None:
    assert nvscope.catalog() is nvscope.catalog()


def test_well_known_options() -> None:
    cat = nvscope.catalog()
    fuse = cat.get("enable", "fuse_matmul")
    assert fuse is not None
    assert fuse.kind == "enable" and fuse.name == "fuse_matmul" and fuse.effect == "codegen"
    assert not fuse.requires_args
    expr_eval = cat.get("disable", "matmul_expr_eval")
    assert expr_eval is not None and expr_eval.kind == "disable"
    assert cat.get("enable", "static_fusion_count") is not None
    assert "static_fusion_count" in cat.names("enable")
    assert "matmul_expr_eval" in cat.names("disable")
    assert "matmul_expr_eval" not in cat.names("enable")
    assert cat.get("enable", "matmul_expr_eval") is None
    assert cat.get("enable", "no_such_option") is None


def test_every_option_is_well_formed() -> None:
    cat = nvscope.catalog()
    assert len(cat.options) == len(data.OPTIONS)
    covered = [Version(v) for v, _ in data.VERSIONS]
    assert covered == sorted(covered)
    for o in cat.options:
        assert isinstance(o, nvscope.OptionInfo)
        assert o.kind in ("enable", "disable")
        assert o.effect in EFFECTS, o
        assert o.name and o.name == o.name.strip() and "," not in o.name and " " not in o.name
        assert o.description.strip(), o
        assert Version(o.since) in covered, o
        if o.until is not None:
            assert Version(o.until) in covered, o
            assert Version(o.since) <= Version(o.until), o
        assert isinstance(o.requires_args, bool)


def test_kind_name_pairs_are_unique() -> None:
    pairs = [(o.kind, o.name) for o in nvscope.catalog().options]
    assert len(pairs) == len(set(pairs))


def test_names_and_get_agree_with_options() -> None:
    cat = nvscope.catalog()
    for kind in ("enable", "disable"):
        names = cat.names(kind)
        assert isinstance(names, frozenset)
        assert names == {o.name for o in cat.options if o.kind == kind}
        for name in names:
            info = cat.get(kind, name)
            assert info is not None and info.name == name and info.kind == kind


def test_option_info_is_frozen() -> None:
    info = nvscope.catalog().get("enable", "fuse_matmul")
    assert info is not None
    with pytest.raises(AttributeError):
        info.name = "other"  # type: ignore[misc]


def test_versions_text_and_available_in() -> None:
    cat = nvscope.catalog()
    id_model = cat.get("enable", "id_model")
    fast_math = cat.get("enable", "fast_math")
    assert id_model is not None and fast_math is not None
    assert id_model.versions == "0.2.23-0.2.35"
    assert fast_math.versions == "0.2.30+"
    assert id_model.available_in(Version("0.2.35"))
    assert id_model.available_in(Version("0.2.35.dev20260215"))  # a nightly counts as its release
    assert not id_model.available_in(Version("0.2.36"))
    assert not fast_math.available_in(Version("0.2.29"))
    assert fast_math.available_in(Version("0.2.30"))
    assert fast_math.available_in(Version("9.0"))


def test_repr_mentions_count_and_source() -> None:
    cat = nvscope.catalog()
    assert str(len(cat.options)) in repr(cat)
    assert cat.source in repr(cat)


def test_option_info_pickles() -> None:
    import pickle

    for info in nvscope.catalog().options:
        assert pickle.loads(pickle.dumps(info)) == info


# --- which fusions an option can affect ----------------------------------------------------------------------------

REDUCTIONS = ("batch_norm", "fmax", "fmin", "max", "min", "prod", "sum", "var", "var_mean", "welford")


def test_gates_are_consistent() -> None:
    options = {(o[0], o[1]) for o in data.OPTIONS}
    gated = [(kind, name) for kind, name, _, _ in data.OP_GATES]
    assert len(gated) == len(set(gated))
    for kind, name, ops, source in data.OP_GATES:
        assert (kind, name) in options, (kind, name)
        assert ops and list(ops) == sorted(set(ops)), (kind, name)
        assert all(op.isidentifier() and op == op.lower() for op in ops), (kind, name)
        assert source and all(path.startswith("csrc/") and path.endswith(".cpp") for path in source.split(", "))


def test_option_info_ops_and_source() -> None:
    cat = nvscope.catalog()
    fuse = cat.get("enable", "fuse_matmul")
    assert fuse is not None
    assert fuse.ops == ("linear", "matmul") and fuse.source == "csrc/scheduler/matmul_utils.cpp"
    expr_eval = cat.get("disable", "matmul_expr_eval")
    assert expr_eval is not None and expr_eval.ops == ("linear", "matmul")
    assert expr_eval.source == "csrc/scheduler/expr_eval_sched.cpp"
    tma = cat.get("enable", "tma_reduction")
    assert tma is not None and tma.ops == REDUCTIONS
    fma = cat.get("disable", "fma")
    assert fma is not None and fma.ops == () and fma.source is None
    assert sum(1 for o in cat.options if o.ops) == len(data.OP_GATES)
    assert all((o.source is None) == (not o.ops) for o in cat.options)


@pytest.mark.parametrize(("kind", "name", "ops", "expected"), [
    ("enable", "fuse_matmul", {"add", "linear"}, True),
    ("enable", "fuse_matmul", ["matmul"], True),
    ("enable", "fuse_matmul", {"add", "sum", "cast"}, False),
    ("enable", "fuse_matmul", (), False),
    ("disable", "matmul_expr_eval", frozenset({"mul"}), False),
    ("disable", "matmul_expr_eval", {"linear": 1}.keys(), True),
    ("enable", "tma_reduction", {"var_mean"}, True),
    ("enable", "tma_reduction", {"add", "matmul"}, False),
    ("disable", "resize_scheduler", {"cat"}, True),
    ("disable", "resize_scheduler", {"reshape", "permute"}, False),
    ("enable", "cutlass_scheduler", {"matmul"}, False),
    ("disable", "fma", (), True),  # not gated: every fusion
    ("enable", "kernel_profile", {"add"}, True),
    ("enable", "no_such_option", (), True),  # unknown: assume it can
    ("disable", "fuse_matmul", (), True),  # fuse_matmul is no disable option: unknown there
])
def test_can_affect(kind: str, name: str, ops: object, expected: bool) -> None:
    assert nvscope.catalog().can_affect(kind, name, ops) is expected  # type: ignore[arg-type]


def test_can_affect_refuses_a_lone_string() -> None:
    with pytest.raises(TypeError, match="collection of op names"):
        nvscope.catalog().can_affect("enable", "fuse_matmul", "linear")


def test_can_affect_on_a_newer_nvfuser_assumes_every_fusion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-0.2.99.dist-info")
    cat = nvscope.catalog()
    fuse = cat.get("enable", "fuse_matmul")
    assert fuse is not None and fuse.ops  # the data is still shown ...
    assert cat.can_affect("enable", "fuse_matmul", {"add"})  # ... but not relied on: nvFuser's source was not read
    fake_nvfuser(tmp_path / "covered", monkeypatch, f"nvfuser-{data.VERSIONS[-1][0]}.dist-info")
    assert not nvscope.catalog().can_affect("enable", "fuse_matmul", {"add"})


def test_can_affect_follows_the_installed_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-0.2.30.dist-info")  # greedy_scheduler: an enable option, with pad
    cat = nvscope.catalog()
    assert cat.can_affect("enable", "greedy_scheduler", {"pad"})
    assert not cat.can_affect("enable", "greedy_scheduler", {"add"})
    assert cat.can_affect("disable", "greedy_scheduler", {"add"})  # not in 0.2.30: unknown
    fake_nvfuser(tmp_path / "later", monkeypatch, "nvfuser-0.2.35.dist-info")
    cat = nvscope.catalog()
    assert not cat.can_affect("disable", "greedy_scheduler", {"pad", "add"})
    assert cat.can_affect("disable", "greedy_scheduler", {"topk"})


def test_the_docs_table_lists_every_gate() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "catalog.md").read_text(encoding="utf-8")
    assert f'"reductions" are `{", ".join(REDUCTIONS)}`' in text.replace("\n", " ")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line.split("|")[1]]
    for kind, name, ops, _ in data.OP_GATES:
        row = next((r for r in rows if f"`{name}`" in r.split("|")[1] and kind in r.split("|")[1]), None)
        assert row is not None, (kind, name)
        shown = {op for cell in re.findall(r"`([^`]*)`", row.split("|")[2]) for op in cell.split(", ")}
        if "reductions" in row.split("|")[2]:
            shown |= set(REDUCTIONS)
        assert set(ops) <= shown, (kind, name, set(ops) - shown)


# --- rejected names ------------------------------------------------------------------------------------------------


def test_did_you_mean() -> None:
    with pytest.raises(UnknownOptionError, match=r"did you mean 'fuse_matmul'") as info:
        nv_options(enable=["fuse_matmull"])
    assert isinstance(info.value, ValueError)
    assert "fuse_matmull" in str(info.value)


def test_did_you_mean_for_disable() -> None:
    with pytest.raises(UnknownOptionError, match=r"did you mean 'matmul_expr_eval'"):
        nv_options(disable=["matmul_exp_eval"])


def test_did_you_mean_the_other_list() -> None:
    # close to nothing in enable, close to a disable name: the hint names the other list
    with pytest.raises(UnknownOptionError, match=r"did you mean the disable option 'matmul_expr_eval'"):
        nv_options(enable=["matmul_expr_evl"])


def test_no_suggestion_for_gibberish() -> None:
    with pytest.raises(UnknownOptionError) as info:
        nv_options(enable=["qqqqqqqqqqqq"])
    assert "did you mean" not in str(info.value)
    assert "qqqqqqqqqqqq" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "other"),
    [
        ({"enable": ["matmul_expr_eval"]}, "disable"),
        ({"disable": ["fuse_matmul"]}, "enable"),
        ({"disable": ["static_fusion_count"]}, "enable"),
    ],
)
def test_wrong_list_hint(kwargs: dict[str, list[str]], other: str) -> None:
    (name,) = next(iter(kwargs.values()))
    with pytest.raises(UnknownOptionError) as info:
        nv_options(**kwargs)
    message = str(info.value)
    kind = "enable" if other == "disable" else "disable"
    article = "an" if kind == "enable" else "a"
    assert f"is an nvFuser {other} option, not {article} {kind} option" in message  # not "an disable"
    assert f"{other}=[{name!r}]" in message


def test_the_hint_speaks_the_callers_syntax() -> None:
    # The command-line tools pass their flags' syntax; Python callers get keyword arguments.
    cat = nvscope.catalog()
    with pytest.raises(UnknownOptionError) as info:
        cat.check("enable", "matmul_expr_eval", spelling="--{kind} {name}")
    assert str(info.value).endswith("pass it as --disable matmul_expr_eval")
    assert "disable=[" not in str(info.value)
    with pytest.raises(UnknownOptionError, match=r"pass it as enable=\['fuse_matmul'\]$"):
        cat.check("disable", "fuse_matmul")


@pytest.mark.parametrize(("kind", "typed", "suggested"), [
    ("enable", "FUSE_MATMUL", "did you mean 'fuse_matmul'?"),
    ("enable", "Fuse_Matmull", "did you mean 'fuse_matmul'"),
    ("disable", "FMA", "did you mean 'fma'?"),
    ("disable", "MATMUL_EXPR_EVAL", "did you mean 'matmul_expr_eval'?"),
    # the same name but for case in the other list wins over fuzzy matches in this one
    ("enable", "FMA", "did you mean the disable option 'fma'?"),
])
def test_did_you_mean_ignores_case(kind: str, typed: str, suggested: str) -> None:
    with pytest.raises(UnknownOptionError) as info:
        nv_options(**{kind: [typed]})
    assert suggested in str(info.value)
    assert repr(typed) in str(info.value)


def test_a_very_long_name_is_not_echoed_whole() -> None:
    name = "fuse_" + "x" * 10_000
    with pytest.raises(UnknownOptionError) as info:
        nvscope.catalog().check("enable", name)
    message = str(info.value)
    assert len(message) < 300, len(message)
    assert "fuse_xxx" in message and "10005 characters" in message


def test_a_name_with_arguments_is_refused_by_check_itself() -> None:
    # The tools validate through check() before nv_options(), so check() must explain this case too.
    with pytest.raises(UnknownOptionError, match=r"carry no arguments.*NVFUSER_ENABLE=p2p_protocol\(put\)"):
        nvscope.catalog().check("enable", "p2p_protocol(put)")


@pytest.mark.parametrize(
    ("kind", "name"),
    [(o.kind, o.name) for o in nvscope.catalog().options if o.requires_args],
)
def test_options_that_need_arguments_are_rejected(kind: str, name: str) -> None:
    with pytest.raises(UnknownOptionError, match="carry no arguments") as info:
        nv_options(**{kind: [name]})
    assert name in str(info.value)


def test_the_known_argument_options_are_marked() -> None:
    cat = nvscope.catalog()
    for name in ("p2p_protocol", "wait_debugger"):
        info = cat.get("enable", name)
        assert info is not None and info.requires_args, name


def test_a_name_with_arguments_is_rejected() -> None:
    with pytest.raises(UnknownOptionError, match="carry no arguments"):
        nv_options(enable=["p2p_protocol(put)"])


def test_the_check_method_accepts_valid_names() -> None:
    cat = nvscope.catalog()
    cat.check("enable", "fuse_matmul")
    cat.check("disable", "matmul_expr_eval")
    with pytest.raises(UnknownOptionError):
        cat.check("enable", "matmul_expr_eval")


# --- installed nvFuser -----------------------------------------------------------------------------------------------


def test_installed_nvfuser_from_dist_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser_cu130_torch210-0.2.35.dev20260215.dist-info")
    found = option_catalog.installed_nvfuser()
    assert found is not None
    assert found.distribution == "nvfuser_cu130_torch210"
    assert found.version == Version("0.2.35.dev20260215")
    assert "nvfuser" not in sys.modules and "nvfuser_direct" not in sys.modules  # found without importing it
    cat = nvscope.catalog()
    assert cat.nvfuser == found
    assert "0.2.35.dev20260215" in cat.source


def test_invalid_dist_info_versions_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-not_a_version.dist-info")
    assert option_catalog.installed_nvfuser() is None


def test_installed_nvfuser_from_an_imported_module(monkeypatch: pytest.MonkeyPatch, fresh_catalog: None) -> None:
    import types

    module = types.ModuleType("nvfuser_direct")
    module.version = lambda: "0.2.24"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvfuser_direct", module)
    _catalog_cache._reset_cache()
    found = option_catalog.installed_nvfuser()
    assert found is not None and found.version == Version("0.2.24")
    assert "fast_math" not in nvscope.catalog().names("enable")


def test_narrowed_to_0_2_35(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_catalog: None) -> None:
    bundled = nvscope.catalog().options  # no nvFuser installed: the whole table
    assert len(bundled) == len(data.OPTIONS)
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser_cu130_torch210-0.2.35.dev20260215.dist-info")
    cat = nvscope.catalog()
    version = Version("0.2.35")
    assert cat.options == tuple(o for o in bundled if o.available_in(version))
    assert 0 < len(cat.options) < len(bundled)
    assert "id_model" in cat.names("enable")  # 0.2.23-0.2.35 includes the 0.2.35 nightly
    assert "p2p_transport" not in cat.names("enable")  # 0.2.36+
    assert "fast_math" in cat.names("enable")
    assert "parallel_serde" in cat.names("disable") and "parallel_serde" in cat.names("enable")
    nv_options(enable=["id_model", "fuse_matmul"], disable=["parallel_serde"])  # accepted


def test_a_newer_option_names_the_installed_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-0.2.24.dist-info")
    with pytest.raises(UnknownOptionError) as info:
        nv_options(enable=["fast_math"])
    message = str(info.value)
    assert "0.2.24" in message  # the installed version
    assert "0.2.30+" in message  # where the option exists
    nv_options(enable=["fuse_matmul"])  # an option 0.2.24 has is still fine


def test_a_removed_option_names_the_installed_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser_cu130_torch210-0.2.36.dist-info")
    with pytest.raises(UnknownOptionError) as info:
        nv_options(enable=["id_model"])
    assert "0.2.36" in str(info.value) and "0.2.23-0.2.35" in str(info.value)


def test_argument_options_are_still_rejected_for_their_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-0.2.36.dist-info")
    with pytest.raises(UnknownOptionError, match="carry no arguments"):
        nv_options(enable=["p2p_transport"])
    fake_nvfuser(tmp_path / "older", monkeypatch, "nvfuser-0.2.35.dist-info")
    with pytest.raises(UnknownOptionError, match=r"0\.2\.36\+") as info:
        nv_options(enable=["p2p_transport"])
    assert "0.2.35" in str(info.value)


@pytest.mark.parametrize(
    ("version", "kind", "versions"),
    [
        # disable parallel_serde exists until 0.2.35, enable parallel_serde 0.2.35-0.2.36: on 0.2.36 the disable
        # list lacks it, and the message must name the version rather than tell the user to *enable* it.
        ("0.2.36", "disable", "0.2.23-0.2.35"),
        ("0.2.34", "enable", "0.2.35-0.2.36"),
        # enable greedy_scheduler 0.2.30-0.2.34, disable greedy_scheduler 0.2.34+
        ("0.2.35", "enable", "0.2.30-0.2.34"),
    ],
)
def test_a_name_that_moved_between_lists_names_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_catalog: None, version: str, kind: str, versions: str
) -> None:
    name = "greedy_scheduler" if versions == "0.2.30-0.2.34" else "parallel_serde"
    fake_nvfuser(tmp_path, monkeypatch, f"nvfuser-{version}.dist-info")
    with pytest.raises(UnknownOptionError) as info:
        nv_options(**{kind: [name]})
    message = str(info.value)
    assert version in message and versions in message, message
    other = "enable" if kind == "disable" else "disable"
    assert f"pass it as {other}=" not in message


def test_reset_cache_forgets_the_fake_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-0.2.24.dist-info")
    assert nvscope.catalog().nvfuser is not None
    monkeypatch.undo()
    _catalog_cache._reset_cache()
    assert nvscope.catalog().nvfuser is None
    nv_options(enable=["fast_math"])


# --- an installed nvFuser newer than the catalog ------------------------------------------------------------------

NEWER = "0.2.99"  # newer than any version the bundled table covers
assert Version(NEWER) > Version(data.VERSIONS[-1][0])


class FakeProbe:
    """Stands in for `probe_installed` (a child process that needs CUDA): the names "nvFuser" accepts, or an error."""

    def __init__(self, enable: set[str] = frozenset(), disable: set[str] = frozenset(),  # type: ignore[assignment]
                 error: Exception | None = None, delay: float = 0.0) -> None:
        self.accepted = {"enable": frozenset(enable), "disable": frozenset(disable)}
        self.error = error
        self.delay = delay
        self.calls = 0

    def __call__(self) -> dict[str, frozenset[str]]:
        self.calls += 1
        if self.delay:
            import time

            time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.accepted


@pytest.fixture
def newer_nvfuser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_catalog: None) -> None:
    monkeypatch.delenv("NVSCOPE_TRUST_NVFUSER", raising=False)
    fake_nvfuser(tmp_path, monkeypatch, f"nvfuser_cu130_torch210-{NEWER}.dist-info")


def probe(monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> FakeProbe:
    fake = FakeProbe(**kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(_probe, "probe_installed", fake)
    return fake


def test_newer_nvfuser_accepts_what_nvfuser_itself_accepts(newer_nvfuser: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake = probe(monkeypatch, enable={"fuse_matmul", "brand_new_option", "id_model"}, disable={"later_disable"})
    assert "checked with nvFuser itself" in nvscope.catalog().source
    nv_options(enable=["fuse_matmul"])
    assert fake.calls == 0  # names the catalog has never start the probe
    with pytest.warns(nvscope.NvscopeWarning) as notes:
        scope = nv_options(enable=["brand_new_option"], disable=["later_disable"])
    assert scope.options == nvscope.OptionSet(["brand_new_option"], ["later_disable"])
    text = " | ".join(str(n.message) for n in notes)
    assert "'brand_new_option'" in text and "'later_disable'" in text
    assert f"installed nvFuser {NEWER} accepts it" in text and "catalog is older" in text
    assert notes[0].filename == __file__  # attributed to the user's line, not to nvscope's
    # id_model left the catalog's table at 0.2.35; this (fake) newer nvFuser accepts it again.
    with pytest.warns(nvscope.NvscopeWarning, match="'id_model'"):
        nv_options(enable=["id_model"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note is one-time: a second scope with the name is silent
        nv_options(enable=["brand_new_option"])
    assert fake.calls == 1  # asked once per process


def test_newer_nvfuser_still_refuses_what_it_does_not_accept(newer_nvfuser: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake = probe(monkeypatch, enable={"fuse_matmul", "p2p_protocol", "brand_new_option"})
    with pytest.raises(UnknownOptionError, match="did you mean 'fuse_matmul'") as info:
        nv_options(enable=["fuse_matmull"])
    assert f"older than the installed {NEWER}, and that nvFuser does not accept it either" in str(info.value)
    # A name that needs arguments stays refused even though nvFuser lists it.
    with pytest.raises(UnknownOptionError, match="carry no arguments"):
        nv_options(enable=["p2p_protocol"])
    with pytest.raises(UnknownOptionError, match=r"carry no arguments"):
        nvscope.catalog().check("enable", "brand_new_option(x)")
    # Accepted in the other list only: the hint names that list, in the caller's syntax.
    with pytest.raises(UnknownOptionError, match=r"that nvFuser accepts it as an enable option: pass it as "
                                                 r"enable=\['brand_new_option'\]"):
        nv_options(disable=["brand_new_option"])
    with pytest.raises(UnknownOptionError, match=r"pass it as --enable brand_new_option\)$"):
        nvscope.catalog().check("disable", "brand_new_option", spelling="--{kind} {name}")
    assert fake.calls == 1


def test_newer_nvfuser_that_cannot_be_asked_says_how_to_override(newer_nvfuser: None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake = probe(monkeypatch, error=RuntimeError("nvFuser did not list its enable options (exit 1): no CUDA"))
    for _ in range(2):
        with pytest.raises(UnknownOptionError) as info:
            nv_options(enable=["brand_new_option"])
        message = str(info.value)
        assert f"covers nvFuser up to {data.VERSIONS[-1][0]}, older than the installed {NEWER}" in message
        assert "could not be asked" in message and "no CUDA" in message
        assert "NVSCOPE_TRUST_NVFUSER=1" in message
    assert fake.calls == 1  # a failed probe is not repeated at every miss
    monkeypatch.setenv("NVSCOPE_TRUST_NVFUSER", "1")
    with pytest.warns(nvscope.NvscopeWarning, match=r"'brand_new_option'.*unvalidated \(NVSCOPE_TRUST_NVFUSER=1\)"):
        assert nv_options(enable=["brand_new_option"]).options == nvscope.OptionSet(["brand_new_option"])
    with pytest.raises(UnknownOptionError, match="carry no arguments"):
        nv_options(enable=["p2p_protocol"])  # trusted or not, per-call options carry no arguments


def test_trust_skips_the_probe(newer_nvfuser: None, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = probe(monkeypatch, enable={"fuse_matmul"})
    monkeypatch.setenv("NVSCOPE_TRUST_NVFUSER", "1")
    with pytest.warns(nvscope.NvscopeWarning, match="unvalidated"):
        nv_options(enable=["brand_new_option"])
    assert fake.calls == 0


def test_one_probe_when_threads_miss_at_once(newer_nvfuser: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import warnings

    fake = probe(monkeypatch, enable={"brand_new_option"}, delay=0.05)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def miss() -> None:
        barrier.wait()
        try:
            nvscope.catalog().check("enable", "brand_new_option")
        except BaseException as error:
            errors.append(error)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nvscope.NvscopeWarning)
        threads = [threading.Thread(target=miss) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and fake.calls == 1


def test_no_probe_when_the_catalog_covers_the_installed_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, f"nvfuser-{data.VERSIONS[-1][0]}.dist-info")
    fake = probe(monkeypatch, enable={"brand_new_option"})
    with pytest.raises(UnknownOptionError) as info:
        nv_options(enable=["brand_new_option"])
    assert "older than the installed" not in str(info.value)
    assert fake.calls == 0


def test_trust_passes_unknown_names_but_never_argument_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path, monkeypatch, "nvfuser-0.2.35.dist-info")
    monkeypatch.setenv("NVSCOPE_TRUST_NVFUSER", "1")
    with pytest.warns(nvscope.NvscopeWarning, match="unvalidated"):
        nv_options(enable=["from_a_custom_build"])
    with pytest.raises(UnknownOptionError, match=r"0\.2\.36\+"):
        nv_options(enable=["p2p_transport"])  # needs arguments (in 0.2.36+): refused, trusted or not


def test_trust_refuses_a_name_in_the_wrong_list_of_a_covered_nvfuser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     fresh_catalog: None) -> None:
    """The catalog has matmul_expr_eval (as a disable option): trusting nvFuser is for names it lacks."""
    import warnings

    fake_nvfuser(tmp_path, monkeypatch, f"nvfuser-{data.VERSIONS[-1][0]}.dist-info")
    monkeypatch.setenv("NVSCOPE_TRUST_NVFUSER", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no "not in nvscope's option catalog" warning on the way
        with pytest.raises(UnknownOptionError) as info:
            nv_options(enable=["matmul_expr_eval"])
    assert str(info.value) == ("'matmul_expr_eval' is an nvFuser disable option, not an enable option: pass it as "
                               "disable=['matmul_expr_eval']")


def test_trust_on_a_newer_nvfuser_passes_a_name_in_the_other_list_and_says_so(newer_nvfuser: None,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = probe(monkeypatch, enable={"fuse_matmul"})
    monkeypatch.setenv("NVSCOPE_TRUST_NVFUSER", "1")  # that nvFuser may have moved it between the lists
    with pytest.warns(nvscope.NvscopeWarning) as notes:
        assert nv_options(enable=["matmul_expr_eval"]).options == nvscope.OptionSet(["matmul_expr_eval"])
    (note,) = [str(n.message) for n in notes]
    assert note == (f"nvFuser enable option 'matmul_expr_eval' is a disable option in nvscope's catalog (which covers "
                    f"nvFuser up to {data.VERSIONS[-1][0]}), not an enable option: passed to nvFuser unvalidated "
                    "(NVSCOPE_TRUST_NVFUSER=1); if it is still a disable option there, pass it as "
                    "disable=['matmul_expr_eval']")
    assert "not in nvscope's option catalog" not in note and fake.calls == 0


# --- nightly builds: where a version number is not enough (issue 27 item 15) ----------------------------------------

def test_a_nightly_dated_before_a_name_came_lacks_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     fresh_catalog: None) -> None:
    fake_nvfuser(tmp_path / "release", monkeypatch, "nvfuser_cu130_torch210-0.2.36.dist-info")
    release = nvscope.catalog().names("enable")
    assert "p2p_transport" in release  # a release keeps the whole version's names
    fake_nvfuser(tmp_path / "nightly", monkeypatch, "nvfuser_cu130_torch210-0.2.36.dev20260301.dist-info")
    assert nvscope.catalog().names("enable") == release - {"p2p_transport"}  # came upstream on 2026-04-01
    with pytest.raises(UnknownOptionError, match=r"0\.2\.36\.dev20260301"):
        nv_options(enable=["p2p_transport"])
    fake_nvfuser(tmp_path / "later", monkeypatch, "nvfuser_cu130_torch210-0.2.36.dev20260401.dist-info")
    assert nvscope.catalog().names("enable") == release


def test_probe_agrees_with_the_catalog_on_a_dated_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        fresh_catalog: None,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`nvscope options --probe` on nvFuser 0.2.36.dev20260301 reported p2p_transport "in the catalog for this version
    but not accepted by this build": that build accepts 0.2.36's names but p2p_transport, and the catalog agrees."""
    from nvscope.cli import main

    fake_nvfuser(tmp_path / "release", monkeypatch, "nvfuser_cu130_torch210-0.2.36.dist-info")
    names = {kind: nvscope.catalog().names(kind) for kind in ("enable", "disable")}
    fake_nvfuser(tmp_path / "nightly", monkeypatch, "nvfuser_cu130_torch210-0.2.36.dev20260301.dist-info")
    probe(monkeypatch, enable=names["enable"] - {"p2p_transport"}, disable=names["disable"])
    assert main(["options", "--probe"]) == 0
    out = capsys.readouterr().out
    assert "not accepted by this build" not in out and "missing from the catalog" not in out, out


@pytest.mark.parametrize(("version", "has"), [
    ("0.2.36.dev20260331", False), ("0.2.36.dev20260401", True), ("0.2.36.dev20260401+cu130", True),
    ("0.2.36", True), ("0.2.35.dev20260501", False), ("0.2.37.dev20260101", True), ("0.2.36.dev3", True),
])
def test_available_in_reads_a_nightlys_date_only_for_the_version_the_name_came_in(version: str, has: bool) -> None:
    option = nvscope.catalog().get("enable", "p2p_transport")
    assert option is not None and option.since_day == "2026-04-01"
    assert option.available_in(Version(version)) is has


def test_a_name_that_left_mid_version_is_gone_from_nightlies_dated_after() -> None:
    info = option_catalog.OptionInfo("enable", "gone", "debug", "Gone", "0.2.30", "0.2.31", False,
                                     until_day="2026-02-10")
    assert info.available_in(Version("0.2.31.dev20260209")) and info.available_in(Version("0.2.31"))
    assert not info.available_in(Version("0.2.31.dev20260210")) and not info.available_in(Version("0.2.32"))
