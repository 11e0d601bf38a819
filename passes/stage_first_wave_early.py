"""stage_first_wave_early: a two-wave tile stages and stores its first wave while the last wgmma runs."""
from __future__ import annotations

from dataclasses import replace

from dgir.ir import Node, Op
from dgir.ops.fp8_gemm import EARLY_EPILOGUE_MAX_K_BLOCKS

from . import Pass
from .overlap_epilogue import OverlapEpilogue


class StageFirstWaveEarly(Pass):
    """Move wave 0's epilogue into the tile's last K block, between the issue of wave 1's wgmma and
    its retire.

    A math warpgroup of a BLOCK_M 256 tile holds two 64-row waves.  In the last K block wave 0's
    accumulator is final once its promotion ran, before wave 1's wgmma is issued; the epilogue
    still waits for that wgmma, wave 1's promotion and the next tile's first wgmma before it
    converts and writes either wave, and both waves' TMA stores leave together at its end.  So the
    tensor cores run one wgmma (the next tile's wave 0, overlap_epilogue's shallow form) during the
    whole staging.  Here the last K block is peeled off the k-loop, and wave 0's staging (the wait
    for the previous TMA store to have read the staging tile, the warpgroup's barrier, conversion
    and stmatrix) and, with `store_early`, its fenced barrier and TMA store run while wave 1's
    wgmma computes; wave 1's staging and store stay where they were, beside the next tile's first
    wgmma.

    Applies to tile loops that overlap_epilogue rewrote in its shallow form, with two waves, the
    TMA epilogue staged in its own tile and 2 to `max_k_blocks` K blocks a tile; the decision is
    recorded on the tile loop as `early_staging`.  Runs right after overlap_epilogue.

    Measured on the H200 (bench/TUNING.md steps 90-93, 256x128 tiles in clusters of two, 4-5
    interleaved passes each): the staging alone 1.5-6% faster at K = 512 and 1.1% at K = 1024; the
    store moved too, another 0.5-7% at K = 512 and 3.4% at K = 1024 (4096x32768x512 135.6 us against
    142.6 without the pass), 2.1% at K = 1536, 0.5% at K = 2048; a tie at K = 7168 and noise at
    16384, where the epilogue is a small share of a tile.  Hence MAX_K_BLOCKS = 16
    (fp8_gemm.EARLY_EPILOGUE_MAX_K_BLOCKS, which the API's settle_early_epilogue also reads).
    At M = 512-1024 the early store ran 6-9% slower and the early staging alone 2-3% faster (steps
    94-95), and at K = 512 up to M = 1792 (step 96), so the API's configs there say
    early_epilogue="staging" (no early store; fp8_gemm.early_store_loses).
    """
    name = "stage_first_wave_early"
    MAX_K_BLOCKS = EARLY_EPILOGUE_MAX_K_BLOCKS

    def __init__(self, max_k_blocks: int = MAX_K_BLOCKS, store_early: bool | str = True):
        self.max_k_blocks = max_k_blocks
        # also start wave 0's TMA store there (its own fence and barrier), not after wave 1's staging;
        # "after_retire": its fence, barrier and store right after wave 1's wgmma retired, before wave
        # 1's promotion (the fence then finds the staging writes done; measured no faster anywhere and
        # as slow where each CTA keeps its m block: bench/TUNING.md step 101)
        if store_early not in (True, False, "after_retire"):
            raise ValueError(f"store_early must be True, False or 'after_retire', got {store_early!r}")
        self.store_early = store_early

    def run(self, kernel: Node) -> Node:
        if kernel.get("staging") not in (None, "tile") or kernel.get("math_order") not in (None, "together"):
            return kernel
        if kernel.get("early_epilogue") == "off":    # the config's choice
            return kernel.with_attrs(early_staging="skipped: early_epilogue='off' in the config")
        # "staging" (the API's where the early store measured slower, fp8_gemm.early_store_loses: steps 94-96)
        store_early = self.store_early if kernel.get("early_epilogue") != "staging" else False
        body = []
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()):
                r = r.with_body([self.rewrite(c, store_early) for c in r.body])
            body.append(r)
        return kernel.with_body(body)

    def rewrite(self, tloop: Node, store_early: bool | str) -> Node:
        if tloop.op is not Op.FOR or not tloop.get("overlap_epilogue") or tloop.get("early_staging"):
            return tloop
        if tloop.get("overlap_epilogue") != "next tile's first wgmma":
            return tloop.with_attrs(early_staging="skipped: overlap_epilogue did not take its shallow form")
        kloops = [c for c in tloop.body if c.op is Op.FOR and c.get("peeled")]
        stages = [c for c in tloop.body if c.op is Op.STAGE_OUT]
        if len(kloops) != 1 or sorted(c.get("wave") or 0 for c in stages) != [0, 1]:
            return tloop.with_attrs(early_staging="skipped: not a two-wave tile with a staged epilogue")
        kloop = kloops[0]
        start, stop, step = kloop.args
        if not all(isinstance(x, int) for x in (start, stop, step)) or step != 1 or stop - start < 1:
            return tloop.with_attrs(early_staging="skipped: no K block after block 0")
        if stop > self.max_k_blocks:     # block 0 is peeled: the loop runs blocks start .. stop - 1
            return tloop.with_attrs(early_staging=f"skipped: {stop} K blocks a tile > {self.max_k_blocks} "
                                                  "(the staging's share is too small to measure)")
        mmas = [c for c in kloop.body if c.op is Op.WGMMA]
        if len(mmas) != 2 or (mmas[1].get("wave") or 0) != 1:
            return tloop.with_attrs(early_staging="skipped: the K block is not one wgmma per wave")
        i_mma1 = list(kloop.body).index(mmas[1])
        retire = next((c for c in kloop.body[i_mma1 + 1:] if c.op is Op.WGMMA_WAIT), None)
        stage0 = next(c for c in stages if (c.get("wave") or 0) == 0)
        promoted = [c for c in kloop.body[:i_mma1] if c.op is Op.PROMOTE and c.args[0] == stage0.args[1]]
        if retire is None or not promoted:
            return tloop.with_attrs(early_staging="skipped: wave 0 is not final before wave 1's wgmma")
        # the epilogue's head: the staging tile is free (store wait), the warpgroup agrees (sync)
        items = list(tloop.body)
        i_stage0 = items.index(stage0)
        head = items[:i_stage0]
        store_wait = next((c for c in reversed(head) if c.op is Op.TMA_STORE_WAIT and c.get("read")), None)
        sync = next((c for c in reversed(head) if c.op is Op.SYNC and not c.get("fence_async")), None)
        if store_wait is None or sync is None:
            return tloop.with_attrs(early_staging="skipped: the epilogue does not begin with a store wait and a sync")
        last = OverlapEpilogue.rename_block(list(kloop.body), {kloop.name: stop - 1}, "_kl")
        i_retire = next(i for i, c in enumerate(last) if c.op is Op.WGMMA_WAIT and i > i_mma1)
        early, after_retire = [store_wait, sync, stage0], []
        moved = {id(store_wait), id(sync), id(stage0)}
        if store_early:
            fence = next((c for c in items[i_stage0:] if c.op is Op.SYNC and c.get("fence_async")), None)
            store0 = next((c for c in items[i_stage0:] if c.op is Op.TMA_STORE and not c.get("wave")), None)
            if fence is None or store0 is None:
                return tloop.with_attrs(early_staging="skipped: no fenced sync and wave-0 TMA store to move")
            # the fenced sync stays for wave 1 as well
            (after_retire if store_early == "after_retire" else early).extend([replace(fence), store0])
            moved.add(id(store0))
        last = last[:i_retire] + early + last[i_retire:i_retire + 1] + after_retire + last[i_retire + 1:]
        shortened = replace(kloop, args=(start, stop - 1, step))
        out = []
        for c in items:
            if c is kloop:
                out += ([shortened] if stop - 1 > start else []) + last
            elif id(c) not in moved:
                out.append(c)
        how = "wave 0 staged" + {True: " and stored", False: ""}.get(store_early, "") + " during wave 1's last wgmma"
        if store_early == "after_retire":
            how += ", stored once it retired"
        return tloop.with_body(out).with_attrs(early_staging=how)


PASS = StageFirstWaveEarly()
