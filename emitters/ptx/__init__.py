"""The Hopper (sm_90a) PTX emitter."""
from .emit import EmitError, emit_ptx, kernel_params

__all__ = ["emit_ptx", "kernel_params", "EmitError"]
