"""Tensor intrinsics for the tests (tensorize, golden files, the schedule record): their lowering
needs no extern symbol, so they build and run anywhere; tests that call C functions build them
with gcc (``extern_library``)."""
import ctypes
import shutil
import subprocess

import pytest

import tilecraft as tvm
from tilecraft import te
from tilecraft.tir import call_extern, call_llvm_pure_intrin, decl_buffer, ir_builder, stmt_seq as seq


def gemv(m, l, parts="body", name="gemv", dtype="float32", b_strides="var", offset_factor=1,
         c_scope=""):
    """``c[i] = sum_k a[k] * b[i, k]`` (an m × l GEMV), lowered with ir_builder loops on its
    buffers. ``parts``: "body" (the fcompute returns one statement), "all" (body, reset, update),
    "no_reset" (body, None, update), "update_only" (None, None, update). ``b_strides``: "var"
    (``[te.var("s1"), 1]``), "compact" (no strides) or a list; ``c_scope`` the output buffer's
    memory scope."""
    a = te.placeholder((l,), dtype, name="a")
    b = te.placeholder((m, l), dtype, name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    strides = {"var": [te.var("s1"), 1], "compact": None}.get(b_strides, b_strides) \
        if isinstance(b_strides, str) else b_strides
    Ab = decl_buffer(a.shape, dtype, name="A", offset_factor=offset_factor, strides=[1])
    Bb = decl_buffer(b.shape, dtype, name="B", offset_factor=offset_factor, strides=strides)
    Cb = decl_buffer(c.shape, dtype, name="C", offset_factor=offset_factor, strides=[1], scope=c_scope)
    zero = tvm.tir.const(0, dtype)

    def fcompute(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def reset():
            ib = ir_builder.create()
            with ib.for_range(0, m, name="i") as i:
                ib.emit(cc.vstore([i], zero))
            return ib.get()

        def update():
            ib = ir_builder.create()
            with ib.for_range(0, m, name="i") as i:
                with ib.for_range(0, l, name="j") as j:
                    ib.emit(cc.vstore([i], cc.vload([i]) + aa.vload([j]) * bb.vload([i, j])))
            return ib.get()

        body = seq(reset(), update())
        return {"body": body, "all": (body, reset(), update()), "no_reset": (body, None, update()),
                "update_only": (None, None, update())}[parts]

    return te.decl_tensor_intrin(c.op, fcompute, name=name, binds={a: Ab, b: Bb, c: Cb})


def vfma(lanes=8, name="vfma", offset_factor=None):
    """``d[i] = a[i] * b[i] + c[i]`` over ``lanes`` elements, lowered to one
    ``llvm.fma.v<lanes>f32`` on vector loads (compact buffers; ``offset_factor`` default: lanes)."""
    a, b, c = (te.placeholder((lanes,), name=x) for x in "abc")
    d = te.compute((lanes,), lambda i: a[i] * b[i] + c[i], name="d")
    vt = f"float32x{lanes}"

    def fcompute(ins, outs):
        aa, bb, cc = ins
        return outs[0].vstore([0], call_llvm_pure_intrin(vt, f"llvm.fma.v{lanes}f32", aa.vload([0], vt),
                                                         bb.vload([0], vt), cc.vload([0], vt)))
    return te.decl_tensor_intrin(d.op, fcompute, name=name,
                                 default_buffer_params={"offset_factor": offset_factor or lanes})


def gemv_extern(m, l, symbol="tc_test_gemv", reset_symbol="tc_test_fill0"):
    """The GEMV as calls of C functions (``extern_library`` defines them): body, reset, update."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Ab = decl_buffer(a.shape, "float32", name="A", offset_factor=1, strides=[1])
    Bb = decl_buffer(b.shape, "float32", name="B", offset_factor=1, strides=[te.var("ldb"), 1])
    Cb = decl_buffer(c.shape, "float32", name="C", offset_factor=1, strides=[1])

    def fcompute(ins, outs):
        aa, bb = ins
        cc = outs[0]
        update = call_extern("int32", symbol, cc.access_ptr("rw"), aa.access_ptr("r"), bb.access_ptr("r"),
                             m, l, bb.strides[0])
        reset = call_extern("int32", reset_symbol, cc.access_ptr("w"), m)
        return seq(tvm.tir.Evaluate(reset), tvm.tir.Evaluate(update)), reset, update
    return te.decl_tensor_intrin(c.op, fcompute, name="gemv_c", binds={a: Ab, b: Bb, c: Cb})


EXTERN_SOURCE = r"""
int tc_test_gemv(float *c, const float *a, const float *b, int m, int l, int ldb) {
  for (int i = 0; i < m; ++i) {
    float acc = c[i];
    for (int j = 0; j < l; ++j) acc += a[j] * b[i * ldb + j];
    c[i] = acc;
  }
  return 0;
}
int tc_test_fill0(float *c, int m) {
  for (int i = 0; i < m; ++i) c[i] = 0.0f;
  return 0;
}
"""


def extern_library(tmp_path):
    """Compile ``EXTERN_SOURCE`` with gcc into a shared library and load it into the process
    (RTLD_GLOBAL, so JIT-compiled code finds its symbols)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (needed to compile the extern test functions)")
    src, lib = tmp_path / "tc_test_gemv.c", tmp_path / "libtc_test_gemv.so"
    src.write_text(EXTERN_SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True)
    return ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)


def matmul_bt(n, m, l, dtype="float32"):
    """``C[i, j] = sum_k A[i, k] * B[j, k]`` (A B^T, the tutorial's computation)."""
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((m, l), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C


def tensorized_gemv(n=6, m=32, l=24, factor=16, kfactor=None, parts=None):
    """The tutorial's schedule of ``matmul_bt``: j split by ``factor`` and tensorized with a
    factor × l GEMV; with ``kfactor`` the reduction is split too (reset + update)."""
    A, B, C = matmul_bt(n, m, l)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=factor)
    if kfactor is None:
        s[C].reorder(x, yo, yi, z)
        intrin = gemv(factor, l, parts or "body")
    else:
        zo, zi = s[C].split(z, factor=kfactor)
        s[C].reorder(x, yo, zo, yi, zi)
        intrin = gemv(factor, kfactor, parts or "all")
    s[C].tensorize(yi, intrin)
    return s, [A, B, C], intrin
