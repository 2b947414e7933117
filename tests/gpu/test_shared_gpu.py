"""GPU: fusions with identical nvFuser definitions share one compiled definition per option set (issue 26).

* Thunder's nanoGPT (2 layers: the layers' fusions repeat), forward + backward, scoped steps with sharing on and
  then, after ``nvscope.uninstall()``, with ``NVSCOPE_SHARE=0`` (each fusion's partition compiles its own): the warm
  steps' loss and every gradient equal bit for bit, or, where nvFuser's warm steps vary among themselves in this
  process (own, shared or private), within that variation; with sharing, the FusionDefinitions the partitions ran
  are exactly one per distinct printed definition (read off Thunder's own definitions, the oracle), and the audit
  says the same.
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
WARM = 3  # warm steps of each kind (Thunder's own, shared, private)


def _wrappers() -> list[Any]:
    import thunder.executors.nvfuserex_impl as impl

    # type(), not isinstance(): gc also lists dead weak proxies, and isinstance on one raises ReferenceError.
    return [o for o in gc.get_objects() if type(o) is impl.FusionDefinitionWrapper]


def _gap(x: Any, y: Any) -> float:
    """The largest elementwise difference; NaN where the other has NaN too counts as equal, NaN or inf against a
    number as inf (so one garbage value cannot hide behind another)."""
    if torch.equal(x, y):
        return 0.0
    both = torch.isnan(x) & torch.isnan(y)
    gap = (x.double() - y.double()).abs().nan_to_num(nan=float("inf"), posinf=float("inf"))
    return float(torch.where(both, torch.zeros_like(gap), gap).max())


def _spread(steps: list[tuple[Any, list[Any]]], i: int) -> float:
    """How far apart tensor ``i`` came out over warm steps that ran the same partitions: nvFuser's own variation."""
    flat = [[s[0], *s[1]] for s in steps]
    return max((_gap(a[i], b[i]) for k, a in enumerate(flat) for b in flat[k + 1:]), default=0.0)


def test_shared_and_private_partitions_give_the_same_bits_and_one_compile_per_definition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs are compared on warm steps only: on the H200 a *first* step right after nvFuser compiled was not
    repeatable in a process that ran other tests first, Thunder's own unscoped step included (its loss 8.97e-44, the
    warm one 10.8959). Warm steps are not always repeatable either (docs/limitations.md), hence the comparison
    within the variation that Thunder's own and the private warm steps show."""
    # workloads imports Thunder: here, so that the module collects (and skips) without it
    import thunder
    from workloads import fwd_bwd, nanogpt_model

    monkeypatch.delenv("NVSCOPE_SHARE", raising=False)
    nvscope.uninstall()
    model, idx, targets = nanogpt_model(4, 128, 2, 384)
    before = {id(w) for w in _wrappers()}
    jitted = thunder.jit(model)
    fwd_bwd(jitted, model, idx, targets)  # Thunder's own compile, unscoped
    own = [fwd_bwd(jitted, model, idx, targets) for _ in range(WARM)]
    wrappers = [w for w in _wrappers() if id(w) not in before and w.last_used is not None]
    distinct = {repr(w.last_used) for w in wrappers}
    assert len(distinct) < len(wrappers), "the layers' fusions should repeat: nothing to share"
    assert nvscope.thunder.install()
    with audit() as log, nv_options(enable=OPTIONS):
        fwd_bwd(jitted, model, idx, targets)  # compiles: each distinct definition once
        shared = [fwd_bwd(jitted, model, idx, targets) for _ in range(WARM)]
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
        fwd_bwd(jitted, model, idx, targets)
        private = [fwd_bwd(jitted, model, idx, targets) for _ in range(WARM)]
    assert all(r.shared_from is None for r in log.records)
    assert sum(r.partition == "new" for r in log.records) == len(wrappers)
    nvscope.uninstall()
    own += [fwd_bwd(jitted, model, idx, targets)]
    # Every shared warm step must match some private warm step to within the variation that the runs *without*
    # sharing show between their own warm steps (Thunder's own, private): bit for bit where those repeat. Why not bits
    # always: on the H200 (2026-12-04, benchmarks/results/repeatability-2026-12-04/) nvFuser returned different outputs
    # for bit-identical inputs (a forward add + welford fusion, also in Thunder's own unscoped steps with nvscope
    # uninstalled), and warm scoped steps varied with private partitions as often as with shared ones. The shared
    # steps' own variation is not tolerated: were sharing to make steps vary, this fails. A definition run by the
    # wrong fusion gives differences beyond any of that; the options are checked by the partition tables above
    # (static_fusion_count changes kernel names, not numbers).
    names = ["loss"] + [name for name, _ in model.named_parameters()]
    kinds = {"own": own, "shared": shared, "private": private}
    by_kind = {kind: [_spread(steps, i) for i in range(len(names))] for kind, steps in kinds.items()}
    tolerance = [max(by_kind["own"][i], by_kind["private"][i]) for i in range(len(names))]
    beyond = []
    for k, step in enumerate(shared):
        for i, name in enumerate(names):
            gap = min(_gap([step[0], *step[1]][i], [p[0], *p[1]][i]) for p in private)
            if gap > tolerance[i]:
                beyond.append(f"shared warm step {k}, {name}: {gap:.3g} from the nearest private step; "
                              f"own and private warm steps vary by {tolerance[i]:.3g}")
    varied = {kind: [f"{name} ({noise:.3g})" for name, noise in zip(names, spreads, strict=True) if noise]
              for kind, spreads in by_kind.items()}
    assert not beyond, f"sharing changed outputs: {beyond}; warm steps varied among themselves: {varied}"
    if any(varied.values()):
        warnings.warn(f"warm steps varied among themselves in this process (nvFuser); shared and private were "
                      f"compared within the variation of own and private: {varied}", stacklevel=1)


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
