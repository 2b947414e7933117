# The profile family's face (nvscope/_core/_lazy.py reads this list).
from nvscope._profile._profile import NO_FUSION as NO_FUSION
from nvscope._profile._profile import PROFILES as PROFILES
from nvscope._profile._profile import profile as profile
from nvscope._profile._report import ProfileResult as ProfileResult
from nvscope._profile._report import ProfileRow as ProfileRow
