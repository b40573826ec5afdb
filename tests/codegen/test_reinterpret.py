"""tir.reinterpret (TVM's): the bits of a value as another dtype of the same size. Differential
against numpy's ``view`` in the reference interpreter, the lowered-IR interpreter and LLVM
(scalar, vectorized, and the lane-changing forms int8 dot products use), and its errors."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import interp_lowered, te, tir
from tilecraft.interp import InterpError, evaluate


def test_float_bits_round_trip(check_llvm, rand):
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: tir.reinterpret("int32", A[i]) + 1, name="B")
    C = te.compute((37,), lambda i: tir.reinterpret("float32", B[i]), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)      # a vectorized use with a tail
    s[C].vectorize(xi)
    a = rand((37,))
    want = (a.view(np.int32) + 1).view(np.float32)   # the next float up (away from zero)
    check_llvm(s, [A, C], {A: a}, {C: want}, rtol=0, atol=0, passes=True)


def test_lane_changing_forms_match_numpy_view(rng):
    """uint8x4 -> int32 and int8x64 -> int32x16 (what the int8 micro-kernels load), in a
    hand-written loop nest run by LLVM and by the lowered-IR interpreter."""
    n = 64
    A = tir.decl_buffer((n,), "uint8", name="A")
    B = tir.decl_buffer((n,), "int8", name="B")
    O1 = tir.decl_buffer((n // 4,), "int32", name="O1")
    O2 = tir.decl_buffer((n // 4,), "int32", name="O2")
    ib = tir.ir_builder.create()
    with ib.for_range(0, n // 4, name="i") as i:
        ib.emit(O1.vstore([i], tir.reinterpret("int32", A.vload([i * 4], "uint8x4"))))
    ib.emit(O2.vstore([0], tir.reinterpret("int32x16", B.vload([0], "int8x64"))))
    func = tir.PrimFunc("bits", (A, B, O1, O2), ib.get())
    a = rng.integers(0, 256, n).astype("uint8")
    b = rng.integers(-128, 128, n).astype("int8")
    for run in (tc.build(func, target="llvm"), lambda *x: interp_lowered.run(func, list(x))):
        o1, o2 = np.full(n // 4, 7, "int32"), np.full(n // 4, 7, "int32")
        run(a, b, o1, o2)
        assert np.array_equal(o1, a.view(np.int32)) and np.array_equal(o2, b.view(np.int32))


def test_printed_form_names_the_dtype():
    Ab = tir.decl_buffer((16,), "uint8", name="Ab")
    assert str(tir.reinterpret("int32", Ab.vload([0], "uint8x4"))) == 'reinterpret("int32", Ab[ramp(0, 1, 4)])'
    assert str(tir.call_intrin("int32", "tir.reinterpret", Ab.vload([4], "uint8x4"))).startswith('reinterpret("int32"')


def test_sizes_must_match():
    Ab = tir.decl_buffer((16,), "uint8", name="Ab")
    with pytest.raises(ValueError, match=r"uint8x3, 24 bits\) as int32 \(32 bits\): the sizes differ"):
        tir.reinterpret("int32", Ab.vload([0], "uint8x3"))


def test_booleans_have_no_bits():
    with pytest.raises(ValueError, match="bool has no bits to reinterpret; use a cast"):
        tir.reinterpret("bool", tir.const(1, "int8"))


def test_call_intrin_takes_one_value():
    with pytest.raises(ValueError, match=r"call_intrin\('tir.reinterpret'\) takes one argument, got 2"):
        tir.call_intrin("int32", "tir.reinterpret", 1, 2)


def test_reference_interpreter_refuses_a_lane_change():
    A = te.placeholder((4,), "int32", name="A")
    B = te.compute((4,), lambda i: tir.reinterpret("int16x2", A[i]), name="B")
    with pytest.raises(InterpError, match="changes the lane count"):
        evaluate([B], {A: np.arange(1, 5, dtype="int32")})


def test_cuda_refuses_it_with_a_message():
    from tilecraft.codegen.cuda import generate_cuda

    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: tir.reinterpret("int32", A[i]), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    with pytest.raises(NotImplementedError, match="reinterpret in a kernel .* the CUDA backend does not support it"):
        generate_cuda(tc.lower(s, [A, B], target="cuda"))
