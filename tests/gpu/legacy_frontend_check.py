"""Run by test_nvfuser_gpu.py in a process of its own: the legacy `nvfuser` frontend under nvscope. Prints JSON."""

from __future__ import annotations

import json
import warnings

import nvfuser  # the legacy frontend
import torch
from gpu_helpers import cublas, kernels, nvfuser_matmul

import nvscope
import nvscope.nvfuser
from nvscope._core._optionset import OptionSet
from nvscope._exec._legacy import LEGACY

nvscope.set_development_mode(True)
nvscope.nvfuser.install()
CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}


def define() -> nvfuser.FusionDefinition:
    with nvfuser.FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nvfuser.DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nvfuser.DataType.BFloat16)
        fd.add_output(fd.ops.matmul(a, b))
    return fd


x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
y = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
expected = x.float() @ y.float()
fd = define()
result: dict[str, object] = {}
names, (out,) = kernels(lambda: fd.execute([x, y]))
torch.testing.assert_close(out.float(), expected, atol=1.0, rtol=3e-2)
result["default_kernels_cublas"] = bool(cublas(names)) and not nvfuser_matmul(names)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with nvscope.nv_options(**CODEGEN):
        names, (out,) = kernels(lambda: fd.execute([x, y]))
result["reset_warnings_in_scope"] = sum("Reset the FusionCache" in str(w.message) for w in caught)
torch.testing.assert_close(out.float(), expected, atol=1.0, rtol=3e-2)
result["scoped_kernels_nvfuser_matmul"] = bool(nvfuser_matmul(names)) and not cublas(names)
names, _ = kernels(lambda: fd.execute([x, y]))
result["default_again_cublas"] = bool(cublas(names)) and not nvfuser_matmul(names)

salted_a = LEGACY.rebuild(fd, nvfuser, OptionSet(["fuse_matmul"]))
salted_b = LEGACY.rebuild(fd, nvfuser, OptionSet(["static_fusion_count"]))
salted_a2 = LEGACY.rebuild(fd, nvfuser, OptionSet(["fuse_matmul"]))
result["ids"] = [fd.id(), salted_a.id(), salted_b.id(), salted_a2.id()]
result["salted_ids_distinct"] = len({fd.id(), salted_a.id(), salted_b.id()}) == 3
result["same_set_same_id"] = salted_a.id() == salted_a2.id()

with warnings.catch_warnings(record=True) as caught:  # a user's own call with options keeps nvFuser's warning
    warnings.simplefilter("always")
    define().execute([x, y], _enable_options=["static_fusion_count"])
result["reset_warnings_user_call"] = sum("Reset the FusionCache" in str(w.message) for w in caught)
print(json.dumps(result))
