"""Zero setup: the first non-empty scope installs the executor adapters for whatever is already imported.

Registered as a scope enter hook by ``nvscope/__init__.py``. It imports an adapter only when its framework is
already in ``sys.modules`` (so ``import nvscope`` and scopes on a machine without Thunder stay light), and it looks
again only when ``sys.modules`` has grown since the last look: a scope entered in a loop costs one ``len()``.
``NVSCOPE_AUTOINSTALL=0`` turns it off (then call ``nvscope.thunder.install()`` yourself), and so does an
explicit ``nvscope.thunder.uninstall()``.
"""

from __future__ import annotations

import os
import sys

_seen_modules = -1


def ensure_adapters() -> None:
    global _seen_modules
    count = len(sys.modules)
    if count == _seen_modules:
        return
    _seen_modules = count
    if os.environ.get("NVSCOPE_AUTOINSTALL", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    if "thunder" in sys.modules:
        from nvscope import thunder

        if not thunder.installed() and thunder.autoinstall_allowed():
            thunder.install()
    _seen_modules = len(sys.modules)  # installing may import more; those need no second look
