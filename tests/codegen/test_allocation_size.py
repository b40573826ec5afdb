"""The size of a local buffer is computed in 64 bits, even where the IR states it as an int32
product of extents (``m * n``): a buffer of more than 2**31 - 1 elements gets its real size (and
fails as out of memory where there is not that much), never a wrapped, too small one that the
code then writes past. Storage flattening folds a constant size exactly (int64 where int32 would
wrap).

None of these tests allocates much: the sizes are far beyond any machine's address space (2**47
bytes), so the allocation fails whatever the kernel's overcommit policy."""
import os
import re
import sys

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.llvm import build_llvm
from tilecraft.ir import Allocate, Const, Var, post_order_visit, seq
from tilecraft.runtime.status import KernelMemoryError

sys.path.insert(0, os.path.dirname(__file__))
from llvm_ir_helpers import buf, func, ld, poisoned, st  # noqa: E402


def _oom(name, nbytes, function):
    return re.escape(f"out of memory: could not allocate {nbytes} bytes for buffer '{name}' "
                     f"in function '{function}'")


def product_module():
    """C[0] = T[0] after T[0] = 2, where the local buffer T has m * n elements (int32 m, n)."""
    m, n = Var("m"), Var("n")
    C, T = buf("C", (1,)), buf("T", (m * n,), scope="local")
    body = Allocate(T, seq(st(T, 0, tc.ir.const(2.0)), st(C, 0, ld(T, 0))))
    return build_llvm(func("twice", (C, m, n), body))


@pytest.mark.parametrize("m, n, wrapped", [
    (1 << 23, (1 << 23) + 1, 1 << 23),              # int32 m * n wraps to 2**23: a 32 MiB buffer
    (1 << 24, (1 << 24) + (1 << 7), -(1 << 31)),    # wraps to a negative count
])
def test_an_int32_product_size_is_allocated_in_64_bits(m, n, wrapped):
    assert np.int32(np.int64(m) * n) == wrapped     # what 32-bit arithmetic made of it
    mod = product_module()
    with pytest.raises(KernelMemoryError, match=_oom("T", 4 * m * n, "twice")):
        mod(poisoned(1), m, n)
    c = poisoned(1)
    mod(c, 3, 5)                                     # and a small one still works
    assert c[0] == 2.0


def test_a_constant_size_past_int32_is_folded_exactly():
    """An intermediate stage of 2**23 × (2**23 + 1) elements: the flattened allocation's size is
    that product (an int64 constant), not its int32 wrap (2**23)."""
    M, N = 1 << 23, (1 << 23) + 1
    A = te.placeholder((M, N), name="A")
    B = te.compute((M, N), lambda i, j: A[i, j] * 2.0, name="B")
    k1, k2 = te.reduce_axis((0, M), name="k1"), te.reduce_axis((0, N), name="k2")
    C = te.compute((1,), lambda i: te.sum(B[k1, k2], axis=[k1, k2]), name="C")
    s = te.create_schedule(C.op)
    sizes = []
    post_order_visit(tc.lower(s, [A, C], target="llvm").body,
                     lambda x: sizes.append(x.buffer.shape) if isinstance(x, Allocate) else None)
    assert sizes == [(Const(M * N, "int64"),)]


def test_a_constant_size_that_fits_int32_stays_int32():
    A = te.placeholder((300, 200), name="A")
    B = te.compute((300, 200), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((300, 200), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    sizes = []
    post_order_visit(tc.lower(s, [A, C]).body,
                     lambda x: sizes.append(x.buffer.shape) if isinstance(x, Allocate) else None)
    assert sizes == [(Const(60000, "int32"),)]
