"""GPU: fusions with identical nvFuser definitions share one compiled definition per option set (issue 26).

* Thunder's nanoGPT (2 layers: the layers' fusions repeat), forward + backward, scoped steps with sharing on and
  then, after ``nvscope.uninstall()``, with ``NVSCOPE_SHARE=0`` (each fusion's partition compiles its own): the warm
  steps' loss and every gradient equal bit for bit (to tolerance where warm steps, own, shared or private, do not
  repeat their own bits in this process);
  with sharing, the FusionDefinitions the partitions ran are exactly one per
  distinct printed definition (read off Thunder's own definitions, the oracle), and the audit says the same.
* The legacy ``nvfuser`` frontend (Thunder 0.2.6's nvFuser): two identical definitions executed under one scope
  add one entry to nvFuser's own FusionCache (nvscope's salt depends on the options only), and the unscoped
  definition keeps an entry of its own.
"""

from __future__ import annotations

import gc
import importlib.util
import warnings
from typing import Any

import pytest

import nvscope
import nvscope.nvfuser
import nvscope.thunder
from nvscope import OptionSet, audit, nv_options

torch = pytest.importorskip("torch")
OPTIONS = ["static_fusion_count"]


def _wrappers() -> list[Any]:
    import thunder.executors.nvfuserex_impl as impl

    # type(), not isinstance(): gc also lists dead weak proxies, and isinstance on one raises ReferenceError.
    return [o for o in gc.get_objects() if type(o) is impl.FusionDefinitionWrapper]


def _step(jitted: Any, model: Any, idx: Any, targets: Any) -> tuple[Any, list[Any]]:
    for p in model.parameters():
        p.grad = None
    loss = jitted(idx, targets)[1]
    loss.backward()
    torch.cuda.synchronize()
    return loss.detach().clone(), [p.grad.detach().clone() for p in model.parameters()]


def _differences(a: tuple[Any, list[Any]], b: tuple[Any, list[Any]], names: list[str]) -> list[str]:
    """Each tensor of ``a`` that differs from ``b``: its name, shape, how many elements differ and the largest gap."""
    found = []
    for name, x, y in zip(names, [a[0], *a[1]], [b[0], *b[1]], strict=True):
        if not torch.equal(x, y):
            gap = (x - y).abs()
            found.append(f"{name} {tuple(x.shape)}: {int((gap > 0).sum())} differ, max {float(gap.max()):.3g}")
    return found


def _same(a: tuple[Any, list[Any]], b: tuple[Any, list[Any]]) -> bool:
    return bool(torch.equal(a[0], b[0]) and len(a[1]) == len(b[1])
                and all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True)))


def test_shared_and_private_partitions_give_the_same_bits_and_one_compile_per_definition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs are compared on warm steps: on the H200 a *first* step right after nvFuser compiled was not repeatable
    in a process that ran other tests first, Thunder's own unscoped step included (its loss 8.97e-44 or 0.0, the warm
    one 10.8959), so first steps say nothing about sharing (docs/limitations.md)."""
    import thunder
    from workloads import nanogpt_model  # imports Thunder: here, so that the module collects (and skips) without it

    monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    nvscope.uninstall()
    model, idx, targets = nanogpt_model(4, 128, 2, 384)
    before = {id(w) for w in _wrappers()}
    jitted = thunder.jit(model)
    _step(jitted, model, idx, targets)  # Thunder's own compile, unscoped
    own = _step(jitted, model, idx, targets)  # warm
    wrappers = [w for w in _wrappers() if id(w) not in before and w.last_used is not None]
    distinct = {repr(w.last_used) for w in wrappers}
    assert len(distinct) < len(wrappers), "the layers' fusions should repeat: nothing to share"
    assert nvscope.thunder.install()
    with audit() as log, nv_options(enable=OPTIONS):
        _step(jitted, model, idx, targets)  # compiles: each distinct definition once
        shared = _step(jitted, model, idx, targets)
        shared_again = _step(jitted, model, idx, targets)
    ran = []
    for w in wrappers:
        table = nvscope.thunder.partitions(w)
        if table is not None and OptionSet(OPTIONS) in table:
            ran.append(table.get(OptionSet(OPTIONS))[0].runner.last_used)
    assert len(ran) == len(wrappers)
    assert len({id(fd) for fd in ran}) == len(distinct)  # one compiled definition per distinct definition
    new = [r for r in log.records if r.partition == "new"]
    assert sum(r.shared_from is None for r in new) == len(distinct)
    assert sum(r.shared_from is not None for r in new) == len(wrappers) - len(distinct)

    nvscope.uninstall()  # drops every partition and the shared definitions
    monkeypatch.setenv("NVSCOPE_SHARE", "0")
    assert nvscope.thunder.install()
    with audit() as log, nv_options(enable=OPTIONS):
        _step(jitted, model, idx, targets)
        private = _step(jitted, model, idx, targets)
        private_again = _step(jitted, model, idx, targets)
    assert all(r.shared_from is None for r in log.records)
    assert sum(r.partition == "new" for r in log.records) == len(wrappers)
    nvscope.uninstall()
    own_again = _step(jitted, model, idx, targets)
    # Bit for bit is asked only where each way of running repeats its own bits (2026-12-04, next: shared and private
    # warm steps differed once in a process whose unscoped warm steps repeated; two warm steps of each now say whether
    # that was sharing or nvFuser varying): the message names every tensor that differs, and by how much.
    names = ["loss"] + [name for name, _ in model.named_parameters()]
    repeats = {"own": _differences(own, own_again, names), "shared": _differences(shared, shared_again, names),
               "private": _differences(private, private_again, names)}
    if not any(repeats.values()):
        assert _same(shared, private), f"shared != private: {_differences(shared, private, names)}"
    else:  # warm steps differ among themselves: sharing can only be held to its tolerance
        # ... unless only the shared ones vary: that points at sharing, not at nvFuser or PyTorch.
        assert repeats["own"] or repeats["private"], f"only the shared warm steps vary: {repeats}"
        warnings.warn(f"warm steps not repeatable in this process: {repeats}", stacklevel=1)
        torch.testing.assert_close(shared[0], private[0])
        for a, b in zip(shared[1], private[1], strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.skipif(importlib.util.find_spec("nvfuser") is None, reason="the legacy nvfuser frontend is not installed")
def test_legacy_frontend_shares_identical_definitions_in_its_own_cache() -> None:
    import nvfuser

    nvscope.uninstall()
    assert nvscope.nvfuser.install()
    cache = nvfuser.FusionCache.get()

    def define() -> Any:
        with nvfuser.FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nvfuser.DataType.Float)
            fd.add_output(fd.ops.relu(fd.ops.mul(x, x)))
        return fd

    x = torch.randn(64, 64, device="cuda")
    first, second = define(), define()
    first.execute([x])  # the default: one entry
    before = cache.num_fusions()
    with nv_options(enable=OPTIONS):
        out_first = first.execute([x])[0]
        out_second = second.execute([x])[0]
    assert cache.num_fusions() == before + 1  # one salted entry for both definitions under these options
    assert torch.equal(out_first, out_second)
    nvscope.uninstall()
