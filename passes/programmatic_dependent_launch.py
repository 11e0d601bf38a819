"""programmatic_dependent_launch: let the kernel start while the stream's previous kernel finishes."""
from __future__ import annotations

from dgir.ir import Node, Op

from . import Pass


class ProgrammaticDependentLaunch(Pass):
    """Make the kernel safe, and useful, to launch with programmatic dependent launch (PDL: the
    `PROGRAMMATIC_STREAM_SERIALIZATION` launch attribute, DeepGEMM's `set_pdl(True)`).

    Such a launch may start the kernel while the previous kernel of the stream is still running, so
    * every warpgroup region starts with `grid_wait` (griddepcontrol.wait), placed after the
      tensor-map prefetches: those read the kernel's parameters, which no earlier kernel writes
      (and after the entry's L2 prefetches of prefetch_first_stages, which write nothing it reads).
      The barrier initialisation, the register reallocation and the descriptor fetches then overlap
      the previous kernel's tail, and every global read or write (TMA loads, B scales, D, split-K
      workspaces) waits until that kernel's writes are visible.  The verifier checks that order;
    * the load role ends with `launch_dependents` once its last TMA load is issued (before the
      cluster drain, which only waits for peers): the next kernel may then launch and set itself up
      on the SMs this grid's CTAs leave, while they finish their math and epilogues.  That kernel's
      own grid_wait still waits for this grid to complete, so this is safe at any point.

    Without the launch attribute both instructions do nothing (hopper-ptx.md section 7).  The pass
    marks the kernel `pdl=True`; the runtime uses the attribute only for kernels that carry it.
    Idempotent: regions that already wait are left alone.
    """
    name = "programmatic_dependent_launch"

    def run(self, kernel: Node) -> Node:
        body = []
        for region in kernel.body:
            if region.op is Op.WARPGROUP and not any(n.op is Op.GRID_WAIT for n in region.body):
                role = region.get("roles")[0]
                nodes = list(region.body)
                at = 0
                while at < len(nodes) and (nodes[at].op is Op.PREFETCH_TMAP or nodes[at].get("at") == "entry"):
                    at += 1
                nodes.insert(at, Node(Op.GRID_WAIT, "", (), None, {"role": role}))
                if "load" in region.get("roles"):
                    end = len(nodes)
                    while nodes[end - 1].op is Op.DRAIN:
                        end -= 1
                    nodes.insert(end, Node(Op.LAUNCH_DEPENDENTS, "", (), None, {"role": role}))
                region = region.with_body(nodes)
            body.append(region)
        return kernel.with_body(body).with_attrs(pdl=True)


PASS = ProgrammaticDependentLaunch()
