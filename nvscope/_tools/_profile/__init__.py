"""The profile family: one step timed under each option set, per fusion and per kernel, with its numerics."""

from nvscope._tools._profile._profile import NO_FUSION as NO_FUSION
from nvscope._tools._profile._profile import PROFILES as PROFILES
from nvscope._tools._profile._profile import profile as profile
from nvscope._tools._profile._report import ProfileResult as ProfileResult
from nvscope._tools._profile._report import ProfileRow as ProfileRow
