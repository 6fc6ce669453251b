"""Old path of ubatch.batch.reference (kept so existing imports work): the same module object."""
import sys

from ubatch.batch import reference as _m

sys.modules[__name__] = _m
