"""``te.hybrid.build`` / ``te.hybrid.HybridModule`` (TVM's ``run_and_check`` round trip, in
spirit): a schedule printed as a hybrid script (golden files), the module run as Python on numpy
arrays, saved to a ``.py`` file and loaded back, and called with tensors again: the new stage is
built (CPU, with poisoned outputs; CUDA in the emulator) and compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.schedule.hybrid_dump import HybridDumpError


@te.hybrid.script
def outer_product(n, m, a, b):
    c = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            assert i < n and j < m, "index out of range!"
            c[i, j] = a[i] * b[j]
    return c


def test_outer_product_round_trip(golden, check_llvm, rand, tmp_path):
    """TVM's test_outer_product: build the script's schedule as a HybridModule, save it, load it
    into an empty HybridModule and run that as TVM's helper does (with tensors, then numbers)."""
    n, m = te.size_var("n"), te.size_var("m")
    a, b = te.placeholder((n,), name="a"), te.placeholder((m,), name="b")
    c = outer_product(n, m, a, b)
    mod = te.hybrid.build(te.create_schedule(c.op), [n, m, a, b], [c])
    golden("hybrid_module_outer_product", mod.get_source())
    assert mod.name == "hybrid_func"
    path = tmp_path / f"{mod.name}.py"
    mod.save(str(path))
    again = te.hybrid.HybridModule()
    again.load(str(path))
    assert again.get_source() == mod.get_source()
    x, y = rand(9), rand(11)
    np.testing.assert_allclose(again(9, 11, x, y), np.outer(x, y), rtol=1e-6)
    c2 = again(n, m, a, b)
    got = check_llvm(te.create_schedule(c2.op), [a, b, c2], {a: x, b: y}, scalars={n: 9, m: 11})
    np.testing.assert_allclose(got[c2], np.outer(x, y), rtol=1e-6)


def test_scheduled_compute_round_trip(golden, check_llvm, rand):
    """A compute stage split, computed at and annotated: the module's loops are the schedule's
    (``parallel``, ``unroll``, ``vectorize``, the attached stage's ``allocate``, the tail's guard)."""
    A = te.placeholder((10, 8), name="A")
    B = te.compute((10, 8), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, 8), "k")
    C = te.compute((10, 8), lambda i, j: te.sum(te.exp(B[i, k]) * A[i, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    s[C].parallel(io)
    s[C].vectorize(C.op.axis[1])
    s[B].unroll(B.op.axis[1])
    mod = te.hybrid.build(s, [A], [C], name="scaled_sums")
    golden("hybrid_module_scheduled", mod.get_source())
    x = rand((10, 8))
    want = np.exp(2 * x.astype("float64")).sum(1, keepdims=True) * x
    np.testing.assert_allclose(mod(x), want, rtol=1e-5)
    C2 = mod(A)
    got = check_llvm(te.create_schedule(C2.op), [A, C2], {A: x})
    np.testing.assert_allclose(got[C2], want, rtol=1e-5)


@pytest.mark.cuda
def test_bound_schedule_round_trip_on_cuda(rand):
    """A schedule bound to blocks and threads prints as ``bind`` loops; parsed again, they are the
    kernel's launch (emulated here)."""
    from tilecraft.codegen.cuda_emulate import emulate
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: te.sqrt(A[i]) + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    mod = te.hybrid.build(s, [A], [B])
    assert "for i_outer in bind('blockIdx.x', 4):" in mod.get_source()
    B2 = mod(A)
    f = tc.lower(te.create_schedule(B2.op), [A, B2], target="cuda")
    assert "grid(4, 1, 1) block(32, 1, 1)" in str(f)
    x = np.abs(rand(100))
    out = np.full(100, np.nan, "float32")
    emulate(f, [x, out])
    np.testing.assert_allclose(out, np.sqrt(x) + 1, rtol=1e-6)


def test_symbolic_size_read_from_an_input_shape(rand):
    """A size that is not an input is the extent of an input tensor: ``a.shape[0]``."""
    n = te.var("n")
    a = te.placeholder((n,), name="a")
    b = te.compute((n,), lambda i: a[i] * a[i], name="b")
    mod = te.hybrid.build(te.create_schedule(b.op), [a], b)
    assert "b = output_tensor((a.shape[0],), 'float32')" in mod.get_source()
    x = rand(7)
    np.testing.assert_allclose(mod(x), x * x, rtol=1e-6)


def test_errors_name_what_has_no_hybrid_form():
    A = te.placeholder((10,), "int32", name="A")
    B = te.compute((10,), lambda i: te.div(A[i], 3), name="B")            # C's truncating division
    with pytest.raises(HybridDumpError, match=r"te.hybrid.build: `.*`: the hybrid language has no truncdiv"):
        te.hybrid.build(te.create_schedule(B.op), [A], [B])
    with pytest.raises(HybridDumpError, match="te.hybrid.build: inputs are tensors and te.vars, got 3"):
        te.hybrid.build(te.create_schedule(B.op), [A, 3], [B])
    with pytest.raises(RuntimeError, match=r"HybridModule: no source yet"):
        te.hybrid.HybridModule()(1)
    with pytest.raises(te.hybrid.HybridError, match="HybridModule: the source must define one function, found 2"):
        te.hybrid.HybridModule("def f(a):\n    return a\ndef g(a):\n    return a\n")
