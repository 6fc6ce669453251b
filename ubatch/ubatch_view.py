"""Old path of ubatch.batch.ubatch_view (kept so existing imports work): the same module object."""
import sys

from ubatch.batch import ubatch_view as _m

sys.modules[__name__] = _m
