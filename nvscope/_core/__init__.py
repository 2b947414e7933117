"""Layer 1, the core: option sets, fusion identity and selectors, the catalog, policy, the scope and its verbs,
development mode, environment, errors, text helpers and the patch ledger. Everything ``import nvscope`` loads; it
knows no Thunder or nvFuser object and imports nothing from the layers above (tests/test_layers.py)."""

# The interface: what the layers above may use (they import it from here, never from a module of this layer; tests/
# test_layers.py). Everything here loads with `import nvscope` anyway, so it is imported eagerly. Modules named as
# themselves are namespaces (``_patches.apply(...)``, ``_env.flag(...)``): state read at each use, or a family of
# verbs whose names only mean something beside their module's.
from . import _env as _env
from . import _fusion as _fusion
from . import _patches as _patches
from . import _policy as _policy
from . import _scope as _scope
from . import _state as _state
from . import _text as _text
from ._catalog_cache import catalog as catalog
from ._decorators import bind as bind
from ._devmode import dev_mode as dev_mode
from ._devmode import development_mode as development_mode
from ._devmode import is_development_mode as is_development_mode
from ._devmode import set_development_mode as set_development_mode
from ._devmode import strict_mode as strict_mode
from ._errors import ConfigWarning as ConfigWarning
from ._errors import DevelopmentModeError as DevelopmentModeError
from ._errors import DevelopmentModeWarning as DevelopmentModeWarning
from ._errors import EscapeWarning as EscapeWarning
from ._errors import FallbackWarning as FallbackWarning
from ._errors import NoEffectWarning as NoEffectWarning
from ._errors import NoFusionWarning as NoFusionWarning
from ._errors import NvscopeError as NvscopeError
from ._errors import NvscopeWarning as NvscopeWarning
from ._errors import SelectorError as SelectorError
from ._errors import UnclosedScopeWarning as UnclosedScopeWarning
from ._errors import UnknownOptionError as UnknownOptionError
from ._errors import UnsupportedError as UnsupportedError
from ._frames import PROGRAM as PROGRAM
from ._frames import ROOT as ROOT
from ._frames import carried as carried
from ._frames import program_sharing_suspended as program_sharing_suspended
from ._fusion import FusionInfo as FusionInfo
from ._fusion import Selector as Selector
from ._fusion import claim as claim
from ._fusion import exact_glob as exact_glob
from ._fusion import holding as holding
from ._fusion import ops_of_definition as ops_of_definition
from ._fusion import phase as phase
from ._fusion import remember as remember
from ._ids import note_ids as note_ids
from ._lazy import lazy_attributes as lazy_attributes
from ._lazy import lazy_face as lazy_face
from ._optionset import EMPTY as EMPTY
from ._optionset import NVFUSER_MODULES as NVFUSER_MODULES
from ._optionset import OptionSet as OptionSet
from ._optionset import process_options_shell as process_options_shell
from ._record import Record as Record
from ._scope import ACTIVE as ACTIVE
from ._scope import CHANGED as CHANGED
from ._scope import NO_EFFECT as NO_EFFECT
from ._scope import NOTHING as NOTHING
from ._scope import Frame as Frame
from ._scope import current_options as current_options
from ._scope import enter_frame as enter_frame
from ._scope import note_run as note_run
from ._scope import nv_options as nv_options
from ._scope import on_enter as on_enter
from ._scope import pop as pop
from ._scope import push as push
from ._scope import reset as reset
from ._scope import unwind as unwind
from ._scope import with_nv_options as with_nv_options
from ._site import definition_digest as definition_digest
from ._site import file_of as file_of
from ._site import inputs_digest as inputs_digest
from ._site import program_module as program_module
from ._site import run_as_program as run_as_program
from ._site import site_of as site_of
from ._text import cut as cut
from ._text import render as render
from ._validate import first_line as first_line
from ._validate import shown as shown
from ._validate import split as split
from ._version import version as version

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:
    from . import _catalog as _catalog
    from . import _catalog_probe as _catalog_probe
    from ._catalog import Catalog as Catalog
    from ._catalog import Kind as Kind
    from ._catalog import OptionInfo as OptionInfo
    from ._catalog import installed_nvfuser as installed_nvfuser
    from ._catalog_data import NIGHTLY_DATES as NIGHTLY_DATES
    from ._catalog_data import VERSIONS as VERSIONS
    from ._fusion import Phase as Phase

    bundled_options = _catalog._bundled
    close_matches = _catalog._close_matches
else:
    # The option table and its class load on first use (`catalog()` loads them on its first call): `import nvscope`
    # does not read the table. `_catalog` and `_catalog_probe`, named as namespaces, load through the import system.
    __getattr__ = lazy_attributes(__name__, {
        "Catalog": "._catalog",
        "OptionInfo": "._catalog",
        "bundled_options": "._catalog:_bundled",  # the catalog as shipped, whatever nvFuser is installed (check)
        "close_matches": "._catalog:_close_matches",  # the did-you-mean of option names, for keywords too
        "installed_nvfuser": "._catalog",
        "NIGHTLY_DATES": "._catalog_data",
        "VERSIONS": "._catalog_data",
    })
