"""`catalog()`, kept apart from the table and its class so that ``import nvscope`` does not load them."""

from __future__ import annotations

import functools

from nvscope._core import _state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvscope._core._catalog import Catalog

__all__ = ["catalog"]  # and `_reset_cache`, for tests


@functools.cache
def catalog() -> Catalog:
    """The catalog for the installed nvFuser (the whole table when none is installed)."""
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
