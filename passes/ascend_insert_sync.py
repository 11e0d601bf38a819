"""ascend_insert_sync: SetFlag/WaitFlag between the AscendC pipes that write and read each on-chip buffer."""
from __future__ import annotations

from dgir.ir import Node, Op

from . import Pass

# (reads, writes) of local buffers, by operand position
ACCESS = {Op.COPY_IN: ((), (0,)), Op.LOAD_L0: ((1,), (0,)), Op.MMAD: ((1, 2), (0,)), Op.FIXPIPE: ((1,), ()),
          Op.VFILL: ((), (0,)), Op.VPROMOTE: ((0, 1), (0,)), Op.VCAST: ((1,), (0,)), Op.COPY_OUT: ((1,), ()),
          Op.LOAD_L0_MX: ((1, 2), (0,)), Op.MMAD_MX: ((1, 2), (0,)), Op.FILL_L1: ((), (0,))}
EVENT_IDS = {"950": 6, "910b": 8}        # 3510 reserves event IDs 6 and 7


class AscendInsertSync(Pass):
    """AscendC pipes run asynchronously; an op on one pipe may only touch a buffer another pipe wrote
    (RAW) or still reads (WAR) after a SetFlag<SRC_DST>/WaitFlag<SRC_DST> pair.  For each local buffer
    and each (writer pipe W, reader pipe R) pair, in the innermost block that holds all those ops:
        wait R_W before the first writer   (the previous iteration's readers are done: WAR)
        set  W_R after the last writer;  wait W_R before the first reader      (RAW)
        set  R_W after the last reader
    The R_W event is pre-set at the start of the region and drained at its end, so every loop
    iteration finds it set (the buffer starts free).  Buffers whose accesses share a block and a pipe
    pair share one event (e.g. the A and B L1 tiles).  Each event type gets its own IDs (6 per event
    on the 950, where IDs 6 and 7 are reserved; 8 on the 910B).  Same-pipe reuse needs no flag (pipes
    are in order); the emitter adds PipeBarrier<PIPE_M> between small accumulating Mmads.
    """
    name = "ascend_insert_sync"

    def run(self, kernel: Node) -> Node:
        locals_ = {n.name for n in kernel.body if n.op is Op.LOCAL}
        limit = EVENT_IDS.get(kernel.get("chip"), 6)
        body = []
        for n in kernel.body:
            body.append(self._region(n, locals_, limit) if n.op is Op.WARPGROUP else n)
        return kernel.with_body(body)

    def _region(self, region: Node, locals_: set, limit: int) -> Node:
        # every access: (buffer, pipe, 'r'|'w', path of child indices from the region body)
        acc = []

        def walk(body, path):
            for i, n in enumerate(body):
                if n.op in ACCESS:
                    reads, writes = ACCESS[n.op]
                    for j in reads:
                        if n.args[j] in locals_:
                            acc.append((n.args[j], n.get("pipe"), "r", path + (i,)))
                    for j in writes:
                        if n.args[j] in locals_:
                            acc.append((n.args[j], n.get("pipe"), "w", path + (i,)))
                if n.body:
                    walk(n.body, path + (i,))

        walk(region.body, ())
        groups = {}     # (block path, W, R) -> [first_w, last_w, first_r, last_r]
        for buf in sorted({a[0] for a in acc}):
            ws = [a for a in acc if a[0] == buf and a[2] == "w"]
            rs = [a for a in acc if a[0] == buf and a[2] == "r"]
            for wp in sorted({a[1] for a in ws}):
                for rp in sorted({a[1] for a in rs}):
                    if wp == rp or wp is None or rp is None:
                        continue
                    paths = [a[3] for a in ws if a[1] == wp] + [a[3] for a in rs if a[1] == rp]
                    block = _common_block(paths)
                    wi = [a[3][len(block)] for a in ws if a[1] == wp]
                    ri = [a[3][len(block)] for a in rs if a[1] == rp]
                    if max(wi) >= min(ri):
                        raise ValueError(f"%{buf}: its {wp} writes and {rp} reads interleave in one block; "
                                         f"cannot order them with one event pair")
                    g = groups.setdefault((block, wp, rp), [min(wi), max(wi), min(ri), max(ri)])
                    g[:] = [min(g[0], min(wi)), max(g[1], max(wi)), min(g[2], min(ri)), max(g[3], max(ri))]
        ins = {}        # block path -> [(position, 0 set | 1 wait, node)]
        ids = {}
        pre, post = [], []
        for (block, wp, rp), (fw, lw, fr, lr) in sorted(groups.items()):
            if lw >= fr:
                raise ValueError(f"buffers sharing the {wp}->{rp} event interleave their writes and reads")
            raw, war = f"{wp}_{rp}", f"{rp}_{wp}"
            raw_id = ids[raw] = ids.get(raw, -1) + 1
            loop = bool(block)      # inside a loop: the buffer is reused, so also order readers -> next writer
            war_id = None
            if loop:
                war_id = ids[war] = ids.get(war, -1) + 1
            for ev, i in ((raw, raw_id), (war, war_id)):
                if i is not None and i >= limit:
                    raise ValueError(f"more than {limit} events of type {ev} needed in one region")
            L = ins.setdefault(block, [])
            role = region.get("roles", ("other",))[0]
            mk = lambda op, ev, i: Node(op, "", (), None, {"event": ev, "id": i, "role": role})
            L.append((lw + 1, 0, mk(Op.SET_FLAG, raw, raw_id)))
            L.append((fr, 1, mk(Op.WAIT_FLAG, raw, raw_id)))
            if loop:
                L.append((fw, 1, mk(Op.WAIT_FLAG, war, war_id)))
                L.append((lr + 1, 0, mk(Op.SET_FLAG, war, war_id)))
                pre.append(mk(Op.SET_FLAG, war, war_id))
                post.append(mk(Op.WAIT_FLAG, war, war_id))

        def rebuild(body, path):
            items = ins.get(path, [])
            out = []
            for i, n in enumerate(list(body) + [None]):
                for _, _, x in sorted((it for it in items if it[0] == i), key=lambda it: it[1]):
                    out.append(x)
                if n is not None:
                    out.append(n.with_body(rebuild(n.body, path + (i,))) if n.body else n)
            return out

        body = rebuild(region.body, ())
        return region.with_body(_after_scalars(body, pre) + post)


def _common_block(paths):
    """Longest common prefix that is a block (strictly shorter than every path)."""
    n = min(len(p) for p in paths) - 1
    i = 0
    while i < n and all(p[i] == paths[0][i] for p in paths):
        i += 1
    return paths[0][:i]


def _after_scalars(body, pre):
    """Put the pre-set flags after the region's leading scalar setup (and before its first loop)."""
    i = 0
    while i < len(body) and body[i].op not in (Op.FOR, Op.IF):
        i += 1
    return list(body[:i]) + pre + list(body[i:])


PASS = AscendInsertSync()
