"""Old path of ubatch.batch.allocator (kept so existing imports work): the same module object."""
import sys

from ubatch.batch import allocator as _m

sys.modules[__name__] = _m
