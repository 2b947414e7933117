"""Layer 2, execution: the `Adapter` interface, the one execution path, fusion tables and partitions, events and
audit, failure notes and repro scripts, nvFuser's frontends, the Thunder and nvFuser adapters, auto-install.
Imports only `nvscope._core` from below (tests/test_layers.py)."""

# The interface: what the layers above may use (they import it from here, never from a module of this layer; tests/
# test_layers.py). Loaded on first use, so that `import nvscope` loads only the modules it needs (the adapters load
# when a scope first needs them). Modules named as themselves are namespaces (``_shared.compiling()``).
from nvscope._core import lazy_attributes

__all__ = [
    "AUTOGRAD_MODULE",
    "IMPL_MODULE",
    "MIN_VERSION",
    "AuditLog",
    "FusionRecord",
    "FusionTable",
    "_autoinstall",
    "_events",
    "_frontends",
    "_nvfuser",
    "_shared",
    "_thunder",
    "audit",
    "escape_refusal",
    "failure_note",
    "fusions",
    "install",
    "private_failures",
    "repro_paths",
    "scripts_named_in",
]

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:  # what __getattr__ loads, spelled out for type checkers
    from . import _autoinstall as _autoinstall
    from . import _events as _events
    from . import _frontends as _frontends
    from . import _nvfuser as _nvfuser
    from . import _shared as _shared
    from . import _thunder as _thunder
    from ._audit import AuditLog as AuditLog
    from ._audit import audit as audit
    from ._audit import fusions as fusions
    from ._autoinstall import install as install
    from ._events import FusionRecord as FusionRecord
    from ._execute import private_failures as private_failures
    from ._frontends import MIN_VERSION as MIN_VERSION
    from ._fusion_table import FusionTable as FusionTable
    from ._repro import failure_note as failure_note
    from ._repro import repro_paths as repro_paths
    from ._repro import scripts_named_in as scripts_named_in
    from ._thunder_adapter import IMPL_MODULE as IMPL_MODULE
    from ._thunder_autograd import AUTOGRAD_MODULE as AUTOGRAD_MODULE
    from ._thunder_region import escape_refusal as escape_refusal
else:  # hidden from type checkers, which then still report a misspelt name
    __getattr__ = lazy_attributes(__name__, {
        "AuditLog": "._audit", "audit": "._audit", "fusions": "._audit",
        "install": "._autoinstall",
        "FusionRecord": "._events",
        "private_failures": "._execute",
        "MIN_VERSION": "._frontends",
        "FusionTable": "._fusion_table",
        "failure_note": "._repro", "repro_paths": "._repro", "scripts_named_in": "._repro",
        "IMPL_MODULE": "._thunder_adapter",
        "AUTOGRAD_MODULE": "._thunder_autograd",
        "escape_refusal": "._thunder_region",
    })
