"""Layer 3, the measuring kit the tools share: the harness (the step called, copied, compared and timed in rounds;
progress), candidates, numerics, timer, statistics, kernel names and schedulers, and what every result shares (JSON,
charts, the ``nv_options(...)`` line and the ``nvscope run`` command). Imports only the core and execution layers
(tests/test_layers.py)."""

# The interface: what the layers above may use (they import it from here, never from a module of this layer; tests/
# test_layers.py). Loaded on first use: `import nvscope._tools` must not import the whole kit. ``_checks`` is a
# namespace (``_checks.count(...)``, as the tools' argument checks read).
from nvscope._core import lazy_attributes

__all__ = [
    "DEFAULT_TOLERANCES",
    "MIN_SAMPLE_S",
    "OPTION_PAIRS",
    "TIMED",
    "Compiles",
    "JsonResult",
    "LoadableResult",
    "Measure",
    "Numerics",
    "RatioSummary",
    "Runner",
    "Segment",
    "SegmentRecorder",
    "Stage",
    "Timer",
    "Variant",
    "_checks",
    "arg",
    "attribute",
    "begin",
    "compare_leaves",
    "compile_clock",
    "compiles_dict",
    "compiles_lines",
    "compiles_of",
    "confirm",
    "count",
    "default_candidates",
    "figure_class",
    "flagged",
    "flatten_outputs",
    "grad_targets",
    "has_nan",
    "import_program_module",
    "import_script",
    "install_adapters",
    "kernel_names",
    "measure_of",
    "median",
    "now",
    "number",
    "numerics_dict",
    "numerics_from",
    "nv_options_line",
    "only_own",
    "options_dict",
    "options_from",
    "pair",
    "progress_printer",
    "raw_max_abs_diff",
    "recorder",
    "resolve",
    "rounds",
    "rounds_needed",
    "run_command",
    "seconds",
    "spec",
    "step_callable",
    "step_keywords",
    "summarize",
]

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:  # what __getattr__ loads, spelled out for type checkers
    from . import _checks as _checks
    from ._candidates import _PAIRS as OPTION_PAIRS
    from ._candidates import default_candidates as default_candidates
    from ._candidates import resolve as resolve
    from ._candidates import spec as spec
    from ._checks import arg as arg
    from ._checks import count as count
    from ._checks import number as number
    from ._checks import rounds as rounds
    from ._checks import step_callable as step_callable
    from ._harness import Runner as Runner
    from ._harness import Stage as Stage
    from ._harness import Variant as Variant
    from ._harness import begin as begin
    from ._harness import compile_clock as compile_clock
    from ._harness import compiles_of as compiles_of
    from ._harness import install_adapters as install_adapters
    from ._harness import progress_printer as progress_printer
    from ._harness import seconds as seconds
    from ._kernels import kernel_names as kernel_names
    from ._keywords import only_own as only_own
    from ._keywords import step_keywords as step_keywords
    from ._load import attribute as attribute
    from ._load import import_program_module as import_program_module
    from ._load import import_script as import_script
    from ._numerics import DEFAULT_TOLERANCES as DEFAULT_TOLERANCES
    from ._numerics import Numerics as Numerics
    from ._numerics import compare_leaves as compare_leaves
    from ._numerics import flatten_outputs as flatten_outputs
    from ._numerics import grad_targets as grad_targets
    from ._numerics import has_nan as has_nan
    from ._numerics import pair as pair
    from ._numerics import raw_max_abs_diff as raw_max_abs_diff
    from ._results import Compiles as Compiles
    from ._results import JsonResult as JsonResult
    from ._results import LoadableResult as LoadableResult
    from ._results import compiles_dict as compiles_dict
    from ._results import compiles_lines as compiles_lines
    from ._results import figure_class as figure_class
    from ._results import numerics_dict as numerics_dict
    from ._results import numerics_from as numerics_from
    from ._results import nv_options_line as nv_options_line
    from ._results import options_dict as options_dict
    from ._results import options_from as options_from
    from ._results import run_command as run_command
    from ._schedulers import Segment as Segment
    from ._schedulers import SegmentRecorder as SegmentRecorder
    from ._schedulers import recorder as recorder
    from ._settings import TIMED as TIMED
    from ._settings import Measure as Measure
    from ._settings import measure_of as measure_of
    from ._stats import RatioSummary as RatioSummary
    from ._stats import confirm as confirm
    from ._stats import flagged as flagged
    from ._stats import median as median
    from ._stats import rounds_needed as rounds_needed
    from ._stats import summarize as summarize
    from ._timer import MIN_SAMPLE_S as MIN_SAMPLE_S
    from ._timer import Timer as Timer
    from ._timer import now as now
else:  # hidden from type checkers, which then still report a misspelt name
    __getattr__ = lazy_attributes(__name__, {
        **dict.fromkeys(("default_candidates", "resolve", "spec"), "._candidates"),
        "OPTION_PAIRS": "._candidates:_PAIRS",
        **dict.fromkeys(("arg", "count", "number", "rounds", "step_callable"), "._checks"),
        **dict.fromkeys(("Runner", "Stage", "Variant", "begin", "compile_clock", "compiles_of", "install_adapters",
                         "progress_printer", "seconds"), "._harness"),
        "kernel_names": "._kernels",
        **dict.fromkeys(("attribute", "import_program_module", "import_script"), "._load"),
        **dict.fromkeys(("only_own", "step_keywords"), "._keywords"),
        **dict.fromkeys(("TIMED", "Measure", "measure_of"), "._settings"),
        **dict.fromkeys(("DEFAULT_TOLERANCES", "Numerics", "compare_leaves", "flatten_outputs", "grad_targets",
                         "has_nan", "pair", "raw_max_abs_diff"), "._numerics"),
        **dict.fromkeys(("Compiles", "JsonResult", "LoadableResult", "compiles_dict", "compiles_lines", "figure_class",
                         "numerics_dict", "numerics_from", "nv_options_line", "options_dict", "options_from",
                         "run_command"), "._results"),
        **dict.fromkeys(("Segment", "SegmentRecorder", "recorder"), "._schedulers"),
        **dict.fromkeys(("RatioSummary", "confirm", "flagged", "median", "rounds_needed", "summarize"), "._stats"),
        **dict.fromkeys(("MIN_SAMPLE_S", "Timer", "now"), "._timer"),
    })
