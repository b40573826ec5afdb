"""s[C].tensorize(axis, intrin): differential tests against numpy and the reference interpreter.

``check_llvm`` runs the lowered-IR interpreter after every pass (where a tensorized region runs by
the intrinsic's TE definition on the boxes its buffers are bound to) and builds the function with
LLVM (where it runs the intrinsic's lowering: loops on declared buffers, LLVM intrinsics, C
functions), on poisoned outputs, so both meanings must agree with the reference on fresh inputs.
"""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te, tir
from tilecraft.interp import run_tensor_intrin

from tensorize_intrins import extern_library, gemv, gemv_extern, matmul_bt, tensorized_gemv, vfma


@pytest.mark.parametrize("kfactor,parts", [(None, "body"), (8, "all"), (8, "no_reset"), (24, "body")],
                         ids=["body", "reset+update", "body+update", "whole-reduction-split"])
def test_gemv_tensorized(check_llvm, rand, kfactor, parts):
    """The tutorial's two schedules and TVM's no-reset one: the whole reduction in the region
    (body), the reduction split with reset then update, body in the first chunk then update; a
    split of the reduction whose outer loop runs once is still the whole reduction."""
    s, (A, B, C), _ = tensorized_gemv(n=5, m=48, l=24, factor=16, kfactor=kfactor, parts=parts)
    a, b = rand((5, 24)), rand((48, 24))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_two_outer_reduction_loops_reset_once(check_llvm, rand):
    """TVM's multi-reduction case: the reduction split twice outside the region; reset runs once
    per output box, before both reduction loops, update in every chunk (and without reset, body
    runs only where both outer reduction loops are at their first iteration)."""
    for parts in ("all", "no_reset"):
        A, B, C = matmul_bt(4, 32, 48)
        s = te.create_schedule(C.op)
        x, y = C.op.axis
        (z,) = C.op.reduce_axis
        yo, yi = s[C].split(y, factor=16)
        zo, zi = s[C].split(z, factor=8)
        zoo, zoi = s[C].split(zo, factor=2)
        s[C].reorder(x, yo, zoo, zoi, yi, zi)
        s[C].tensorize(yi, gemv(16, 8, parts))
        a, b = rand((4, 48)), rand((32, 48))
        check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_outer_split_tail_is_guarded_outside_the_intrinsic(check_llvm, rand):
    """A split that does not divide an axis outside the region guards the whole use."""
    s, (A, B, C), _ = tensorized_gemv(n=7, m=32, l=16, factor=16)
    x = s[C].leaf_iter_vars[0]
    xo, xi = s[C].split(x, factor=3)                   # 7 = 3 + 3 + 1: a tail
    s[C].parallel(xo)
    a, b = rand((7, 16)), rand((32, 16))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_tensorized_stage_reads_a_cache_with_padded_rows(check_llvm, rand):
    """The B operand comes from a local cache whose rows are padded (storage_align): the
    declared buffer's stride variable takes the padded stride, and its offset is relative to
    the cached region (the cache holds one 16-row tile)."""
    A, B, C = matmul_bt(3, 32, 24)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    s[C].reorder(yo, x, yi, z)
    BL = s.cache_read(B, "global", [C])
    s[BL].compute_at(s[C], yo)
    s[BL].storage_align(BL.op.axis[0], 32, 5)           # row stride 37, not 24
    s[C].tensorize(yi, gemv(16, 24))
    text = str(tc.lower(s, [A, B, C]))
    assert "(strides 37, 1)" in text, text
    a, b = rand((3, 24)), rand((32, 24))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_tensorize_a_cache_write_stage(check_llvm, rand):
    """The tensorized stage is a local accumulator tile (cache_write + compute_at), as register
    blocking with a micro-kernel does: the output buffer, declared in "local" memory, is the tile;
    the inputs are the arguments."""
    A, B, C = matmul_bt(4, 32, 16)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=16)
    s[CL].compute_at(s[C], yo)
    cx, cy = s[CL].op.axis
    s[CL].tensorize(cy, gemv(16, 16, c_scope="local"))
    a, b = rand((4, 16)), rand((32, 16))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_vector_fma_intrinsic_on_llvm_intrinsic_calls(check_llvm, rand):
    """A vector intrinsic: one llvm.fma.v8f32 on vector loads of compact buffers whose offsets are
    multiples of 8 (offset_factor=8), under a parallel outer loop (the outlined loop body gets the
    buffers the intrinsic's loads and stores name)."""
    n = 40
    A, B, C = (te.placeholder((3, n), name=x) for x in "ABC")
    D = te.compute((3, n), lambda i, j: A[i, j] * B[i, j] + C[i, j], name="D")
    s = te.create_schedule(D.op)
    i, j = D.op.axis
    jo, ji = s[D].split(j, factor=8)
    s[D].parallel(i)
    s[D].tensorize(ji, vfma(8))
    ir = tc.build(s, [A, B, C, D]).get_source()
    assert "llvm.fma.v8f32" in ir or "vfmadd" in tc.build(s, [A, B, C, D]).get_source("asm")
    a, b, c = rand((3, n)), rand((3, n)), rand((3, n))
    check_llvm(s, [A, B, C, D], {A: a, B: b, C: c}, {D: a * b + c}, rtol=1e-5, atol=1e-5, passes=True)


def test_index_pattern_with_division_and_modulo(check_llvm, rand):
    """TVM's test_tensorize_op: an index pattern of floordiv and floormod of both axes is matched
    after simplification; the intrinsic covers the whole 9 × 9 computation."""
    idxd, idxm = tir.indexdiv, tir.indexmod

    def make(name):
        x = te.placeholder((5, 5), name=name)
        return x, te.compute((9, 9), lambda i, j: x[idxd(j, 3) + idxm(i, 3), idxm(j, 3) + idxd(i, 3)],
                             name=name + "_out")
    x, y = make("x")

    def fcompute(ins, outs):
        ib = tir.ir_builder.create()
        with ib.for_range(0, 9, name="i") as i:
            with ib.for_range(0, 9, name="j") as j:
                ib.emit(outs[0].vstore([i, j], ins[0].vload([idxd(j, 3) + idxm(i, 3), idxm(j, 3) + idxd(i, 3)])))
        return ib.get()
    intrin = te.decl_tensor_intrin(y.op, fcompute, name="op")
    A, B = make("A")
    s = te.create_schedule(B.op)
    s[B].tensorize(B.op.axis[0], intrin)
    a = rand((5, 5))
    ii, jj = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    check_llvm(s, [A, B], {A: a}, {B: a[jj // 3 + ii % 3, jj % 3 + ii // 3]}, passes=True)


def test_packed_operand_indexed_by_outer_loops(check_llvm, rand):
    """B packed in 16-row panels, ``Bp[j // 16, j % 16, k]``, with j split twice (32, then 16):
    in the region the index is ``(jo * 32 + jm * 16 + j) % 16``, which is ``j`` only given the
    bounds of the intrinsic's axis (and the outer loops'); the match simplifies with them (it
    failed with "the stage does not compute what the intrinsic does" before)."""
    n, m, l = 4, 64, 24
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((m, l), name="B")
    Bp = te.compute((m // 16, 16, l), lambda p, r, k: B[p * 16 + r, k], name="Bp")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * Bp[j // 16, j % 16, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yr = s[C].split(y, factor=32)
    ym, yi = s[C].split(yr, factor=16)
    s[C].reorder(x, yo, ym, yi, k)
    s[C].parallel(yo)
    s[C].tensorize(yi, gemv(16, l, "body"))
    a, b = rand((n, l)), rand((m, l))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_extern_c_functions_from_a_loaded_library(check_llvm, rand, tmp_path):
    """call_extern of C functions (gcc-compiled, loaded with RTLD_GLOBAL) with access_ptr
    arguments and the bound stride, reset + update."""
    extern_library(tmp_path)
    A, B, C = matmul_bt(5, 32, 32)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    zo, zi = s[C].split(z, factor=16)
    s[C].reorder(x, yo, zo, yi, zi)
    s[C].tensorize(yi, gemv_extern(16, 16))
    a, b = rand((5, 32)), rand((32, 32))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


def test_extern_calls_survive_export(rand, tmp_path):
    """An exported library keeps the calls; the symbol resolves when the library is loaded in a
    process that has the C functions."""
    extern_library(tmp_path)
    A, B, C = matmul_bt(3, 16, 16)
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    s[C].tensorize(yi, gemv_extern(16, 16))
    f = tc.build(s, [A, B, C], name="gemv_lib")
    path = str(tmp_path / "libgemv_lib.so")
    f.export_library(path)
    g = tc.runtime.load_module(path)
    a, b = rand((3, 16)), rand((16, 16))
    c = np.full((3, 16), np.nan, "float32")
    g(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)


def test_the_intrinsic_runs_by_its_definition_in_the_interpreter(rand):
    """interp.run_tensor_intrin: body, reset and update by the TE definition, in place on views."""
    g = gemv(4, 6, "all")
    a, b = rand((6,)), rand((4, 6))
    c = np.full(8, np.nan, "float32")[::2]                 # a strided view is written in place
    run_tensor_intrin(g, "body", [a, b], [c])
    np.testing.assert_allclose(c, b @ a, rtol=1e-6)
    run_tensor_intrin(g, "update", [a, b], [c])
    np.testing.assert_allclose(c, 2 * (b @ a), rtol=1e-6)
    run_tensor_intrin(g, "reset", None, [c])
    assert (c == 0).all()


def test_reset_and_update_of_a_max_reduction_with_init(rand):
    """reset starts from init= (here the row's first element), update folds with max."""
    a = te.placeholder((4, 5), name="a")
    k = te.reduce_axis((0, 5), name="k")
    c = te.compute((4,), lambda i: te.max(a[i, k], axis=k, init=a[i, 0] * 0.0 - 7.0), name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: (tir.Evaluate(0),) * 3, name="rowmax")
    x = rand((4, 5))
    out = np.full(4, np.nan, "float32")
    run_tensor_intrin(intrin, "body", [x], [out])
    np.testing.assert_array_equal(out, np.maximum(x.max(1), -7.0))
    out[:] = 100.0
    run_tensor_intrin(intrin, "update", [x], [out])
    np.testing.assert_array_equal(out, np.full(4, 100.0, "float32"))


def test_record_replays_a_tensorized_schedule():
    """The step records the intrinsic by name; JSON needs it given back, the Python form names it."""
    from tilecraft.schedule import from_json, python_names
    s, args, intrin = tensorized_gemv(kfactor=8)
    assert s.steps[-1].to_json() == {"step": "tensorize", "stage": "C", "axis": "j.inner", "intrin": "gemv"}
    want = str(tc.lower(s, args))
    again = from_json(s.to_json(), list(s.outputs), intrins=[intrin])
    assert str(tc.lower(again, args)) == want
    code = s.to_python()
    assert "s[C].tensorize(C_j_inner, gemv)" in code and "the tensor intrinsics by name: gemv" in code
    fresh = te.create_schedule(list(s.outputs))
    exec(code, {"s": fresh, **python_names(list(s.outputs), intrins=[intrin])})
    assert str(tc.lower(fresh, args)) == want


@pytest.mark.parametrize("case", range(6))
def test_random_tensorized_gemv_schedules(check_llvm, rng, case):
    """Random shapes and tile sizes (the tile always divides the axis it splits), the reduction
    whole or split once or twice, with or without reset, an outer split with a tail and a
    parallel loop: every pass computes the reference (the interpreter runs the intrinsic by its
    definition) and so does the built code."""
    factor = int(rng.choice([4, 8, 16]))
    n, m = int(rng.integers(1, 8)), factor * int(rng.integers(1, 4))
    kfactor = int(rng.choice([4, 8]))
    l = kfactor * int(rng.integers(1, 5))
    split = rng.integers(0, 3)                      # 0: whole reduction, 1: split once, 2: twice
    parts = str(rng.choice(["all", "no_reset"])) if split else "body"
    A, B, C = matmul_bt(n, m, l)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=factor)
    outer = [x, yo]
    if rng.integers(0, 2):
        xo, xi = s[C].split(x, factor=int(rng.integers(2, 4)))      # may leave a tail
        s[C].parallel(xo)
        outer = [xo, xi, yo]
    if split == 0:
        s[C].reorder(*outer, yi, z)
        intrin = gemv(factor, l, parts)
    else:
        zo, zi = s[C].split(z, factor=kfactor)
        reduce_outer = [zo] if split == 1 else list(s[C].split(zo, nparts=2))
        s[C].reorder(*outer, *reduce_outer, yi, zi)
        intrin = gemv(factor, kfactor, parts)
    s[C].tensorize(yi, intrin)
    a, b = rng.uniform(-1, 1, (n, l)).astype("float32"), rng.uniform(-1, 1, (m, l)).astype("float32")
    print(f"n={n} m={m} l={l} factor={factor} kfactor={kfactor} split={split} parts={parts}")
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)
