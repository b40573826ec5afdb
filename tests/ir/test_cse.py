"""Common subexpression elimination and dead-code removal: printed results, and a differential
test that runs random store sequences before and after through a tiny statement interpreter."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tilecraft.ir import (Allocate, Binary, BinOp, Buffer, BufferLoad, BufferStore, Call, Const,
                          Evaluate, For, ForKind, IfThenElse, LetStmt, Select, SeqStmt, Var,
                          stmt_str)
from tilecraft.ir.cse import common_subexpression_elimination as cse, remove_dead_code

from ir_reference import reference as eval_expr

i, j, n = Var("i"), Var("j"), Var("n")


def i32(v):
    return Const(v, "int32")


def buf(name, size=64, dtype="int32", scope="global"):
    return Buffer(name, (i32(size),), dtype, scope)


A, B, C = buf("A"), buf("B"), buf("C")


def load(b, idx):
    return BufferLoad(b, (idx,), b.dtype)


# -- CSE --------------------------------------------------------------------------------------

def test_cse_in_one_store():
    k = i * 8 + j
    s = BufferStore(C, load(A, i * 8 + j) + load(B, i * 8 + j), (k,))
    assert stmt_str(cse(s)) == (
        "cse_v1 = i * 8 + j\n"
        "C[cse_v1] = A[cse_v1] + B[cse_v1]")


def test_cse_shares_loads_within_one_store():
    s = BufferStore(C, load(A, i) * load(A, i), (j,))
    assert stmt_str(cse(s)) == "cse_v1 = A[i]\nC[j] = cse_v1 * cse_v1"


def test_cse_largest_first_and_nested():
    x = (i * 8 + j) * 3
    s = BufferStore(C, load(A, x) + load(B, x) + load(A, i * 8 + j), (i * 8 + j,))
    assert stmt_str(cse(s)) == (
        "cse_v1 = i * 8 + j\n"
        "cse_v2 = cse_v1 * 3\n"
        "C[cse_v1] = A[cse_v2] + B[cse_v2] + A[cse_v1]")


def test_cse_across_stores_only_without_loads():
    s = SeqStmt((BufferStore(C, load(A, i + 1), (i * 4 + j,)),
                 BufferStore(A, load(A, i + 1) + 1, (i * 4 + j + 1,))))
    # the index arithmetic is shared; the load A[i + 1] is not (the first store may change A)
    assert stmt_str(cse(s)) == (
        "cse_v1 = i + 1\n"
        "cse_v2 = i * 4 + j\n"
        "C[cse_v2] = A[cse_v1]\n"
        "A[cse_v2 + 1] = A[cse_v1] + 1")


def test_cse_does_not_hoist_out_of_lazy_branches():
    guarded = load(A, i * 100)
    s = BufferStore(C, Select(i < n, guarded + guarded, i32(0), lazy=True), (i,))
    assert cse(s) is s


def test_cse_does_not_hoist_impure_calls():
    r = Call("tc_allreduce_sum", (load(A, i),), "int32")
    s = BufferStore(C, r + r, (i,))
    # its pure argument may be shared, the call itself must stay twice
    assert stmt_str(cse(s)) == "cse_v1 = A[i]\nC[i] = tc_allreduce_sum(cse_v1) + tc_allreduce_sum(cse_v1)"


def test_cse_leaves_unshared_code_alone():
    s = For(i, i32(0), i32(8), ForKind.SERIAL, BufferStore(C, load(A, i) + 1, (i,)))
    assert cse(s) is s


# -- dead code --------------------------------------------------------------------------------

def test_unused_let_is_removed():
    v = Var("v")
    s = LetStmt(v, i * 4, BufferStore(C, i32(1), (i,)))
    assert stmt_str(remove_dead_code(s)) == "C[i] = 1"


def test_used_let_is_kept():
    v = Var("v")
    s = LetStmt(v, i * 4, BufferStore(C, i32(1), (v,)))
    assert remove_dead_code(s) is s


def test_unread_allocation_and_its_stores_are_removed():
    T = buf("T", 16, scope="local")
    fill = For(j, i32(0), i32(16), ForKind.SERIAL, BufferStore(T, load(A, j), (j,)))
    s = Allocate(T, SeqStmt((fill, BufferStore(C, i32(1), (i32(0),)))))
    assert stmt_str(remove_dead_code(s)) == "C[0] = 1"


def test_read_allocation_is_kept():
    T = buf("T", 16, scope="local")
    s = Allocate(T, SeqStmt((BufferStore(T, load(A, j), (j,)), BufferStore(C, load(T, j), (j,)))))
    assert remove_dead_code(s) is s


def test_dead_code_cascades():
    T, U = buf("T", 4, scope="local"), buf("U", 4, scope="local")
    v = Var("v")
    body = SeqStmt((BufferStore(T, i32(1), (i32(0),)),
                    LetStmt(v, load(T, i32(0)), BufferStore(U, v, (i32(0),)))))
    s = Allocate(T, Allocate(U, SeqStmt((body, BufferStore(C, i32(2), (i32(0),))))))
    assert stmt_str(remove_dead_code(s)) == "C[0] = 2"


def test_empty_loops_and_branches_are_removed():
    s = SeqStmt((For(i, i32(0), i32(8), ForKind.SERIAL, Evaluate(i32(0))),
                 IfThenElse(i < n, Evaluate(i32(0)), BufferStore(C, i32(1), (i,)))))
    assert stmt_str(remove_dead_code(s)) == "if not i < n:\n  C[i] = 1"
    assert stmt_str(remove_dead_code(For(i, i32(0), i32(8), ForKind.SERIAL, Evaluate(i32(0))))) == "0"


# -- differential -----------------------------------------------------------------------------

def run(stmt, env, mem):
    """Execute a statement on ``mem`` (buffer data var -> list of ints)."""
    t = type(stmt)

    def ev(e):
        return eval_expr(_resolve_loads(e, env, mem), env)

    if t is SeqStmt:
        for s in stmt.seq:
            run(s, env, mem)
    elif t is BufferStore:
        idx = ev(stmt.indices[0]) % 64
        mem[stmt.buffer.data][idx] = ev(stmt.value)
    elif t is LetStmt:
        env[stmt.var] = ev(stmt.value)
        run(stmt.body, env, mem)
    elif t is For:
        for k in range(ev(stmt.min), ev(stmt.min) + ev(stmt.extent)):
            env[stmt.loop_var] = k
            run(stmt.body, env, mem)
    elif t is Allocate:
        mem.setdefault(stmt.buffer.data, [0] * 64)
        run(stmt.body, env, mem)
    elif t is IfThenElse:
        if ev(stmt.condition):
            run(stmt.then_case, env, mem)
        elif stmt.else_case is not None:
            run(stmt.else_case, env, mem)


def _resolve_loads(e, env, mem):
    """Replace every load by its current value (loads are the only thing the expression
    evaluator does not know); indices wrap into the 64-element buffers."""
    if type(e) is BufferLoad:
        idx = eval_expr(_resolve_loads(e.indices[0], env, mem), env) % 64
        return Const(mem[e.buffer.data][idx], "int32")
    return e.with_children(tuple(_resolve_loads(k, env, mem) for k in e.children()))


VARS = (i, j)
BUFS = (A, B, C)
leaf = st.one_of(st.sampled_from(VARS), st.integers(-3, 9).map(i32))


def _grow(sub):
    return st.one_of(
        st.builds(lambda op, a, b: Binary(op, a, b, "int32"),
                  st.sampled_from((BinOp.ADD, BinOp.MUL, BinOp.SUB, BinOp.MIN)), sub, sub),
        st.builds(load, st.sampled_from(BUFS), sub))


exprs = st.recursive(leaf, _grow, max_leaves=8)
stores = st.builds(lambda b, v, k: BufferStore(b, v, (k,)), st.sampled_from(BUFS), exprs, exprs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(stores, stores.map(lambda s: SeqStmt((s, s)))), min_size=1, max_size=5),
       st.integers(-5, 5), st.integers(-5, 5))
@pytest.mark.slow
def test_cse_and_dce_preserve_memory(body, vi, vj):
    prog = SeqStmt(tuple(body)) if len(body) > 1 else body[0]
    results = []
    for p in (prog, cse(prog), remove_dead_code(cse(prog))):
        mem = {b.data: [k * 7 % 13 - 5 for k in range(64)] for b in BUFS}
        run(p, {i: vi, j: vj}, mem)
        results.append(mem)
    assert results[0] == results[1] == results[2], stmt_str(cse(prog))


def test_prim_func_bodies():
    from tilecraft.ir import PrimFunc
    body = BufferStore(C, load(A, i * 8 + j) + load(B, i * 8 + j), (j,))
    f = PrimFunc("f", (A, B, C), body)
    assert stmt_str(cse(f).body).startswith("cse_v1 = i * 8 + j")
    assert remove_dead_code(f) is f
