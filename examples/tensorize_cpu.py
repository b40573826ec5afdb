"""Tensorize: replace the inner loops of a schedule by a hand-written micro-kernel.

    python examples/tensorize_cpu.py

A tensor intrinsic is declared twice over: *what* it computes, as a TE compute, and *how*, as
statements on buffers (calls of a C function, LLVM intrinsics, vector loads and stores).
``s[C].tensorize(axis, intrin)`` checks that the loops under ``axis`` compute exactly the TE
definition, then puts the intrinsic's statements in their place, with its buffers bound to the
tiles of A, B and C each call works on.

1. A GEMV micro-kernel written in C (compiled to LLVM IR by clang, linked with the pragma
   import_llvm) computes C = A B^T 16 columns and 64 reduction steps at a time: reset once per
   tile, update per chunk of the reduction. Skipped, with a note, where no clang is installed.
2. A vector multiply-add that is one LLVM intrinsic (llvm.fma.v8f32), no C compiler needed.

The lowered-IR interpreter runs a tensorized function by the intrinsic's TE definition (it cannot
run the C function), which is how tests check such schedules anywhere.
"""
import time

import numpy as np

import tilecraft as tc
from tilecraft import interp_lowered, te, tir
from tilecraft.contrib import clang

N, M, L = 256, 256, 256
TILE_M, TILE_L = 16, 64


def gemv_intrinsic(m, l):
    """c[i] = sum_k a[k] * b[i, k]: reset sets c to 0, update adds a b-tile times a."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    # b's rows are a stride apart in the tile it is given: a variable, bound at each use
    Ab = tir.decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[1])
    Bb = tir.decl_buffer(b.shape, b.dtype, name="B", offset_factor=1, strides=[te.var("ldb"), 1])
    Cb = tir.decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[1])

    def lowering(ins, outs):
        aa, bb = ins
        cc = outs[0]
        update = tir.call_extern("int32", "gemv_update", cc.access_ptr("rw"), aa.access_ptr("r"),
                                 bb.access_ptr("r"), m, l, bb.strides[0])
        reset = tir.call_extern("int32", "gemv_reset", cc.access_ptr("w"), m)
        return tir.stmt_seq(tir.Evaluate(reset), tir.Evaluate(update)), reset, update

    return te.decl_tensor_intrin(c.op, lowering, name="gemv", binds={a: Ab, b: Bb, c: Cb})


C_KERNEL = """
extern "C" int gemv_update(float *c, const float *a, const float *b, int m, int l, int ldb) {
  for (int i = 0; i < m; ++i) {
    float acc = c[i];
    for (int j = 0; j < l; ++j) acc += a[j] * b[i * ldb + j];
    c[i] = acc;
  }
  return 0;
}
extern "C" int gemv_reset(float *c, int m) {
  for (int i = 0; i < m; ++i) c[i] = 0.0f;
  return 0;
}
"""


def part1(rng):
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((M, L), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=TILE_M)
    zo, zi = s[C].split(C.op.reduce_axis[0], factor=TILE_L)
    s[C].reorder(x, yo, zo, yi, zi)
    s[C].parallel(x)
    s[C].tensorize(yi, gemv_intrinsic(TILE_M, TILE_L))

    a = rng.uniform(-1, 1, (N, L)).astype("float32")
    b = rng.uniform(-1, 1, (M, L)).astype("float32")
    # the interpreter needs no C compiler: it runs gemv by its TE definition
    c = np.full((N, M), np.nan, "float32")
    interp_lowered.run(tc.lower(s, [A, B, C]), [a, b, c])
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)
    print("1. the interpreter agrees with numpy (the intrinsic run by its definition)")

    if not clang.find_clang(required=False):
        print("   no clang 13+ here (apt-get install clang-19): skipping the build with the C kernel")
        return
    s[C].pragma(x, "import_llvm", clang.create_llvm(C_KERNEL, options=["-O3"]))
    print(tc.lower(s, [A, B, C], simple_mode=True))
    f = tc.build(s, [A, B, C], name="matmul_gemv")
    c = np.full((N, M), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-4)
    t = f.time_evaluator(f.entry_name, tc.cpu(0), number=5)(a, b, c).median
    print(f"   built with the C kernel: matches numpy; {t * 1e3:.2f} ms for {N}x{M}x{L} (a scalar C "
          f"loop, compiled without fast-math: this shows the mechanism, not speed)")


def part2(rng):
    a, b, c = (te.placeholder((8,), name=x) for x in "abc")
    d = te.compute((8,), lambda i: a[i] * b[i] + c[i], name="d")

    def lowering(ins, outs):
        x, y, z = (t.vload([0], "float32x8") for t in ins)
        return outs[0].vstore([0], tir.call_llvm_pure_intrin("float32x8", "llvm.fma.v8f32", x, y, z))
    fma8 = te.decl_tensor_intrin(d.op, lowering, name="fma8", default_buffer_params={"offset_factor": 8})

    n = 1000
    X, Y, Z = (te.placeholder((n,), name=x) for x in "XYZ")
    W = te.compute((n,), lambda i: X[i] * Y[i] + Z[i], name="W")
    s = te.create_schedule(W.op)
    io, ii = s[W].split(W.op.axis[0], factor=8)
    s[W].tensorize(ii, fma8)
    f = tc.build(s, [X, Y, Z, W], name="multiply_add")
    x, y, z = (rng.uniform(-1, 1, n).astype("float32") for _ in range(3))
    w = np.full(n, np.nan, "float32")
    f(x, y, z, w)
    np.testing.assert_allclose(w, x * y + z, rtol=1e-6, atol=1e-6)
    fmas = f.get_source("asm").count("vfmadd")
    print(f"2. one llvm.fma.v8f32 per 8 elements: matches numpy ({fmas} vfmadd instructions in the code)")


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    part1(rng)
    part2(rng)
    print(f"done in {time.perf_counter() - start:.1f} s")
