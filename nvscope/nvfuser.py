"""The direct nvFuser adapter's public verbs (no Thunder)::

    import nvfuser_direct, nvscope.nvfuser
    nvscope.nvfuser.install()
    with nvscope.nv_options(enable=["fuse_matmul"]):
        fd.execute(inputs)      # runs a FusionDefinition rebuilt for this option set, with the options

The adapter itself is `nvscope._exec._nvfuser`.
"""

from nvscope._core._errors import UnsupportedError
from nvscope._exec._nvfuser import frontends, install, installed, uninstall

__all__ = ["UnsupportedError", "frontends", "install", "installed", "uninstall"]
