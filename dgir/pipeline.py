"""Pass manager: target pipelines, user registration, and the one pass-event stream.

Everything that observes compilation (numbered dumps, `--time-passes`, the verifier, tests) is a
listener on the events `run_pipeline` sends: PassEvent(seq, name, before, after, seconds).
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Callable

from .ir import Node
from .verifier import VerifyError, verify

TARGETS = ("sm90a", "ascend950", "ascend910b")


class PassError(RuntimeError):
    """A pass raised, or its output failed the verifier; names the pass (and the op)."""


@dataclass(frozen=True)
class PassEvent:
    seq: int              # position in the pipeline; 0 is the lowering
    name: str
    before: Node | None
    after: Node
    seconds: float

    @property
    def stem(self) -> str:
        return f"{self.seq:02d}_{self.name}"


_registered: dict[str, list] = {t: [] for t in TARGETS}   # (pass, before, after, replace)


def base_pipeline(target: str) -> list:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    mod = importlib.import_module(f"dgir.passes.pipelines.{target}")
    return list(mod.PIPELINE)


def register_pass(p, target: str = "sm90a", *, before: str | None = None, after: str | None = None,
                  replace: str | None = None) -> None:
    """Insert a user pass into a target's pipeline next to (or instead of) a named pass."""
    if sum(x is not None for x in (before, after, replace)) != 1:
        raise ValueError("register_pass needs exactly one of before=, after=, replace=")
    if not getattr(p, "name", None) or not callable(getattr(p, "run", None)):
        raise TypeError(f"{p!r} is not a pass: it needs a `name` and a `run(kernel)` method")
    if not (type(p).__doc__ or "").strip():
        raise TypeError(f"pass {p.name!r} needs a docstring saying what it does")
    anchor = before or after or replace
    names = [q.name for q in pipeline(target)]
    if anchor not in names:
        raise ValueError(f"no pass named {anchor!r} in the {target} pipeline ({', '.join(names)})")
    _registered[target].append((p, before, after, replace))


def unregister_all(target: str | None = None) -> None:
    for t in ([target] if target else TARGETS):
        _registered[t].clear()


def pipeline(target: str) -> list:
    passes = base_pipeline(target)
    for p, before, after, replace in _registered[target]:
        names = [q.name for q in passes]
        i = names.index(before or after or replace)
        if replace:
            passes[i] = p
        else:
            passes.insert(i + (1 if after else 0), p)
    return passes


def identity(passes: list) -> str:
    """The pipeline's identity (names + source hashes), part of the kernel cache key."""
    from dgir.passes import Pass, source_hash
    out = []
    for p in passes:
        out.append(p.identity() if isinstance(p, Pass) else f"{p.name}:{source_hash(type(p))}")
    return ";".join(out)


def run_pipeline(kernel: Node, passes: list, listeners: list[Callable] = (), verify_each: bool = False,
                 lowering_name: str = "lower", start_seq: int = 0) -> Node:
    """Run `passes` in order, sending a PassEvent for the input (seq 0) and after every pass."""
    def send(ev):
        for fn in listeners:
            fn(ev)

    if start_seq == 0:
        send(PassEvent(0, lowering_name, None, kernel, 0.0))
    for i, p in enumerate(passes, start=start_seq + 1):
        t0 = time.perf_counter()
        try:
            out = p.run(kernel)
        except (PassError, VerifyError):
            raise
        except Exception as e:
            raise PassError(f"pass {p.name!r} failed: {type(e).__name__}: {e}") from e
        dt = time.perf_counter() - t0
        if not isinstance(out, Node):
            raise PassError(f"pass {p.name!r} returned {type(out).__name__}, expected a Node")
        if verify_each:
            try:
                verify(out)
            except VerifyError as e:
                raise PassError(f"pass {p.name!r} produced invalid IR: {e}") from None
        send(PassEvent(i, p.name, kernel, out, dt))
        kernel = out
    return kernel
