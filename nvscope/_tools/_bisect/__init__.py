"""The bisect family: the options and fusions that make a step go wrong, found by binary search."""

from nvscope._tools._bisect._bisect import bisect as bisect
from nvscope._tools._bisect._bisect import check_arg as check_arg
from nvscope._tools._bisect._process import bisect_program as bisect_program
from nvscope._tools._bisect._process import timeout_seconds as timeout_seconds
from nvscope._tools._bisect._report import BisectResult as BisectResult
