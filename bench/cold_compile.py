"""Cold compile of one kernel, as issue 4 states it: fp8_gemm_nt 4096x7168x16384, lowering -> cubin,
in a fresh process, empty kernel cache, the import of dgir excluded.  Each run is its own Python
process; it also splits the figure into its parts and compiles a second shape in the same process.

    python bench/cold_compile.py --runs 6 --out bench/results/cold_compile.json

Per run: `first_s` (the figure: `compiler.compile` of the first kernel, timed around the call),
`ptxas_s`, `passes_emit_s` (lowering, the passes and the PTX emitter), `first_use_s` (the rest of
the first call: the modules the pipeline imports on first use, e.g. networkx; what a second compile
in the process does not pay) and `second_shape_s` (4096x4096x7168 compiled next in the same process:
ptxas plus the compiler's own work).  Runs on any machine (no GPU needed); the issue's figure is the
one taken on the 2-core CPU machine.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, time
import dgir.compiler as c, dgir.toolchain as t
t.find_tool('ptxas')
t0 = time.perf_counter()
r = c.compile('fp8_gemm_nt', m=4096, n=7168, k=16384)
first = time.perf_counter() - t0
t1 = time.perf_counter()
c.compile('fp8_gemm_nt', m=4096, n=4096, k=7168)
second = time.perf_counter() - t1
own = sum(v for name, v in r.timings.items() if name not in ('ptxas', 'total'))
print(json.dumps({'first_s': first, 'ptxas_s': r.timings['ptxas'], 'passes_emit_s': own,
                  'first_use_s': first - own - r.timings['ptxas'], 'second_shape_s': second}))
"""


def one_run() -> dict:
    """One fresh process with an empty kernel cache (its own temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="dgir-cold-") as cache:
        env = dict(os.environ, DG_JIT_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                             cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise RuntimeError(f"cold compile run failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(runs: int) -> dict:
    rows = [one_run() for _ in range(runs)]
    first = [r["first_s"] for r in rows]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    return {"git_rev": rev, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": {"cpu": cpu, "cores": os.cpu_count()}, "method": __doc__.strip().split("\n\n")[0],
            "first_s_min": min(first), "first_s_median": statistics.median(first), "first_s_max": max(first),
            "runs": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--out")
    args = ap.parse_args()
    doc = measure(args.runs)
    text = json.dumps(doc, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
