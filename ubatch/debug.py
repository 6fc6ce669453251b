"""Old path of ubatch.batch.debug (kept so existing imports work): the same module object."""
import sys

from ubatch.batch import debug as _m

sys.modules[__name__] = _m
