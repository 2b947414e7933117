"""The rescue family: per failing fusion the option sets that cure it, probed in crash-proof worker processes."""

from nvscope._tools._rescue._report import RescueResult as RescueResult
from nvscope._tools._rescue._rescue import rescue as rescue
