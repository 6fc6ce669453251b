"""Old path of ubatch.batch.workload (kept so existing imports work): the same module object."""
import sys

from ubatch.batch import workload as _m

sys.modules[__name__] = _m
