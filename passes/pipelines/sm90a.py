"""The Hopper (sm_90a) pipeline, in order.  The lowered IR comes first (dump 00), then each pass
below writes one numbered dump.  The verifier runs after every pass when DGIR_VERIFY=1 (always in
the tests)."""
from .. import (allocate_smem, assign_registers, group_tma_issue, hint_l2_eviction, interleave_ffma, multicast_tma,
               hoist_wait_arithmetic, order_wgmma_issue, overlap_epilogue, prefetch_tma_descriptors,
               programmatic_dependent_launch, promote_scales, schedule_mma, stage_b_scales, stage_first_wave_early,
               stage_in_ring_slot, uniform_warpgroup_index)

PIPELINE = [
    # math: mma_scaled -> wgmma into a fresh partial + FP32 promotion per 128-wide K block
    promote_scales.PASS,
    # roles: the load role fetches each K block's B scales into the ring; the math loop reads smem
    stage_b_scales.PASS,
    # load role: prefetch tensor maps while barriers are being set up
    prefetch_tma_descriptors.PASS,
    # budgets first: the interleaving decision below reads the math warpgroups' register budget
    assign_registers.PASS,
    # schedule (data): stage/order/latency on the k-loop ops; swap this pass to try another schedule
    schedule_mma.PASS,
    # materialise the schedule: double-buffered partial, promotion FFMAs overlap the next wgmma
    # (not for k-loops of < 5 K blocks with several math warpgroups: overlap_epilogue pays more)
    interleave_ffma.PASS,
    # persistent loop: the next tile's first wgmma is issued before this tile's epilogue, so the
    # tensor cores work while the accumulators are converted and stored (one-partial k-loops)
    overlap_epilogue.PASS,
    # epilogue of two-wave tiles (BLOCK_M 256) with K <= 2048: wave 0 is converted, staged and its
    # TMA store issued while wave 1's last wgmma runs, so half the epilogue has tensor work beside it
    stage_first_wave_early.PASS,
    # epilogue (kernels that ask for it): D's staging tile lives in the ring slot of the tile's last
    # K block, released after the TMA store read it; its own shared memory becomes a ring stage
    stage_in_ring_slot.PASS,
    # schedule (data, from the config's math_order): the math warpgroups take turns issuing
    # their wgmma groups, so one promotes while the other's group runs (kernels that ask for it)
    order_wgmma_issue.PASS,
    # load role: a cluster's shared operand panel is loaded once, half per CTA, multicast to both
    # (a no-op for kernels without clusters)
    multicast_tma.PASS,
    # load role (kernels that ask for it, config refill_slots): several ring slots refilled together,
    # so each row's adjacent 128-byte panels are requested back to back
    group_tma_issue.PASS,
    # load role: B (the weights) streams through L2 with the evict-first policy, so it recycles its
    # own lines instead of evicting (and writing back) the dirty lines a previous kernel left
    hint_l2_eviction.PASS,
    # codegen hint (data): kernels with two or three math warpgroups get a provably warp-uniform warpgroup
    # index, so ptxas keeps the wgmma descriptors on the uniform datapath
    uniform_warpgroup_index.PASS,
    # codegen hint (data): kernels with long K blocks (BLOCK_M 192 and 256, 128x192) build slot
    # addresses and wgmma descriptors before each barrier wait instead of between the data's
    # arrival and the wgmma
    hoist_wait_arithmetic.PASS,
    # launch: every region waits for the previous kernel (grid_wait) before touching global memory,
    # the load role lets the next kernel launch after its last load; no-ops unless launched with PDL
    programmatic_dependent_launch.PASS,
    # layout last: every buffer, including those the passes above added, gets its offset
    allocate_smem.PASS,
]
