"""order_wgmma_issue: the two math warpgroups issue their wgmma groups in strict alternation."""
from __future__ import annotations

from dgir.ir import Node, Op, expand_ops

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

    The schedule is chosen per kernel: the pass acts on kernels lowered with the config knob
    `math_order="alternate"` (kernel attr `math_order`) and leaves the others alone.  Measured on
    the H200 (bench/TUNING.md step 14): +7% for 128x192 tiles at 4096x2112x7168, within +-2%
    for 256x128, -1.6% for the interleaved 128x128 loop; so the tuned table picks it per shape.
    """
    name = "order_wgmma_issue"

    def run(self, kernel: Node) -> Node:
        if kernel.get("math_order") != "alternate" or any(n.op is Op.TURN for n in kernel.walk()):
            return kernel                                   # not asked for, or already applied
        body = []
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()) and len(r.get("ids", ())) == 2:
                role = {"role": "mma"}
                r = expand_ops(r, self.take_turns)
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


PASS = OrderWgmmaIssue()
