"""Text format: parse_ir(print_ir(k)) == k after every pass and for random IR; headers; ParseError."""
from __future__ import annotations

import pytest
from dgir_testlib import CONFIGS, SM90A_PASSES, cfg_id, stages_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dgir
from dgir.ir import STRUCTURED, DType, Node, Op, Type
from dgir.parser import parse_header
from dgir.printer import print_ir


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_roundtrip_after_every_pass(cfg):
    seen = []
    for stem, kernel in stages_for(cfg):
        text = dgir.print_ir(kernel)
        back = dgir.parse_ir(text)
        assert back == kernel, f"{stem} does not round-trip"
        assert hash(back) == hash(kernel)
        assert dgir.print_ir(back) == text          # printing is canonical
        seen.append(stem.split("_", 1)[1])
    assert seen == ["lower_gemm"] + SM90A_PASSES


def test_structural_equality_includes_attributes():
    k = stages_for(CONFIGS[0])[-1][1]
    changed = k.with_attrs(stages=k.get("stages") + 1)
    assert changed != k
    assert dgir.parse_ir(dgir.print_ir(changed)) == changed
    assert dgir.parse_ir(dgir.print_ir(changed)) != k


# --- random IR ----------------------------------------------------------------------------------
_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_REST = _FIRST + "0123456789"
IDENT = st.builds(lambda a, b: a + b, st.sampled_from(_FIRST), st.text(_REST, max_size=5))
NAME = st.builds(lambda a, b: a + b, st.sampled_from(_FIRST), st.text(_REST + ".", max_size=5))
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.integers(-2**62, 2**62), FLOATS, st.text(max_size=8), st.booleans())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=5)
DIMS = st.one_of(st.integers(0, 1 << 20), IDENT)
TYPES = st.builds(Type, st.sampled_from(list(DType)), st.lists(DIMS, max_size=3).map(tuple))
ARGS = st.lists(st.one_of(NAME, st.integers(-2**40, 2**40), FLOATS), max_size=4).map(tuple)
ATTRS = st.dictionaries(IDENT, VALUES, max_size=3)
LEAF_OPS = [o for o in Op if o not in STRUCTURED]
BODY_OPS = [Op.WARPGROUP, Op.FOR, Op.IF]


def _leaf():
    return st.builds(Node, st.sampled_from(LEAF_OPS), st.one_of(st.just(""), NAME), ARGS,
                     st.one_of(st.none(), TYPES), ATTRS)


def _nested(children):
    return st.builds(Node, st.sampled_from(BODY_OPS), st.one_of(st.just(""), NAME), ARGS, st.none(), ATTRS,
                     st.lists(children, max_size=3).map(tuple))


NODES = st.recursive(_leaf(), _nested, max_leaves=8)
KERNELS = st.builds(Node, st.just(Op.KERNEL), NAME, st.just(()), st.none(), ATTRS,
                    st.lists(NODES, max_size=4).map(tuple))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(KERNELS)
def test_roundtrip_random_ir(kernel):
    text = dgir.print_ir(kernel)
    back = dgir.parse_ir(text)
    assert back == kernel
    # Node equality lets True == 1 == 1.0 (Python's): the reprinted text tells them apart
    assert dgir.print_ir(back) == text


@settings(max_examples=150, deadline=None)
@given(NODES)
def test_roundtrip_random_nodes(n):
    text = dgir.print_ir(n)
    assert dgir.parse_ir(text) == n
    assert dgir.print_ir(dgir.parse_ir(text)) == text


@settings(max_examples=50, deadline=None)
@given(KERNELS, st.sampled_from(["sm90a", "ascend950", "ascend910b"]),
       st.builds("{:02d}_{}".format, st.integers(0, 99), IDENT))
def test_roundtrip_random_ir_with_header(kernel, target, position):
    text = dgir.print_ir(kernel, target, position)
    assert text.startswith("// dgir v")
    assert dgir.parse_ir(text) == kernel
    assert parse_header(text) == {"version": 1, "target": target, "position": position}


# --- dump headers --------------------------------------------------------------------------------
def test_dump_header_roundtrip():
    stem, k = stages_for(CONFIGS[5])[3]
    text = print_ir(k, "sm90a", stem)
    first = text.split("\n", 1)[0]
    assert first == f"// dgir v1 target=sm90a position={stem}"
    assert parse_header(text) == {"version": 1, "target": "sm90a", "position": stem}
    assert dgir.parse_ir(text) == k
    assert parse_header(dgir.print_ir(k)) == {}          # no header without a target


def test_comments_and_blank_lines_are_ignored():
    text = "// a comment\n\n%k = kernel [a=1] {   // trailing\n  // inside\n  zero(%x)\n}\n"
    k = dgir.parse_ir(text)
    assert k == Node(Op.KERNEL, "k", (), None, {"a": 1}, (Node(Op.ZERO, "", ("x",)),))


def test_attribute_kinds_roundtrip():
    n = Node(Op.KERNEL, "k", (), None, {"i": -3, "f": 2.5e-07, "big": 10 ** 20, "s": 'q"uo\\te\n\u00e9',
                                      "t": True, "fa": False, "l": (1, (2.0, "x"), ()), "e": ()},
             (Node(Op.REGS, "r", (), Type(DType.e2m1, (64, "M", 0))),
              Node(Op.CONST, "c", (-1, 1.5, "r"), Type(DType.i32), {"role": "mma"})))
    assert dgir.parse_ir(dgir.print_ir(n)) == n


# --- errors -------------------------------------------------------------------------------------
BAD = [
    # (text, line, column, words in the message)
    ("%k = kernel {\n  %x = frobnicate : i32\n}\n", 2, 8, "unknown op 'frobnicate'"),
    ("%k = kernel {\n  %x = const : f33\n}\n", 2, 16, "unknown element type 'f33'"),
    ("%k = kernel {\n  zero(%acc) [role=]\n}\n", 2, 20, "unexpected ']', expected one of: '['"),
    ("%k = kernel {\n  zero(%acc)\n", 2, 12, "unexpected end of input, expected one of: %name, '}'"),
    ("%k = kernel {\n  zero(%acc) $\n}\n", 2, 14, "unexpected character '$'"),
    ("%k = kernel [s=\"open] {\n}\n", 1, 16, "unexpected character '\"'"),
    ("%k = kernel {\n  regs : f32[64,\n}\n", 3, 1, "unexpected"),
]


@pytest.mark.parametrize("text,line,column,words", BAD)
def test_parse_error_names_line_and_column(text, line, column, words):
    with pytest.raises(dgir.ParseError) as ei:
        dgir.parse_ir(text)
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.line == line
    assert e.column == column
    assert str(e).startswith(f"line {line}, column {e.column}: ")
    assert words in str(e)


def test_parse_error_is_public_and_a_value_error():
    assert issubclass(dgir.ParseError, ValueError)
    with pytest.raises(ValueError):
        dgir.parse_ir("")
