"""order_wgmma_issue: the two math warpgroups issue their wgmma groups in strict alternation."""
from __future__ import annotations

from dgir.ir import Node, Op, map_bodies

from . import Pass


class OrderWgmmaIssue(Pass):
    """A scheduling pass for kernels whose math region has two warpgroups (BLOCK_M 128 / 256): each
    wgmma group (one `wgmma` op: fence, the K steps, commit) is preceded by `turn [step=wait]` and
    followed by `turn [step=pass]`, so warpgroup 0 issues its group, then warpgroup 1, then 0 again.
    Without it both warpgroups can issue at once; if the tensor cores then share their work
    between the two groups, both finish together and both promote together while the tensor cores
    idle.  With strict issue alternation, one warpgroup's promotion FFMAs run while the other's group
    executes (CUTLASS's "ping-pong" idea, here per wgmma group instead of per tile).
    `turn [step=prime]` at the top hands warpgroup 0 the first turn, `turn [step=drain]` at the end
    takes warpgroup 1's last pass, so both named barriers end balanced (the interpreter checks that).

    `math_order="pingpong"` passes the turn only once the group has retired (after the
    `wgmma_wait [pending=0]` that follows it in the same body; a group retired elsewhere, e.g. the
    overlapped epilogue's, passes right after issue as before): then the tensor cores run one
    warpgroup's group at a time even if they would interleave two groups issued back to back, at the
    price of the turn's latency between groups.

    The schedule is chosen per kernel: the pass acts on kernels lowered with the config knob
    `math_order="alternate"` or `"pingpong"` (kernel attr `math_order`) and leaves the others alone.
    Measured on the H200 (bench/TUNING.md steps 14, 17, 19): alternate +7% for 128x192 tiles while
    the ring-slot division was a MUFU sequence, within +-2% after that was fixed (+3% at 4096x576);
    pingpong -9% for 256x128 tiles (the tensor pipe already runs groups in issue order); so the
    tuned table picks the order per shape, head-to-head in one run.
    """
    name = "order_wgmma_issue"

    def run(self, kernel: Node) -> Node:
        order = kernel.get("math_order")
        if order not in ("alternate", "pingpong") or any(n.op is Op.TURN for n in kernel.walk()):
            return kernel                                   # not asked for, or already applied
        take_turns = self.pass_after_retire if order == "pingpong" else lambda body: [
            x for n in body for x in self.take_turns(n)]
        body = []
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()) and len(r.get("ids", ())) == 2:
                role = {"role": "mma"}
                r = map_bodies(r, lambda parent, b: take_turns(b))
                r = r.with_body([Node(Op.TURN, "", (), None, {"step": "prime", **role})] + list(r.body)
                                + [Node(Op.TURN, "", (), None, {"step": "drain", **role})])
            body.append(r)
        return kernel.with_body(body)

    @staticmethod
    def take_turns(n: Node) -> list[Node]:
        if n.op is not Op.WGMMA:
            return [n]
        role = {"role": n.role}
        return [Node(Op.TURN, "", (), None, {"step": "wait", **role}), n,
                Node(Op.TURN, "", (), None, {"step": "pass", **role})]


    @staticmethod
    def pass_after_retire(body) -> list[Node]:
        if any(n.op is Op.WGMMA_WAIT and n.get("pending", 0) for n in body):
            # a software-pipelined loop keeps a group in flight across the next slot wait: holding
            # the turn until it retires would deadlock (the interpreter shows it); pass after issue
            return [x for n in body for x in OrderWgmmaIssue.take_turns(n)]
        out, owed = [], 0            # owed: groups issued in this body whose turn is not passed yet
        for n in body:
            if n.op is Op.WGMMA:
                # a second group before the first retired (the interleaved loop): pass first, or both
                # warpgroups would wait for each other's pass
                out += [Node(Op.TURN, "", (), None, {"step": "pass", "role": n.role})] * owed
                out += [Node(Op.TURN, "", (), None, {"step": "wait", "role": n.role}), n]
                owed = 1
                continue
            out.append(n)
            if n.op is Op.WGMMA_WAIT and n.get("pending", 0) == 0 and owed:
                out += [Node(Op.TURN, "", (), None, {"step": "pass", "role": n.role})] * owed
                owed = 0
        if owed:                     # retired outside this body: pass at the end of it
            out += [Node(Op.TURN, "", (), None, {"step": "pass", "role": "mma"})] * owed
        return out


PASS = OrderWgmmaIssue()
