"""The PTX emitter's error type."""


class EmitError(ValueError):
    """The IR holds something the PTX emitter cannot express; names the op."""
