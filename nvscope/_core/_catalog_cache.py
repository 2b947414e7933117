"""`catalog()`, the cached catalog for the installed nvFuser, apart from the table and its class
(`nvscope._core._catalog`): those load on the first call, so that ``import nvscope`` does not read the table."""

from __future__ import annotations

import functools

from nvscope._core import _state

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:
    from nvscope._core._catalog import Catalog

__all__ = ["catalog"]  # and `_reset_cache`, for tests


@functools.cache
def catalog() -> Catalog:
    """The catalog for the installed nvFuser (or the whole bundled table when none is installed). Cached."""
    from nvscope._core._catalog import Catalog, _bundled, installed_nvfuser

    return Catalog(_bundled(), installed_nvfuser())


def _reset_cache() -> None:
    """Forget the cached catalog, installed version and probe (for tests that fake an installation)."""
    from nvscope._core import _catalog, _catalog_probe, _errors

    catalog.cache_clear()
    _catalog.installed_nvfuser.cache_clear()
    _errors.forget("catalog")
    _catalog_probe.reset()


_state.keep(__name__, "catalog", "the installed nvFuser's options: uninstall changes no installation; `_reset_cache` "
            "forgets them for tests that fake one")
