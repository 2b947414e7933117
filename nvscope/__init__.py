"""nvscope: scoped nvFuser developer options for Lightning Thunder and nvFuser.

    from nvscope import nv_options, with_nv_options
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        loss = jitted_model(x)          # every nvFuser fusion executed here gets these options

``import nvscope`` imports no torch, Thunder or nvFuser, and of nvscope only this face: the public names are listed
once, in ``__init__.pyi``, and load on first use; adapters load when a scope first needs them.
"""

import os

from nvscope._core._lazy import lazy_face, load, on_enter

on_enter("nvscope._exec._autoinstall:ensure_adapters")  # scopes install the adapters of the frameworks imported
if "NVSCOPE_SHARE" in os.environ:  # =all shares program-wide from the start: install and watch imports now
    load("nvscope._exec._autoinstall:share_program_wide")()
__all__, __getattr__, __dir__ = lazy_face(__name__, __file__,
                                          __version__=lambda load=load: load("nvscope._core:version")())
del os, lazy_face, load, on_enter
