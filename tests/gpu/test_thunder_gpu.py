"""Thunder + nvFuser on CUDA: scoped options really apply at each fusion execution, proven by kernel names."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading

import pytest
from gpu_helpers import cublas, kernels, named_by_scheduler, numbered, nvfuser_any, nvfuser_matmul, subprocess_env

import nvscope
import nvscope.thunder
from nvscope import nv_options, with_nv_options

torch = pytest.importorskip("torch")
thunder = pytest.importorskip("thunder")

CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}
COUNT = {"enable": ["static_fusion_count"]}


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b) * 2


def _matmul_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    return a, b


def _check_matmul(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(out.float(), ((a.float() @ b.float()) * 2), atol=1.0, rtol=3e-2)


def test_zero_setup_in_a_fresh_process() -> None:
    """Importing Thunder and entering a scope is all it takes; nothing is patched before that."""
    code = (
        "import thunder, nvscope, nvscope.thunder as t\n"
        "nvscope.set_development_mode(True)\n"
        "assert not t.installed()\n"
        "with nvscope.nv_options(enable=['static_fusion_count']):\n"
        "    assert t.installed()\n"
        "print('zero-setup ok')\n"
    )
    env = subprocess_env()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "zero-setup ok" in done.stdout, done.stdout + done.stderr


def test_install_uninstall_round_trip() -> None:
    import thunder.executors.nvfuserex_impl as impl
    import thunder.executors.torch_autograd as autograd

    gc.collect()  # a frame an earlier test's exception holds in a cycle keeps the patches in place until freed
    original = impl.FusionDefinitionWrapper.__call__
    original_forward = autograd.ThunderFunction.__dict__["forward"].__func__
    assert nvscope.thunder.install()
    assert impl.FusionDefinitionWrapper.__call__ is original  # on demand: Thunder's own while no scope exists
    with nv_options(**COUNT):
        patched = impl.FusionDefinitionWrapper.__call__
        assert patched.__wrapped__ is original
        assert autograd.ThunderFunction.__dict__["forward"].__func__.__wrapped__ is original_forward
        assert nvscope.thunder.install()  # twice is harmless
        assert impl.FusionDefinitionWrapper.__call__ is patched
    assert nvscope.thunder.uninstall()
    assert impl.FusionDefinitionWrapper.__call__ is original
    assert autograd.ThunderFunction.__dict__["forward"].__func__ is original_forward
    assert not nvscope.thunder.uninstall()
    with nv_options(**COUNT):  # an explicit uninstall is respected by later scopes
        assert not nvscope.thunder.installed()
    assert nvscope.thunder.install()
    with nv_options(**COUNT):
        assert nvscope.thunder.installed()


@pytest.mark.parametrize("scoped_first", [False, True], ids=["default-first", "scoped-first"])
def test_matmul_codegen_scoped_and_back(scoped_first: bool) -> None:
    a, b = _matmul_inputs()
    jfn = thunder.jit(_mm, nv_enable_matmul=True)

    def default() -> list[str]:
        names, out = kernels(lambda: jfn(a, b))
        _check_matmul(out, a, b)
        assert cublas(names), names
        assert not nvfuser_matmul(names), names
        return names

    def scoped() -> list[str]:
        with nv_options(**CODEGEN):
            names, out = kernels(lambda: jfn(a, b))
        _check_matmul(out, a, b)
        assert nvfuser_matmul(names), names
        assert not cublas(names), names
        return names

    with nvscope.audit() as log:
        if scoped_first:
            scoped()
            default()
            scoped()
        else:
            default()
            scoped()
            default()
            scoped()
    scoped_records = [r for r in log.records if r.route != "default"]
    # One partition compiled for the option set on the first scoped call, reused on the second.
    assert [r.route for r in scoped_records] == ["new", "reused"], log.summary()
    assert all(r.options == nvscope.OptionSet(**CODEGEN) for r in scoped_records)


def test_compile_time_options_union_scope() -> None:
    """Effective options = Thunder's compile-time nv_enable_options | the scope: both halves visible in kernels."""
    a, b = _matmul_inputs()
    jfn = thunder.jit(_mm, nv_enable_matmul=True, nv_enable_options=["fuse_matmul"])
    names, _ = kernels(lambda: jfn(a, b))
    assert nvfuser_matmul(names) and not cublas(names) and not numbered(names), names  # compile-time options
    with nvscope.audit() as log, nv_options(**COUNT):  # the scope adds static_fusion_count
        names, out = kernels(lambda: jfn(a, b))
    _check_matmul(out, a, b)
    assert numbered(names) and not cublas(names), names  # both: nvFuser matmul, numbered kernel names
    assert {r.options for r in log.records} == {nvscope.OptionSet(["fuse_matmul", "static_fusion_count"])}
    with nvscope.audit() as log, nv_options(enable=["fuse_matmul"]):  # adds nothing: Thunder's own cache serves
        names, _ = kernels(lambda: jfn(a, b))
    assert nvfuser_matmul(names) and not numbered(names), names
    assert {r.route for r in log.records} == {"default"}


class _MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(256, 512)
        self.l2 = torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(self.l2(torch.nn.functional.gelu(self.l1(x))) + x, (256,))


def _model(kind: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = _MLP().cuda()
    if kind == "jit":
        compiled = thunder.jit(model)
    else:
        from thunder.dynamo import thunderfx

        compiled = thunderfx(model)
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    return compiled, x


@pytest.mark.parametrize("kind", ["jit", "thunderfx"])
def test_decorated_train_step_runs_forward_and_backward_under_options(kind: str) -> None:
    model, x = _model(kind)
    threads: set[str] = set()

    @with_nv_options(**COUNT)
    def step() -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        return loss

    step()  # compile outside the profiler
    with nvscope.audit() as log:
        names, _ = kernels(step)
    threads = {r.thread for r in log.records if r.phase == "backward"}
    assert numbered(names), names
    assert not named_by_scheduler(names), names  # every nvFuser kernel, forward and backward, ran under the scope
    assert {r.phase for r in log.records} == {"forward", "backward"}
    assert all(r.options.enable == {"static_fusion_count"} for r in log.records)
    if kind == "thunderfx":
        assert threads and threading.current_thread().name not in threads  # backward on the autograd device thread

    # Outside the scope the same model runs its default kernels again: nothing leaked.
    names, _ = kernels(lambda: model(x).square().mean().backward())
    assert nvfuser_any(names) and not numbered(names), names


@pytest.mark.parametrize("kind", ["jit", "thunderfx"])
def test_backward_follows_its_forward_scope(kind: str) -> None:
    model, x = _model(kind)
    for _ in range(2):  # warm both partitions
        with nv_options(**COUNT):
            loss = model(x).square().mean()
        loss.backward()
    with nv_options(**COUNT):
        loss = model(x).square().mean()
    names, _ = kernels(loss.backward)  # backward outside any scope: runs under its forward's options
    assert numbered(names) and not named_by_scheduler(names), names


@pytest.mark.parametrize("kind", ["jit", "thunderfx"])
def test_scope_around_backward_alone(kind: str) -> None:
    """Documented: with thunder.jit the backward runs on the calling thread, so a scope around .backward() applies;
    with thunderfx it runs on PyTorch's autograd device thread, where the caller's scope is not visible."""
    model, x = _model(kind)
    for _ in range(2):
        model(x).square().mean().backward()
        loss = model(x).square().mean()
        with nv_options(**COUNT):
            loss.backward()
    loss = model(x).square().mean()
    with nv_options(**COUNT):
        names, _ = kernels(loss.backward)
    if kind == "jit":
        assert numbered(names) and not named_by_scheduler(names), names
    else:
        assert named_by_scheduler(names) and not numbered(names), names


def test_two_threads_each_get_exactly_their_own_options() -> None:
    def make(i: int):  # distinct pointwise fusions, compiled concurrently for the first time
        return thunder.jit(lambda t: (t.sin() * (i + 2)).cos() + i)

    scoped_fns = [make(i) for i in range(4)]
    plain_fns = [make(i + 10) for i in range(4)]
    x = torch.randn(4096, 1024, device="cuda")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(fns: list, scoped: bool) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                for fn in fns:
                    if scoped:
                        with nv_options(**COUNT):
                            fn(x)
                    else:
                        fn(x)
            torch.cuda.synchronize()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(scoped_fns, True)),
        threading.Thread(target=run, args=(plain_fns, False)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # The kernels compiled during the concurrent phase are cached: their names tell which options they got.
    for i, fn in enumerate(scoped_fns):
        with nv_options(**COUNT):
            names, out = kernels(lambda fn=fn: fn(x))
        assert numbered(names) and not named_by_scheduler(names), names
        torch.testing.assert_close(out, (x.sin() * (i + 2)).cos() + i)
    for i, fn in enumerate(plain_fns):
        names, out = kernels(lambda fn=fn: fn(x))
        assert named_by_scheduler(names) and not numbered(names), names
        torch.testing.assert_close(out, (x.sin() * (i + 12)).cos() + i + 10)


def test_unknown_option_fails_early_and_scope_unchanged() -> None:
    with pytest.raises(nvscope.UnknownOptionError, match="fuse_matmul"):
        nv_options(enable=["fuse_matmull"])
    assert nvscope.current_options() == nvscope.OptionSet()


def test_compare_ab_in_one_process() -> None:
    a, b = _matmul_inputs()
    jfn = thunder.jit(_mm, nv_enable_matmul=True)
    result = nvscope.compare(jfn, a, b, variants={"aten": {}, "codegen": CODEGEN}, warmup=2, repeat=10, show=False)
    aten, codegen = result["aten"], result["codegen"]
    assert aten.timer == codegen.timer == "CUDA events"
    assert cublas(list(aten.kernels)) and not nvfuser_matmul(list(aten.kernels)), aten.kernels
    assert nvfuser_matmul(list(codegen.kernels)) and not cublas(list(codegen.kernels)), codegen.kernels
    assert aten.max_abs_diff == 0.0
    assert codegen.max_abs_diff is not None and codegen.max_abs_diff < 4.0  # bf16 2048-deep dot products, x2
    assert len(codegen.times_ms) == 10 and codegen.median_ms > 0
    assert "codegen" in result.table()


def test_bundled_catalog_covers_what_the_installed_nvfuser_accepts() -> None:
    """nvFuser's own list (from its error for an invalid NVFUSER_ENABLE/DISABLE) against the bundled catalog."""
    from nvscope._core._catalog_probe import probe_installed

    probed = probe_installed()
    catalog = nvscope.catalog()
    for kind in ("enable", "disable"):
        missing = probed[kind] - catalog.names(kind)  # type: ignore[arg-type]
        assert not missing, f"{kind} names nvFuser accepts but the catalog lacks: {sorted(missing)}"
        extra = catalog.names(kind) - probed[kind]  # type: ignore[arg-type]
        print(f"{kind}: nvFuser accepts {len(probed[kind])}; catalog has {len(extra)} more for this version's "
              f"range: {sorted(extra)}")
