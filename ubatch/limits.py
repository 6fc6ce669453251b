"""Old path of ubatch.common.limits (kept so existing imports work): the same module object."""
import sys

from ubatch.common import limits as _m

sys.modules[__name__] = _m
