# The rescue family's face (nvscope/_core/_lazy.py reads this list).
from nvscope._rescue._report import RescueResult as RescueResult
from nvscope._rescue._rescue import rescue as rescue
