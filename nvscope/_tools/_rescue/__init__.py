"""The rescue family: for each fusion that fails (an error, a crash, wrong numbers), the option sets that cure it,
probed in worker processes that a crash cannot take down with the search."""

from nvscope._tools._rescue._report import RescueResult as RescueResult
from nvscope._tools._rescue._rescue import rescue as rescue
