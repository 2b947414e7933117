import pytest
import thunder
import torch

import nvscope

jf = thunder.jit(lambda a: (a * 2).sin())


def run():
    with nvscope.audit() as log:
        jf(torch.randn(8, device="cuda"))
    seen = [r.options.as_shell() or "(none)" for r in log.records]
    print("fusion ran with:", seen)
    assert seen == [nvscope.current_options().as_shell() or "(none)"]
    return seen


@pytest.mark.nv_options(enable=["static_fusion_count"])
def test_marked():
    assert "static_fusion_count" in run()[0]


def test_unmarked():
    run()
