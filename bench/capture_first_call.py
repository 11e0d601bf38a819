"""Can the first call of a shape happen inside a CUDA graph capture?  Then the kernel is compiled
(or read from the disk cache) and its module loaded while the stream captures (SFA row-major: read
in place by the K-major kernel at this shape since step 114; before, the SFA transpose kernel was
loaded too, which tests/test_gpu_fp8.py still covers with padded SFA rows).  Each case runs in a
fresh process (nothing loaded yet):
torch's capture error modes "global" (its default), "thread_local" and "relaxed".

    python bench/capture_first_call.py       # prints JSON: per mode, ok / the error, calc_diff
"""
import json
import subprocess
import sys

CASE = r'''
import torch, json
from dgir import deep_gemm
from dgir.gpu_run import calc_diff, fp8_inputs
m, n, k = 200, 1536, 1024
A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), 1)
d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
out = {}
try:
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s, capture_error_mode=MODE):
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    g.replay()
    torch.cuda.synchronize()
    out = {"ok": True, "calc_diff": calc_diff(d.double(), ref), "finite": bool(torch.isfinite(d).all())}
except Exception as e:
    out = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
print(json.dumps(out))
'''


def main():
    out = {}
    for mode in ("global", "thread_local", "relaxed"):
        r = subprocess.run([sys.executable, "-c", CASE.replace("MODE", repr(mode))], capture_output=True, text=True,
                           timeout=300)
        last = r.stdout.strip().splitlines()[-1:] or [""]
        try:
            out[mode] = json.loads(last[0])
        except json.JSONDecodeError:
            out[mode] = {"ok": False, "rc": r.returncode, "stderr": r.stderr[-600:]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
