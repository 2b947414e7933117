# The bisect family's face (nvscope/_core/_lazy.py reads this list).
from nvscope._bisect._bisect import bisect as bisect
from nvscope._bisect._bisect import check_arg as check_arg
from nvscope._bisect._process import bisect_program as bisect_program
from nvscope._bisect._process import timeout_seconds as timeout_seconds
from nvscope._bisect._report import BisectResult as BisectResult
