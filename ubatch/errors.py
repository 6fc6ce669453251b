"""Old path of ubatch.common.errors (kept so existing imports work): the same module object."""
import sys

from ubatch.common import errors as _m

sys.modules[__name__] = _m
