"""Does one call launched on two streams at once share its plan's split-K workspace?
tests/test_gpu_fp8.py's one_call_on_two_streams (128x1024x7168, whose kernel sums split-K partials
through a global workspace with tile counters; the same tensors launched on two streams, no sync
between, 200 rounds) with the per-stream plans as shipped and with them switched off (every stream
launching the one cached plan, as before step 113): D's calc_diff afterwards, counters left off
zero, a later call's calc_diff.  Run three times each.

    python bench/two_stream_check.py      # prints JSON
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_gpu_fp8 import one_call_on_two_streams  # noqa: E402

from dgir import deep_gemm  # noqa: E402


def main():
    out = {}
    shipped = deep_gemm._plan_for_stream
    for per_stream in (True, False):
        deep_gemm._plan_for_stream = shipped if per_stream else (
            lambda a, b, d, c, recipe, compiled_dims, key, stream, index: deep_gemm._plans[key])
        for run in range(3):
            deep_gemm._plans.clear()
            first, off_zero, later, distinct = one_call_on_two_streams()
            out[f"per_stream_{'on' if per_stream else 'off'}_{run}"] = {
                "calc_diff_after": first, "counters_off_zero": off_zero, "calc_diff_later_call": later,
                "distinct_workspaces": distinct}
    deep_gemm._plan_for_stream = shipped
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
