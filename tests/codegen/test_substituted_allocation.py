"""A variable substituted into a statement reaches the shapes of the buffers it allocates, and the
accesses in the allocation's body follow the buffer (IRMutator's default ``visit_Allocate``).
Before, the shape kept the old variable: after a unit loop was replaced by its body, the
allocation's size named a variable bound nowhere."""
import os
import sys

import numpy as np

from tilecraft.codegen.llvm import build_llvm
from tilecraft.ir import (Allocate, Buffer, BufferLoad, BufferStore, SeqStmt, Var, const,
                          structural_equal)
from tilecraft.ir.functor import post_order_visit, substitute

sys.path.insert(0, os.path.dirname(__file__))
from llvm_ir_helpers import buf, func, ld, loop, poisoned, rand, st  # noqa: E402


def _accessed_buffers(stmt):
    out = []
    post_order_visit(stmt, lambda n: out.append(n.buffer) if isinstance(n, (BufferLoad, BufferStore)) else None)
    return out


def test_substitution_rebuilds_the_allocated_buffer_and_its_accesses():
    n, i = Var("n"), Var("i")
    A = buf("A", (64,))
    T = Buffer("T", (n * 2,), "float32", "local")
    s = Allocate(T, SeqStmt((BufferStore(T, ld(A, i), (i,)),
                             BufferStore(A, BufferLoad(T, (i,), "float32") + 1.0, (i,)))))
    r = substitute(s, {n: const(3)})
    assert structural_equal(r.buffer.shape[0], substitute(n * 2, {n: const(3)}))   # 3 * 2
    assert r.buffer is not T and r.buffer.data is T.data and r.buffer.name == "T"
    assert [b for b in _accessed_buffers(r.body) if b.name == "T"] == [r.buffer, r.buffer]
    assert [b for b in _accessed_buffers(r.body) if b.name == "A"] == [A, A]
    assert substitute(s, {Var("m"): const(3)}) is s          # nothing to replace: the same node


def test_a_unit_loop_replaced_by_its_body_allocates_the_right_size():
    # for i in [0, 1): T = allocate(float32[(i + 1) * 8]); T[j] = A[j] * 2; B[j] = T[j] + 1
    # as the simplifier and unroll do it: the body with i := 0
    i, j, k = Var("i"), Var("j"), Var("k")
    A, B = buf("A", (8,)), buf("B", (8,))
    T = Buffer("T", ((i + 1) * 8,), "float32", "global")
    body = Allocate(T, SeqStmt((loop(j, 8, st(T, j, ld(A, j) * 2.0)),
                                loop(k, 8, st(B, k, ld(T, k) + 1.0)))))
    f = build_llvm(func("unit", (A, B), substitute(body, {i: const(0)})))
    a, b = rand(8), poisoned(8)
    f(a, b)
    np.testing.assert_allclose(b, a * 2.0 + 1.0, rtol=1e-6)
