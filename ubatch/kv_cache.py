"""Old path of ubatch.memory.kv_cache (kept so existing imports work): the same module object."""
import sys

from ubatch.memory import kv_cache as _m

sys.modules[__name__] = _m
