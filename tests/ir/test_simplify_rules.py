"""One test per simplification rule, checked on the printed IR."""
import pytest

from tilecraft.ir import (Allocate, Binary, BinOp, Buffer, BufferLoad, BufferStore, Cast, Const, Evaluate,
                          For, ForKind, IfThenElse, LetStmt, PrimFunc, SeqStmt, SizeVar, Var,
                          cast, const, logical_not, max_expr, min_expr, select, stmt_str)
from tilecraft.ir.simplify import simplify

x, y, i, j, xo = Var("x"), Var("y"), Var("i"), Var("j"), Var("xo")
IJ = {i: (0, 15), j: (0, 31)}


def s(e, bounds=None) -> str:
    return str(simplify(e, bounds))


def i32(v):
    return Const(v, "int32")


def raw(op, a, b, d="int32"):
    """A binary node built without the constructor's own folding."""
    return Binary(op, a, b, d)


# -- constant folding -------------------------------------------------------------------------

@pytest.mark.parametrize("op, a, b, want", [
    (BinOp.ADD, 3, 4, "7"), (BinOp.SUB, 3, 10, "-7"), (BinOp.MUL, -6, 7, "-42"),
    (BinOp.FLOORDIV, -7, 2, "-4"), (BinOp.FLOORMOD, -7, 2, "1"),
    (BinOp.TRUNCDIV, -7, 2, "-3"), (BinOp.TRUNCMOD, -7, 2, "-1"),
    (BinOp.FLOORMOD, 7, -2, "-1"), (BinOp.MIN, 3, -4, "-4"), (BinOp.MAX, 3, -4, "3"),
    (BinOp.ADD, 2 ** 31 - 1, 1, str(-2 ** 31)),           # int32 wraps
    (BinOp.FLOORDIV, -2 ** 31, -1, str(-2 ** 31)),
    (BinOp.LT, 3, 4, "True"), (BinOp.EQ, 3, 4, "False"),
])
def test_fold_int(op, a, b, want):
    d = "bool" if op in (BinOp.LT, BinOp.EQ) else "int32"
    assert s(raw(op, i32(a), i32(b), d)) == want


def test_fold_int_division_by_zero_is_left_alone():
    e = raw(BinOp.FLOORDIV, i32(1), i32(0))
    assert simplify(e) is e


def test_fold_int8_wraps():
    e = raw(BinOp.ADD, Const(100, "int8"), Const(100, "int8"), "int8")
    assert simplify(e).value == -56


def test_fold_float_in_its_own_precision():
    e = raw(BinOp.ADD, Const(0.1, "float32"), Const(0.2, "float32"), "float32")
    import numpy as np
    assert simplify(e).value == float(np.float32(0.1) + np.float32(0.2))
    assert simplify(raw(BinOp.DIV, Const(1.0, "float32"), Const(0.0, "float32"), "float32")).op is BinOp.DIV


def test_fold_float16_and_float64():
    import numpy as np
    h = raw(BinOp.MUL, Const(0.1, "float16"), Const(3.0, "float16"), "float16")
    assert simplify(h).value == float(np.float16(0.1) * np.float16(3.0))
    d = raw(BinOp.SUB, Const(0.3, "float64"), Const(0.1, "float64"), "float64")
    assert simplify(d).value == 0.3 - 0.1
    assert s(raw(BinOp.LT, Const(0.1, "float32"), Const(0.2, "float32"), "bool")) == "True"


def test_float_identities():
    f = Var("f", "float32")
    assert simplify(f * 1.0) is f
    assert simplify(f / 1.0) is f
    e = f + 0.0                    # -0.0 + 0.0 is +0.0: not an identity for floats
    assert simplify(e) is e
    e = f * 0.0                    # NaN * 0 is NaN
    assert simplify(e) is e


def test_fold_bool_logic():
    t, f = Const(True, "bool"), Const(False, "bool")
    c = x < y
    assert s(raw(BinOp.AND, t, c, "bool")) == "x < y"
    assert s(raw(BinOp.AND, c, f, "bool")) == "False"
    assert s(raw(BinOp.OR, f, c, "bool")) == "x < y"
    assert s(raw(BinOp.OR, c, t, "bool")) == "True"
    assert s(raw(BinOp.AND, c, c, "bool")) == "x < y"
    assert s(logical_not(logical_not(c))) == "x < y"
    assert s(logical_not(c)) == "x >= y"


def test_fold_cast():
    assert s(Cast("float32", i32(3))) == "3.0"
    assert s(Cast("int8", i32(300))) == "int8(44)"
    assert s(Cast("int32", Const(-2.7, "float32"))) == "-2"
    assert s(Cast("bool", i32(5))) == "True"
    e = Cast("int32", Const(float("nan"), "float32"))
    assert simplify(e) is e


# -- linear canonical form --------------------------------------------------------------------

def test_add_constants():
    assert s((x + 3) + 4) == "x + 7"


@pytest.mark.parametrize("e, want", [
    (lambda: x * 1, "x"), (lambda: 1 * x, "x"), (lambda: x + 0, "x"), (lambda: x - 0, "x"),
    (lambda: x - x, "0"), (lambda: x * 0, "0"), (lambda: 0 * x, "0"),
    (lambda: (xo * 32 + 31) - xo * 32 + 1, "32"),
    (lambda: x + y - x, "y"), (lambda: x * 2 + x * 3, "x * 5"),
    (lambda: (x + 1) * 4, "x * 4 + 4"), (lambda: 5 - x, "5 - x"), (lambda: -x - 5, "-x - 5"),
    (lambda: -(x * 3), "x * -3"), (lambda: 3 - (x + 3), "-x"),
])
def test_linear(e, want):
    assert s(e()) == want


def test_linear_term_order_is_deterministic():
    a, b = Var("a"), Var("b")
    assert s(a + xo * 32) == "xo * 32 + a"
    assert s(b + a) == s(a + b) == "a + b"


# -- division and modulo ----------------------------------------------------------------------

def test_affine_div_mod():
    assert s((i * 32 + j) // 32, IJ) == "i"
    assert s((i * 32 + j) % 32, IJ) == "j"
    assert s((i * 32 + j + 32) // 32, IJ) == "i + 1"
    assert s((i * 64 + j * 2 + 1) // 64, IJ) == "i"
    assert s((i * 64 + j * 2 + 1) % 64, IJ) == "j * 2 + 1"


def test_affine_div_mod_without_bounds_on_the_remainder():
    # floor semantics: (32i + y) // 32 = i + y // 32 for every y
    assert s((i * 32 + y) // 32, {i: (0, 15), y: (-1000, 1000)}) == "i + y // 32"
    assert s((i * 32 + y) % 32, {i: (0, 15), y: (-1000, 1000)}) == "y % 32"


def test_affine_div_needs_no_wrap():
    # i*32 may wrap when i is unbounded, so nothing can be concluded
    e = (i * 32 + j) // 32
    assert simplify(e, {j: (0, 31)}) is e


def test_trunc_div_mod_only_when_non_negative():
    assert s(truncdiv(i * 32 + j, 32), IJ) == "i"
    assert s(truncmod(i * 32 + j, 32), IJ) == "j"
    e = truncdiv(i * 32 + y, 32)
    assert simplify(e, {i: (0, 15), y: (-31, 31)}) is e


def test_div_mod_by_one():
    assert s(x // 1) == "x"
    assert s(x % 1) == "0"
    assert s(truncdiv(x, 1)) == "x"
    assert s(truncmod(x, 1)) == "0"


def test_nested_div_mod():
    assert s((x // 4) // 8) == "x // 32"
    assert s((x % 32) % 8) == "x % 8"
    assert s((x % 8) % 32, {x: (-100, 100)}) == "x % 8"   # the bounds of x % 8 do it


def test_div_mod_recombine():
    assert s(x // 8 * 8 + x % 8) == "x"
    assert s(x % 8 + x // 8 * 8 + y) == "x + y"
    assert s((x // 10 * 20 + x % 10 * 2)) == "x * 2"
    assert s(truncdiv(x + 1, 4) * 4 + truncmod(x + 1, 4)) == "x + 1"
    e = x // 8 * 4 + x % 8
    assert simplify(e) is e


def test_mod_of_bounded_value():
    assert s(j % 32, IJ) == "j"
    assert s((j + 32) % 32, IJ) == "j"
    assert s(j // 32, IJ) == "0"


# -- min / max / comparisons / select ---------------------------------------------------------

def test_min_max():
    assert s(min_expr(i, 64), IJ) == "i"
    assert s(max_expr(i, 64), IJ) == "64"
    assert s(min_expr(x + 1, x), {x: (0, 100)}) == "x"
    assert s(max_expr(x, x)) == "x"
    e = min_expr(x, y)
    assert simplify(e) is e


def test_comparisons_from_bounds():
    assert s(i < 64, {i: (0, 63)}) == "True"
    assert s(i < 63, {i: (0, 63)}) == "i < 63"
    assert s(i >= 64, {i: (0, 63)}) == "False"
    assert s(i * 32 + j < 512, IJ) == "True"
    assert s(x + 1 > x, {x: (0, 100)}) == "True"
    assert s(x == x) == "True"
    e = x + 1 > x                  # x + 1 wraps at the top of int32
    assert simplify(e) is e


def test_select():
    assert s(select(i < 64, x, y), {i: (0, 63)}) == "x"
    assert s(select(i > 64, x, y), {i: (0, 63)}) == "y"
    assert s(select(x < y, x + 0, x)) == "x"


def test_size_var_is_non_negative():
    n = SizeVar("n")
    assert s(n >= 0) == "True"


def test_unchanged_expression_is_the_same_object():
    e = x * 4 + y
    assert simplify(e) is e
    e = (x + y) // 3
    assert simplify(e) is e


def truncdiv(a, b):
    return Binary(BinOp.TRUNCDIV, a, i32(b), "int32")


def truncmod(a, b):
    return Binary(BinOp.TRUNCMOD, a, i32(b), "int32")


# -- statements -------------------------------------------------------------------------------

A = Buffer("A", (i32(1024),), "float32")


def store(idx, v=None):
    return BufferStore(A, v if v is not None else Const(1.0, "float32"), (idx,))


def test_loop_bounds_reach_the_body():
    body = For(j, i32(0), i32(32), ForKind.SERIAL, store((i * 32 + j) // 32))
    loop = For(i, i32(0), i32(16), ForKind.SERIAL, body)
    assert stmt_str(simplify(loop)) == (
        "for i in range(0, 16):\n"
        "  for j in range(0, 32):\n"
        "    A[i] = 1.0")


def test_symbolic_extent_still_bounds_the_loop_variable():
    n = Var("n")
    io, ii = Var("io"), Var("ii")
    inner = For(ii, i32(0), i32(64), ForKind.SERIAL,
                IfThenElse(io * 64 + ii < n, store((io * 64 + ii) % 64)))
    loop = For(io, i32(0), (n + 63) // 64, ForKind.PARALLEL, inner)
    out = stmt_str(simplify(loop))
    assert "A[ii] = 1.0" in out and "if io * 64 + ii < n:" in out


def test_if_with_provable_condition():
    body = IfThenElse(i < 16, store(i), store(i + 1))
    loop = For(i, i32(0), i32(16), ForKind.SERIAL, body)
    assert stmt_str(simplify(loop)) == "for i in range(0, 16):\n  A[i] = 1.0"
    loop = For(i, i32(0), i32(16), ForKind.SERIAL, IfThenElse(i >= 16, store(i)))
    assert stmt_str(simplify(loop)) == "0"


def test_if_with_empty_then_branch_negates():
    st = IfThenElse(x < y, Evaluate(i32(0)), store(x))
    assert stmt_str(simplify(st)) == "if x >= y:\n  A[x] = 1.0"


def test_unit_loops_are_dropped():
    # a parallel loop too: its one iteration would wake a thread team (a GOMP_parallel call)
    for kind in (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED, ForKind.PARALLEL):
        loop = For(i, i32(3), i32(1), kind, store(i + 1))
        assert stmt_str(simplify(loop)) == "A[4] = 1.0"
    bound = For(i, i32(0), i32(1), ForKind.THREAD_BINDING, store(i), "threadIdx.x")
    assert simplify(bound) is bound          # a launch dimension of 1 stays


def test_empty_loops_and_bodies_are_dropped():
    assert stmt_str(simplify(For(i, i32(0), i32(0), ForKind.SERIAL, store(i)))) == "0"
    seq = SeqStmt((store(x), For(i, i32(0), i32(8), ForKind.SERIAL, Evaluate(i32(0)))))
    assert stmt_str(simplify(seq)) == "A[x] = 1.0"


def test_let_value_bounds_the_variable():
    v = Var("v")
    st = For(i, i32(0), i32(8), ForKind.SERIAL, LetStmt(v, i * 4, store(v // 4)))
    assert "A[i]" in stmt_str(simplify(st)) or "A[v // 4]" in stmt_str(simplify(st))
    assert stmt_str(simplify(LetStmt(v, i32(3), store(v % 4)))) == "v = 3\nA[v] = 1.0"


def test_same_variable_in_sibling_loops_with_different_extents():
    a = For(i, i32(0), i32(4), ForKind.SERIAL, IfThenElse(i < 4, store(i)))
    b = For(i, i32(0), i32(8), ForKind.SERIAL, IfThenElse(i < 4, store(i)))
    out = stmt_str(simplify(SeqStmt((a, b))))
    assert out.count("if i < 4") == 1


def test_unchanged_statement_is_the_same_object():
    loop = For(i, i32(0), Var("n"), ForKind.SERIAL, store(i, BufferLoad(A, (i,), "float32")))
    assert simplify(loop) is loop
    f = PrimFunc("f", (A,), loop)
    assert simplify(f) is f


def test_unit_loop_kept_when_an_allocation_shape_uses_its_variable():
    T = Buffer("T", (i + 1,), "float32", "local")
    loop = For(i, i32(0), i32(1), ForKind.SERIAL,
               Allocate(T, BufferStore(T, Const(1.0, "float32"), (i,))))
    assert simplify(loop) is loop
