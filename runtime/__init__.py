"""dgir.runtime: loading and launching compiled kernels, the kernel disk cache, SASS patching.

Submodules are imported on demand (``from dgir.runtime import driver``); none of them needs a
GPU at import time.
"""

__all__ = ["driver", "cache", "sass"]
