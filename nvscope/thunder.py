"""The Thunder adapter's public verbs: ``nvscope.thunder.install()``, ``uninstall()``, ``installed()``,
``unsupported()``, ``partitions(fusion)`` and the `FusionTable` it returns. The adapter itself is
`nvscope._exec._thunder`."""

from nvscope._exec._fusion_table import FusionTable
from nvscope._exec._thunder import install, installed, partitions, uninstall, unsupported

__all__ = ["FusionTable", "install", "installed", "partitions", "uninstall", "unsupported"]
