"""AscendC backend: the emitter (emit.py), the CPU emulator and API-declaration headers (emu/), and the
Ascend GEMM cost MODEL (costmodel.py)."""
from .emit import EmitError, emit_ascendc

__all__ = ["emit_ascendc", "EmitError"]
