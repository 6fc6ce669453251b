"""ubatch.llama_cpp: a drop-in for llama-cpp-python 0.3.36 on ubatch (`import ubatch.llama_cpp as llama_cpp`).
The low-level API is `ubatch.llama_cpp.llama_cpp` (re-exported here, as llama_cpp does); the high-level
`Llama` class is in `ubatch.llama_cpp.llama`. See docs/compat.md for what differs."""
from ubatch.llama_cpp.llama_cpp import *  # noqa: F401,F403

__version__ = "0.3.36"
from ubatch.llama_cpp.llama import *  # noqa: F401,F403,E402
from ubatch.llama_cpp.llama_types import *  # noqa: F401,F403,E402
from ubatch.llama_cpp.llama_cache import LlamaCache, LlamaDiskCache, LlamaRAMCache, BaseLlamaCache  # noqa: F401,E402
from ubatch.llama_cpp._install import install_as_llama_cpp, uninstall_as_llama_cpp  # noqa: F401,E402
