"""nvscope: scoped nvFuser developer options for Lightning Thunder and nvFuser.

    from nvscope import nv_options, with_nv_options
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        loss = jitted_model(x)          # every nvFuser fusion executed here gets these options

``import nvscope`` imports no torch, Thunder or nvFuser. The public names are listed once, in ``__init__.pyi``, and
load on first use; the core loads with the package, and adapters when a scope first needs them.
"""

from nvscope._core import lazy_face, version
from nvscope._exec import enable

enable()  # scopes install the adapters of the frameworks a program imports
__all__, __getattr__, __dir__ = lazy_face(__name__, __file__, __version__=version)
del enable, lazy_face, version
