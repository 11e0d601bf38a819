"""order_wgmma_issue: the math warpgroups issue their wgmma groups in strict rotation."""
from __future__ import annotations

from dgir.ir import Node, Op, map_bodies

from . import Pass


class OrderWgmmaIssue(Pass):
    """A scheduling pass for kernels whose math region has two or three warpgroups (BLOCK_M 128, 192,
    256): each wgmma group (one `wgmma` op: fence, the K steps, commit) is preceded by
    `turn [step=wait]` and followed by `turn [step=pass]`, so warpgroup 0 issues its group, then
    warpgroup 1 (then 2), then 0 again.
    Without it both warpgroups can issue at once; if the tensor cores then share their work
    between the two groups, both finish together and both promote together while the tensor cores
    idle.  With strict issue alternation, one warpgroup's promotion FFMAs run while the other's group
    executes (CUTLASS's "ping-pong" idea, here per wgmma group instead of per tile).
    `turn [step=prime]` at the top hands warpgroup 0 the first turn, `turn [step=drain]` at the end
    takes the last warpgroup's last pass, so every named barrier ends balanced (the interpreter
    checks that).

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
        take_turns = self.pass_after_retire if order == "pingpong" else self.pass_after_issue
        body = []
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()) and len(r.get("ids", ())) >= 2:
                r = map_bodies(r, lambda parent, b: take_turns(b))
                r = r.with_body([turn("prime")] + list(r.body) + [turn("drain")])
            body.append(r)
        return kernel.with_body(body)

    @staticmethod
    def pass_after_issue(body) -> list[Node]:
        return [x for n in body for x in ([turn("wait"), n, turn("pass")] if n.op is Op.WGMMA else [n])]

    @staticmethod
    def pass_after_retire(body) -> list[Node]:
        if any(n.op is Op.WGMMA_WAIT and n.get("pending", 0) for n in body):
            # a software-pipelined loop keeps a group in flight across the next slot wait: holding
            # the turn until it retires would deadlock (the interpreter shows it); pass after issue
            return OrderWgmmaIssue.pass_after_issue(body)
        out, owed = [], 0            # owed: groups issued in this body whose turn is not passed yet
        for n in body:
            if n.op is Op.WGMMA:
                # a second group before the first retired: pass first, or both warpgroups would
                # wait for each other's pass
                out += [turn("pass")] * owed + [turn("wait"), n]
                owed = 1
                continue
            out.append(n)
            if n.op is Op.WGMMA_WAIT and n.get("pending", 0) == 0 and owed:
                out += [turn("pass")] * owed
                owed = 0
        return out + [turn("pass")] * owed          # retired outside this body: pass at its end


def turn(step: str) -> Node:
    return Node(Op.TURN, "", (), None, {"step": step, "role": "mma"})


PASS = OrderWgmmaIssue()
