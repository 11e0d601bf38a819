"""Read the text format back into the same `Node` the pipeline passes around (lark, LALR)."""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import lark

from .ir import DType, Node, Op, Type


class ParseError(ValueError):
    """Malformed IR text; the message names line and column."""

    def __init__(self, msg: str, line: int | None = None, column: int | None = None):
        self.line, self.column = line, column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + msg)


@functools.cache
def _parser() -> lark.Lark:
    # the transformer runs inside the LALR parser (no parse tree is built): ~3x faster
    grammar = (Path(__file__).parent / "grammar.lark").read_text()
    return lark.Lark(grammar, parser="lalr", maybe_placeholders=True, transformer=_Build())


_OPS = {o.value: o for o in Op}


def _num(tok: str):
    if re.fullmatch(r"[+-]?\d+", tok):
        return int(tok)
    return float(tok)


class _Build(lark.Transformer):
    def start(self, c):
        return c[0]

    def ref(self, c):
        return str(c[0])[1:]

    def num(self, c):
        return _num(str(c[0]))

    def string(self, c):
        return json.loads(str(c[0]))

    def true(self, c):
        return True

    def false(self, c):
        return False

    def list(self, c):
        return tuple(x for x in c if x is not None) if c != [None] else ()

    def args(self, c):
        return tuple(x for x in c if x is not None) if c != [None] else ()

    def attr(self, c):
        return (str(c[0]), c[1])

    def attrs(self, c):
        return dict(x for x in c if x is not None)

    def result(self, c):
        return str(c[0])[1:]

    def int_dim(self, c):
        return int(c[0])

    def sym_dim(self, c):
        return str(c[0])

    def shape(self, c):
        return tuple(c)

    def type(self, c):
        name = str(c[0])
        if name not in DType.__members__:
            raise ParseError(f"unknown element type {name!r}", c[0].line, c[0].column)
        return Type(DType[name], c[1] or ())

    def region(self, c):
        return tuple(c)

    def node(self, c):
        result, opname, args, attrs, typ, region = c
        op = _OPS.get(str(opname))
        if op is None:
            raise ParseError(f"unknown op {str(opname)!r}", opname.line, opname.column)
        return Node(op, result or "", args or (), typ, attrs or {}, region or ())


def _describe(terminal: str) -> str:
    """A terminal's spelling for error messages: '}' rather than RBRACE."""
    try:
        pat = _parser().get_terminal(terminal).pattern
    except (KeyError, AttributeError):
        return terminal
    if isinstance(pat, lark.lexer.PatternStr):
        return repr(pat.value)
    return {"NAME": "%name", "OPNAME": "op name", "IDENT": "identifier", "SIGNED_NUMBER": "number",
            "ESCAPED_STRING": "string", "INT": "integer"}.get(terminal, terminal)


def parse_header(text: str) -> dict:
    """`// dgir v1 target=sm90a position=03_promote_scales` -> {"version": 1, "target": ..., ...}."""
    first = text.lstrip().split("\n", 1)[0]
    m = re.match(r"//\s*dgir\s+v(\d+)(.*)", first)
    if not m:
        return {}
    out = {"version": int(m.group(1))}
    out.update(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
    return out


def parse_ir(text: str) -> Node:
    """Parse one kernel.  Raises ParseError (a ValueError) naming line and column."""
    try:
        return _parser().parse(text)
    except ParseError:
        raise
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, ParseError):
            raise e.orig_exc from None
        raise ParseError(str(e.orig_exc)) from None
    except lark.exceptions.UnexpectedInput as e:
        what = e.__class__.__name__
        if isinstance(e, lark.exceptions.UnexpectedToken):
            got = "end of input" if e.token.type == "$END" else repr(str(e.token))
            detail = f"unexpected {got}, expected one of: {', '.join(sorted(_describe(t) for t in e.expected)[:8])}"
        elif isinstance(e, lark.exceptions.UnexpectedCharacters):
            detail = f"unexpected character {text[e.pos_in_stream]!r}" if e.pos_in_stream is not None else what
        else:
            detail = "unexpected end of input"
        raise ParseError(detail, getattr(e, "line", None), getattr(e, "column", None)) from None
