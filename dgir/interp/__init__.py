"""CPU interpreter of the tile IR: runs a kernel on small shapes with torch, with the real dtypes, and
models the asynchrony that matters.  It is the oracle every pass is tested against (before/after
equivalence on the CPU) and the reference the GPU tests compare with.

    out = run_kernel(kernel, {"A": a, "B": b, "SFA": sfa, "SFB": sfb, "D": d}, seed=3)
    out["D"]    # bf16[M, N]

Execution model
---------------
* CTAs (``grid`` of them, default: the launcher's persistent grid) run one after another; params
  (global memory) are shared, shared memory and channels are fresh per CTA.  A kernel with attr
  ``cluster`` = C runs its CTAs in clusters of C consecutive block ids: the tasks of a cluster's CTAs
  interleave in one scheduler, ``sreg`` cluster_rank / cluster_id / cluster_count are defined, a
  ``tma_load [multicast=C]`` lands its box at rows part*box of the slot in every CTA of the cluster
  (and counts on each CTA's full barrier), and a release on a channel with ``cluster`` = C arrives on
  the empty barrier of every CTA of the cluster, which completes after consumers*C releases.
* Inside a CTA every warpgroup id of every ``warpgroup [ids=[...]]`` region runs the region body as
  its own task (a Python generator) with private register tiles and scalars.  ``wg_local`` (the
  index of the id in ``ids``) selects the 64 rows of a BM-row tile that warpgroup owns.
* Tasks yield before every non-scalar op.  A seeded ``random.Random(seed)`` picks, at every step,
  one of: a runnable task (resumed until its next op), or landing one queued TMA copy.  When nothing
  can move, ``DeadlockError`` names every blocked task's role, warpgroup, op, channel, stage
  (slot), round and phase.  ``max_steps`` bounds the run (loops count too): never a hang.

Asynchrony and the checks (strict: a protocol breach raises ``RaceError`` at the op that breaches
it, so a buggy schedule fails deterministically instead of only on unlucky seeds)
------------------------------------------------------------------------------------------------
* Channel (one full + one empty barrier per slot per CTA; ``slot = ctr % stages``, ``round = ctr //
  stages``, ``phase = round & 1``).  ``acquire`` blocks until the empty barrier completed ``round``
  phases (round 0 is free); ``tma_load`` needs a slot this task acquired and has not committed; it
  QUEUES the box copy, which lands at a random later step; ``commit`` arrives on full, and the slot
  becomes full only once all its queued copies have landed.  ``wait`` blocks until full; then (and
  only then) the task may read the slot (smem_read, mma_scaled, wgmma) until it ``release``s it.
  A read of a slot this task has not waited for (or already released) raises RaceError.  When all
  ``consumers`` warpgroups released a round, the slot is POISONED (NaN; 0x7f for e4m3) and free
  for the next round.  All rings start poisoned.  Acquiring/waiting on a round whose phase has
  already passed (mbarrier parity aliasing) raises RaceError.  A multicast into a CTA whose slot has
  not been released by every consumer of the cluster raises RaceError.  ``drain`` blocks until every
  slot's empty barrier completed the phases of all fills before the given counter; a CTA whose
  producer ends while a peer may still arrive on its barriers is what drain prevents.
* ``wgmma`` is asynchronous: the destination tile is poisoned (NaN) and marked in flight; each
  wgmma is one commit group; ``wgmma_wait [pending=N]`` retires all but the newest N groups of the
  task, and only then the result lands.  Operands are read from the ring at RETIRE time (the
  stricter model: the tensor core may read shared memory any time before it retires), and
  releasing a slot that an un-retired wgmma reads raises RaceError.  Any other op touching an
  in-flight tile (zero, promote, scale, stage_out, smem_read, mma_scaled, or a tile operand) raises
  RaceError.  A further wgmma with the same accumulator is allowed (PTX orders wgmmas on one
  accumulator; scale_d=1 chains onto the previous result).  A task ending with groups in flight
  raises RaceError.
* ``tma_store`` copies the warpgroup's own 64 rows of the smem tile to global immediately (clipped
  at the tensor edge), but the smem tile counts as being read until ``tma_store_wait``: a
  ``stage_out`` into it before that raises RaceError, as does a task ending with such a store.
  ``tma_store`` of a tile this task wrote with ``stage_out`` but has not fenced with
  ``sync [fence_async=true]`` raises RaceError.
* ``sync`` is a rendezvous of all tasks of the same warpgroup region (k-th sync waits for every
  task's k-th sync).

Numerics (identical for ``mma_scaled`` and ``wgmma`` + ``promote``, so promote_scales is BITWISE
equivalent): e4m3 tiles are upcast to f32 exactly; ``part = A_rows @ B^T`` is a torch float32
matmul; the scale ``s[r, c] = sfa[r] * sb(c)`` is one f32 multiply (sb(c) = sb_i for the i-th
128-row B-scale block from n0's, the last one for any further); the promotion ``acc + part * s`` is an FFMA, emulated in float64 (the product
of two f32 is exact there) then rounded to f32 (exact FFMA except in double-rounding ties).
``wgmma`` with scale_d=1 adds onto the accumulator with one f32 add; ``scale`` is an f32 multiply;
``stage_out`` rounds to bf16 (round to nearest even).

Helpers for tests: ``fp8_gemm_inputs``, ``fp8_gemm_reference``, ``calc_diff`` (DeepGEMM's).
"""
from .inputs import calc_diff, fp8_gemm_inputs, fp8_gemm_reference
from .machine import _Machine, run_kernel  # noqa: F401  (_Machine: tests patch its handlers)
from .state import TORCH_DTYPE, DeadlockError, InterpError, RaceError

__all__ = ["run_kernel", "fp8_gemm_inputs", "fp8_gemm_reference", "calc_diff", "InterpError", "DeadlockError",
           "RaceError", "TORCH_DTYPE"]
