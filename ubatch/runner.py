"""Old path of ubatch.compute.runner (kept so existing imports work): the same module object."""
import sys

from ubatch.compute import runner as _m

sys.modules[__name__] = _m
