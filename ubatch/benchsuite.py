"""Old path of ubatch.bench (kept so existing imports work): the same module object."""
import sys

import ubatch.bench as _m

sys.modules[__name__] = _m
