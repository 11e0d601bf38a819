"""`dgir run OP --m M --n N --k K [--target sm90a|ascend-emu]`: one shape, one JSON line.

sm90a runs our generated kernel on the GPU (dgir.gpu_run); ascend-emu compiles the AscendC kernel
against the CPU emulator (dgir.ascend_run).  Exit code 1 when `diff` is over the threshold."""
from __future__ import annotations

import importlib

from .cli import CLIError, subcommand

RUNNERS = {"sm90a": "dgir.gpu_run", "ascend-emu": "dgir.ascend_run"}


@subcommand("run", "compile and run one shape, print one JSON line (exit 1 if diff is over the threshold)")
class Run:
    @staticmethod
    def add_arguments(p):
        p.add_argument("op")
        p.add_argument("--m", type=int, required=True)
        p.add_argument("--n", type=int, required=True)
        p.add_argument("--k", type=int, required=True)
        p.add_argument("--target", default="sm90a", choices=sorted(RUNNERS))
        p.add_argument("--chip", default="950", choices=["950", "910b"], help="ascend-emu chip profile")
        p.add_argument("--groups", type=int, help="m-grouped operators: number of groups (ascend-emu)")
        p.add_argument("--device", default="cuda:0", help="sm90a: the torch device")
        p.add_argument("--no-time", action="store_true", help="sm90a: check only, don't time")
        p.add_argument("--seed", type=int, default=0)

    @staticmethod
    def run(args) -> int:
        try:
            mod = importlib.import_module(RUNNERS[args.target])
        except ModuleNotFoundError as e:
            raise CLIError(f"target {args.target!r} has no runner here ({e.name} is missing)") from None
        return mod.main(args)
