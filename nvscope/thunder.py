"""The Thunder adapter's public verbs: ``nvscope.thunder.install()``, ``uninstall()``, ``installed()``,
``unsupported()``, ``partitions(fusion)``. The adapter itself is `nvscope._exec._thunder`."""

from nvscope._exec._thunder import install, installed, partitions, uninstall, unsupported

__all__ = ["install", "installed", "partitions", "uninstall", "unsupported"]
