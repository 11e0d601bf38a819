"""What the benchmark's timer charges a kernel for its launch shape alone, on the GPU side.

The small-M cells' kernels with no operand loads at all (`noAB`) still time ~4.7 us under the timer
(do_bench, L2 flushed, median) outside their own span (first CTA start to last CTA end: spec 325,
bench/TUNING.md step 131), where a one-CTA empty kernel times 3.74 us (target_bounds' timer floor).
Which part of the shape costs that extra ~1 us: the CTA count, the threads, the dynamic shared
memory (a kernel asking for ~200 KB after the flush's elementwise kernel: the SMs' L1/shared split
must change), the cluster, or the prologue every dgir kernel runs (mbarrier inits, the fence, the
cluster barrier)?  Each row is a near-empty kernel (thread 0 of each CTA writes its SM id, so the
launch is real) timed with the benchmark's timer; the variants take turns, `--rounds` times, and
each row keeps every round's median.  Nothing of dgir's compiler is used: the PTX is below.

    python bench/launch_shape_probe.py --out launch_shape.json [--rounds 3]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import do_bench, header, write  # noqa: E402

CLUSTERS = (1, 2, 8)
KB = 1024


def ptx(cluster: int, prologue: bool, suffix: str = "") -> str:
    """One entry: `probe_c{cluster}` or, with dgir's prologue (18 mbarrier inits in the dynamic
    shared memory, their fence, and for a cluster the cluster-wide barrier), `probe_c{cluster}_pro`.
    A function's carveout is an attribute of the function, so a row that sets one gets its own
    entry (`suffix`)."""
    name = f"probe_c{cluster}{'_pro' if prologue else ''}{suffix}"
    shape = f" .reqnctapercluster {cluster}, 1, 1" if cluster > 1 else ""
    lines = []
    if prologue:
        lines += ["  mov.u32 %r3, smem;", "  setp.ne.u32 %p1, %r0, 0;", "  @%p1 bra INIT_DONE;"]
        lines += [f"  mbarrier.init.shared::cta.b64 [%r3+{8 * i}], 1;" for i in range(18)]
        lines += ["INIT_DONE:", "  fence.mbarrier_init.release.cluster;"]
        if cluster > 1:
            lines += ["  barrier.cluster.arrive.release.aligned;", "  barrier.cluster.wait.acquire.aligned;"]
        else:
            lines += ["  bar.sync 0;"]
    body = "\n".join(lines)
    return f""".visible .entry {name}(.param .u64 out){shape}
{{
  .reg .u32 %r<4>;
  .reg .u64 %rd<4>;
  .reg .pred %p<2>;
  mov.u32 %r0, %tid.x;
{body}
  setp.ne.u32 %p0, %r0, 0;
  @%p0 bra DONE;
  ld.param.u64 %rd0, [out];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %smid;
  mul.wide.u32 %rd1, %r1, 4;
  add.u64 %rd2, %rd0, %rd1;
  st.global.u32 [%rd2], %r2;
DONE:
  ret;
}}
"""


def module_ptx() -> str:
    head = ".version 8.5\n.target sm_90a\n.address_size 64\n.extern .shared .align 1024 .b8 smem[];\n"
    return head + "\n".join([ptx(c, p) for c in CLUSTERS for p in (False, True)] + [ptx(1, True, "_cv")])


def variants() -> list[dict]:
    """The launch shapes: the timer's floor (one CTA), then the small-M kernels' shapes one knob at a
    time: CTAs (132, 144 as 18 clusters of 8, 264, 396), threads (128 / 256 / 384), dynamic shared
    memory (0 / 48 / 110 / 200 KB), cluster (1 / 2 / 8) and the prologue."""
    out = [dict(cluster=1, ctas=1, threads=32, smem=0, prologue=False)]
    for ctas in (132, 264, 396):
        for threads in (128, 256, 384):
            out.append(dict(cluster=1, ctas=ctas, threads=threads, smem=0, prologue=False))
    for smem in (48 * KB, 110 * KB, 200 * KB):
        out.append(dict(cluster=1, ctas=132, threads=256, smem=smem, prologue=False))
        out.append(dict(cluster=1, ctas=132, threads=256, smem=smem, prologue=True))
    out.append(dict(cluster=1, ctas=264, threads=256, smem=110 * KB, prologue=True))
    # the largest carveout asked for explicitly, as the launcher does for kernels of 2+ CTAs an SM
    out.append(dict(cluster=1, ctas=264, threads=256, smem=110 * KB, prologue=True, carveout=100))
    for cluster, ctas in ((2, 132), (8, 144), (8, 240)):
        for smem, prologue in ((0, False), (110 * KB, False), (110 * KB, True)):
            out.append(dict(cluster=cluster, ctas=ctas, threads=256, smem=smem, prologue=prologue))
    return out


def kernel_name(v: dict) -> str:
    return f"probe_c{v['cluster']}{'_pro' if v['prologue'] else ''}{'_cv' if v.get('carveout') else ''}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch

    from dgir.runtime import driver
    from dgir.toolchain import assemble
    dev = torch.device("cuda", 0)
    module = driver.load_module(assemble(module_ptx(), "sm_90a").cubin, dev.index or 0)
    sms = torch.zeros(1024, dtype=torch.int32, device=dev)
    doc = header(dev)
    doc["method"] = __doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1]
    rows = [dict(v, kernel=kernel_name(v), us_rounds=[]) for v in variants()]
    plans = []
    for row in rows:
        fn = module.function(row["kernel"])
        row.setdefault("carveout", None)
        if row["carveout"]:        # dgir's launcher asks for the largest carveout at 2+ CTAs an SM
            driver.blocks_per_sm(fn, row["threads"], row["smem"])
        else:                      # and otherwise only raises the dynamic shared-memory limit
            driver.set_max_dynamic_smem(fn, row["smem"])
        plans.append(driver.LaunchPlan(fn, (row["ctas"], 1, 1), (row["threads"], 1, 1), row["smem"],
                                       [ctypes.c_uint64(sms.data_ptr())]))
    stream = lambda: torch.cuda.current_stream(dev).cuda_stream  # noqa: E731
    for _ in range(args.rounds):
        for row, plan in zip(rows, plans):
            sms.fill_(-1)
            row["us_rounds"].append(do_bench(lambda: plan(stream())) * 1e3)
            torch.cuda.synchronize(dev)
            row["ctas_ran"] = int((sms[:row["ctas"]] >= 0).sum())
    for row in rows:
        row["us"] = statistics.median(row["us_rounds"])
        print({k: row[k] for k in ("kernel", "ctas", "threads", "smem", "prologue", "carveout", "us", "ctas_ran")}, flush=True)
    doc["rows"] = rows
    write(args.out, doc)


if __name__ == "__main__":
    main()
