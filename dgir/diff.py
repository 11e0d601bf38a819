"""`dgir diff`: compare the numbered IR dumps of one kernel.

A dump directory holds `00_<lowering>.dgir`, `01_<pass>.dgir`, ... in pipeline order.  A stage is
named by its pass name (`interleave_ffma`; the first run when a pass ran twice), `name#2` (its
second run), the file stem (`05_interleave_ffma`) or its number (`5`).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

_STEM = re.compile(r"^(\d+)_(.+)$")


class DiffError(ValueError):
    """A dump directory or stage that cannot be found."""


@dataclass(frozen=True)
class Stage:
    seq: int
    name: str
    path: Path

    @property
    def stem(self) -> str:
        return self.path.stem


def stages(dump_dir: str | Path) -> list[Stage]:
    """The numbered dumps of a kernel directory, in pipeline order.

    `dump_dir` may also be a `--dump-dir` root that holds exactly one kernel directory."""
    d = Path(dump_dir)
    if not d.is_dir():
        raise DiffError(f"no dump directory {str(d)!r}")
    found = _scan(d)
    if not found:
        kids = [k for k in sorted(d.iterdir()) if k.is_dir() and not k.name.startswith(".") and _scan(k)]
        if len(kids) == 1:
            return _scan(kids[0])
        if kids:
            raise DiffError(f"{d} holds {len(kids)} kernel dump directories; name one of: "
                            + ", ".join(k.name for k in kids))
        raise DiffError(f"{d} holds no numbered .dgir dumps (NN_name.dgir)")
    return found


def _scan(d: Path) -> list[Stage]:
    out = []
    for p in d.glob("*.dgir"):
        m = _STEM.match(p.stem)
        if m:
            out.append(Stage(int(m.group(1)), m.group(2), p))
    return sorted(out, key=lambda s: s.seq)


def resolve(all_stages: list[Stage], key: str) -> Stage:
    """Find a stage by pass name, `name#N`, `NN_name` stem or number."""
    if key.endswith(".dgir"):
        key = key[:-5]
    for s in all_stages:
        if key == s.stem:
            return s
    if key.isdigit():
        for s in all_stages:
            if s.seq == int(key):
                return s
    name, _, nth = key.partition("#")
    hits = [s for s in all_stages if s.name == name]
    if nth:
        if not nth.isdigit() or int(nth) < 1:
            raise DiffError(f"bad stage {key!r}: after '#' comes a run number (1, 2, ...)")
        if int(nth) <= len(hits):
            return hits[int(nth) - 1]
        if hits:
            raise DiffError(f"pass {name!r} ran {len(hits)} time(s) in this dump; no run #{nth}")
    elif hits:
        return hits[0]
    raise DiffError(f"no dump for {key!r}; stages: {', '.join(s.stem for s in all_stages)}")


def pair(dump_dir: str | Path, a: str, b: str | None = None) -> tuple[Stage, Stage]:
    """(before, after): a and b, or with b omitted, pass a's input and its output."""
    return pair_of(stages(dump_dir), a, b)


def pair_of(all_stages: list[Stage], a: str, b: str | None = None) -> tuple[Stage, Stage]:
    """`pair` over stages already listed (a dump directory's, or a CompileResult's in memory)."""
    sa = resolve(all_stages, a)
    if b is not None:
        return sa, resolve(all_stages, b)
    earlier = [s for s in all_stages if s.seq < sa.seq]
    if not earlier:
        raise DiffError(f"{sa.stem} is the first dump: it has no input to compare with "
                        "(name two stages to compare)")
    return earlier[-1], sa


def _body(path: Path) -> list[str]:
    """The dump's lines without its header (the header only restates the pipeline position)."""
    lines = path.read_text().splitlines(keepends=True)
    if lines and lines[0].startswith("// dgir"):
        lines = lines[1:]
    return lines


def unified(before: Stage, after: Stage, context: int = 3) -> str:
    return unified_lines(_body(before.path), _body(after.path), before.path.name, after.path.name, context)


def unified_lines(before: list[str], after: list[str], before_name: str, after_name: str, context: int = 3) -> str:
    return "".join(difflib.unified_diff(before, after, f"a/{before_name}", f"b/{after_name}", n=context))


def html(before: Stage, after: Stage, context: int = 3) -> str:
    """A self-contained side-by-side HTML page."""
    page = difflib.HtmlDiff(tabsize=2, wrapcolumn=110).make_file(
        [x.rstrip("\n") for x in _body(before.path)], [x.rstrip("\n") for x in _body(after.path)],
        before.path.name, after.path.name, context=True, numlines=context)
    title = f"dgir diff {before.stem} → {after.stem}"
    return page.replace("<title></title>", f"<title>{title}</title>", 1)
