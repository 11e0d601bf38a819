"""Does a CUDA graph outlive the buffers of the plan its call used?  tests/test_gpu_fp8.py's
_graph_after_eviction (capture a call whose cached plan owns staging / split-K workspace, evict every
plan, let new tensors take the freed memory, replay) at M = 128 (staged scales) and M = 64 (also a
split-K workspace), with the capture check as shipped and with it switched off (the cached plan's
buffers captured, as before step 112): how many of the new tensors the replay wrote into.

    python bench/graph_eviction_check.py      # prints JSON (run from the repository root's bench/)
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_gpu_fp8 import _graph_after_eviction  # noqa: E402

from dgir import deep_gemm  # noqa: E402


def main():
    out = {}
    for check in (True, False):
        if not check:
            deep_gemm._stream_capturing = lambda stream, index: False
        for m in (128, 64):
            diff, corrupted = _graph_after_eviction(m)
            out[f"m{m}_capture_check_{'on' if check else 'off'}"] = {"calc_diff": diff, "corrupted_tensors": corrupted}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
