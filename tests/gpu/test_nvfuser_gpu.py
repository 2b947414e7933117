"""Direct nvFuser users (no Thunder): nvscope.nvfuser.install() makes FusionDefinition.execute honour the scope."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import cublas, kernels, nvfuser_matmul, subprocess_env

import nvscope
import nvscope.nvfuser
from nvscope import nv_options

torch = pytest.importorskip("torch")
CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}


def test_nvfuser_direct_fusion_definition_partitions_per_option_set() -> None:
    nvfuser_direct = pytest.importorskip("nvfuser_direct")
    from nvfuser_direct import DataType, FusionDefinition

    assert nvscope.nvfuser.install() is True and "nvfuser_direct" in nvscope.nvfuser.frontends()
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.matmul(a, b))
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    expected = (x.float() @ y.float())
    try:
        for _ in range(2):
            names, (out,) = kernels(lambda: fd.execute([x, y]))
            assert cublas(names) and not nvfuser_matmul(names), names
            torch.testing.assert_close(out.float(), expected, atol=1.0, rtol=3e-2)
            with nv_options(**CODEGEN):
                names, (out,) = kernels(lambda: fd.execute([x, y]))
            assert nvfuser_matmul(names) and not cublas(names), names
            torch.testing.assert_close(out.float(), expected, atol=1.0, rtol=3e-2)
            with nv_options(**CODEGEN):  # nvscope's execute is in place while a scope exists (on demand)
                assert nvfuser_direct.FusionDefinition.execute.__wrapped__ is not None
    finally:
        nvscope.nvfuser.uninstall()
    assert not hasattr(nvfuser_direct.FusionDefinition.execute, "__wrapped__")


def test_legacy_frontend_in_its_own_process() -> None:
    """The legacy `nvfuser` module must not share a process with nvfuser_direct users: run it in a subprocess."""
    if not any(Path(p, "nvfuser").is_dir() for p in sys.path if p):
        pytest.skip("legacy nvfuser module not installed")
    script = Path(__file__).with_name("legacy_frontend_check.py")
    env = subprocess_env()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["default_kernels_cublas"] and result["scoped_kernels_nvfuser_matmul"], result
    assert result["default_again_cublas"], result
    assert result["salted_ids_distinct"] and result["same_set_same_id"], result
    assert result["reset_warnings_in_scope"] == 0, result
    assert result["reset_warnings_user_call"] >= 1, result
