"""Does the order in which B's bytes are read change the DRAM bandwidth? Emulates the small-M GEMM's
B stream: program p reads rows [p*R, (p+1)*R) of an N x K byte matrix, KB bytes of each row per step."""
import json, os, sys, torch, triton, triton.language as tl
sys.path.insert(0, os.path.dirname(__file__))
from common import header  # noqa: E402
from triton.testing import do_bench

@triton.jit
def stream(B, out, K: tl.constexpr, R: tl.constexpr, KB: tl.constexpr, STAGES: tl.constexpr):
    p = tl.program_id(0)
    rows = p * R + tl.arange(0, R)
    cols = tl.arange(0, KB)
    acc = tl.zeros([R], dtype=tl.int32)
    for k in tl.range(0, K, KB, num_stages=STAGES):
        acc += tl.sum(tl.load(B + rows[:, None] * K + k + cols[None, :]).to(tl.int32), 1)
    tl.store(out + p, tl.sum(acc, 0))

@triton.jit
def stream_tma(B_desc, out, K: tl.constexpr, R: tl.constexpr, KB: tl.constexpr, STAGES: tl.constexpr):
    p = tl.program_id(0)
    acc = tl.zeros([R], dtype=tl.int32)
    for k in tl.range(0, K, KB, num_stages=STAGES):
        acc += tl.sum(B_desc.load([p * R, k]).to(tl.int32), 1)
    tl.store(out + p, tl.sum(acc, 0))

rows = []


def record(kind, launch, N, K, R, KB, stages, ref):
    """Run one pattern once (checked against the full sum), then time it."""
    g = N // R
    out = torch.zeros(g, dtype=torch.int32, device="cuda")
    fn = lambda: launch(g, out)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    ok = int(out.to(torch.int64).sum()) == ref
    us = do_bench(fn, return_mode="median") * 1e3
    rows.append(dict(kind=kind, N=N, K=K, R=R, KB=KB, stages=stages, ctas=g, us=round(us, 2),
                     gbps=round(N * K / us / 1e3), ok=ok))
    print(rows[-1], flush=True)


for (N, K) in [(4096, 7168), (24576, 1536), (7168, 2048), (32768, 512)]:
    B = torch.randint(-100, 100, (N, K), dtype=torch.int8, device="cuda")
    ref = int(B.to(torch.int64).sum())
    for R in (32, 64):
        for KB in (128, 256, 512):
            for stages in (4, 8):
                if KB <= K and R * KB * stages <= 160 * 1024:
                    record("ld", lambda g, out: stream[(g,)](B, out, K, R, KB, stages), N, K, R, KB, stages, ref)
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
        for R in (32, 64):
            for KB in (128, 256):
                desc = TensorDescriptor.from_tensor(B, [R, KB])
                for stages in (4, 8):
                    record("tma", lambda g, out: stream_tma[(g,)](desc, out, K, R, KB, stages), N, K, R, KB, stages, ref)
    except Exception as e:
        print("tma failed", repr(e)[:300])
    # references over the same bytes: torch's copy (reads and writes them) and torch.sum
    C = torch.empty_like(B)
    us = do_bench(lambda: C.copy_(B), return_mode="median") * 1e3
    rows.append(dict(kind="copy", N=N, K=K, us=round(us, 2), gbps=round(2 * N * K / us / 1e3)))
    us = do_bench(lambda: torch.sum(B, dtype=torch.int32), return_mode="median") * 1e3
    rows.append(dict(kind="torch_sum", N=N, K=K, us=round(us, 2), gbps=round(N * K / us / 1e3)))
    print(rows[-2:], flush=True)
json.dump({**header(torch.device("cuda", 0)), "rows": rows},
          open(os.path.join(os.environ.get("OUT", "/tmp"), "dram_pattern.json"), "w"), indent=1)
