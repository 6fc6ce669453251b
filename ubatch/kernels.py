"""Old path of ubatch.compute.kernels (kept so existing imports work): the same module object."""
import sys

from ubatch.compute import kernels as _m

sys.modules[__name__] = _m
