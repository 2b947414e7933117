# The tools' common ground, used by the families and the command line (nvscope/_core/_lazy.py reads this list).
from nvscope._tools._common import ScopeMap as ScopeMap
from nvscope._tools._common import exit_detail as exit_detail
from nvscope._tools._common import no_fusion as no_fusion
from nvscope._tools._compare import CompareResult as CompareResult
from nvscope._tools._compare import compare as compare
from nvscope._tools._program import HOOK_DIR as HOOK_DIR
from nvscope._tools._program import VARIABLE as VARIABLE
from nvscope._tools._program import Settings as Settings
from nvscope._tools._program import export as export
from nvscope._tools._program import run_program as run_program
