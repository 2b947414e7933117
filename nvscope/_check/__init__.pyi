# The check layer's face (nvscope/_core/_lazy.py reads this list).
from nvscope._check._check import CheckResult as CheckResult
from nvscope._check._check import check as check
from nvscope._check._config import ConfigError as ConfigError
from nvscope._check._use import split_env as split_env
