"""The error messages of the tensor-core path: building the calls (``ir/builtin.py``), rendering
them (``codegen/cuda_tensorcore.py``) and the emulator's checks of a lowering against its
intrinsic's TE definition (``codegen/cuda_emulate_intrin.py``).

The emulator cases take the working GEMM schedule (``topi/tensorcore.py``) and swap one of its
intrinsics for one whose lowering has a typical mistake (a wrong stride, pointer, tile index or
layout): each must be refused with a message naming the call, the buffer and the right value,
where the CUDA C would silently compute garbage on a GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te, tir
from tilecraft.codegen.cuda import generate_cuda
from tilecraft.codegen.cuda_emulate import EmulationError, emulate
from tilecraft.codegen.cuda_tensorcore import FragmentError
from tilecraft.topi import tensorcore as T


def _gemm(monkeypatch=None, impl="mma", layout_b="row_major", **patch):
    """The 32 x 32 x 32 GEMM (one warp of 2 x 2 tiles, two k steps) with intrinsics swapped."""
    for name, fn in patch.items():
        monkeypatch.setattr(T, name, fn)
    s, (A, B, C) = T.matmul_tensorcore(32, 32, 32, impl=impl, layout_b=layout_b, block=(1, 1), warp=(2, 2),
                                       chunk=2, double_buffer=False)
    return tc.lower(s, [A, B, C], target="cuda")


def _emulate(func, rng, layout_b="row_major"):
    a = rng.uniform(-1, 1, (32, 32)).astype("float16")
    b = rng.uniform(-1, 1, (32, 32)).astype("float16")
    c = np.full((32, 32), np.nan, "float32")
    emulate(func, [a, b, c])
    bb = b.astype("float64") if layout_b == "row_major" else b.astype("float64").T
    return c, a.astype("float64") @ bb


def _load(lower_args, role="a"):
    """A load intrinsic like ``T.load_matrix`` whose lowering's ``tc_ldmatrix`` arguments come
    from ``lower_args(src, frag)`` -> (index, ptr, stride, layout)."""
    def make(r, layout="row_major", impl="mma", src_scope="shared", dtype="float16"):
        if r != role:
            return ORIGINAL_LOAD(r, layout, impl, src_scope, dtype)
        A = te.placeholder((16, 16), name="A", dtype="float16")
        C = te.compute((16, 16), lambda i, j: A[i, j], name="C")
        BA = T._tile_buffer("float16", "src", src_scope)
        BC = T._tile_buffer("float16", "frag", T.SCOPES[impl][0 if r == "a" else 1])

        def lower(ins, outs):
            idx, ptr, stride, lay = lower_args(ins[0], outs[0], layout)
            return tir.call_intrin("handle", "tir.tc_ldmatrix", outs[0].data, idx, ptr, stride, lay)
        return te.decl_tensor_intrin(C.op, lower, name=f"bad_load_{r}", binds={A: BA, C: BC})
    return make


ORIGINAL_LOAD = T.load_matrix


def test_the_unchanged_gemm_passes_the_checks(rng):
    c, ref = _emulate(_gemm(), rng)          # the baseline of the cases below
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


# -- the emulator's checks of a lowering against its definition ------------------------------------

def test_wrong_row_stride(monkeypatch, rng):
    bad = _load(lambda src, frag, lay: (T.fragment_index(frag), src.access_ptr("r"), 16, lay))
    func = _gemm(monkeypatch, load_matrix=bad)
    with pytest.raises(EmulationError, match=r"tensor intrinsic 'bad_load_a' \(body\): tc_ldmatrix reads rows 16 "
                                             r"elements apart, but the tile bound to 'src' in 'A\.shared' has rows "
                                             r"40 apart \(pass the tile's stride, e.g. src.strides\[0\]\)"):
        _emulate(func, rng)


def test_pointer_not_at_the_tile(monkeypatch, rng):
    bad = _load(lambda src, frag, lay: (T.fragment_index(frag), src.access_ptr("r", offset=8), src.strides[0], lay))
    func = _gemm(monkeypatch, load_matrix=bad)
    with pytest.raises(EmulationError, match=r"'bad_load_a' \(body\): tc_ldmatrix points at element 8 of "
                                             r"'A\.shared', but the tile bound to 'src' starts at element 0"):
        _emulate(func, rng)


def test_one_fragment_index_for_two_tiles(monkeypatch, rng):
    bad = _load(lambda src, frag, lay: (0, src.access_ptr("r"), src.strides[0], lay))
    func = _gemm(monkeypatch, load_matrix=bad)
    with pytest.raises(EmulationError, match=r"tc_ldmatrix names tile 0 of the fragment 'A\.shared\.mma\.matrix_a' for "
                                             r"the tile that starts at element \d+, but .*the index must pick one "
                                             r"16 x 16 tile per value"):
        _emulate(func, rng)


def test_fragment_index_outside_the_fragment(monkeypatch, rng):
    bad = _load(lambda src, frag, lay: (T.fragment_index(frag) + 2, src.access_ptr("r"), src.strides[0], lay))
    func = _gemm(monkeypatch, load_matrix=bad)
    with pytest.raises(EmulationError, match=r"tc_ldmatrix uses tile [23] of the fragment 'A\.shared\.mma\.matrix_a', "
                                             r"which holds 2 tile\(s\) of 16 x 16"):
        _emulate(func, rng)


def test_operand_loaded_in_the_layout_its_mma_does_not_read(monkeypatch, rng):
    # B is stored (k, n) and the mma's definition reads it as B[k, j], but the load tells the
    # hardware the tile is col_major (its transpose): on a GPU the product would use B.T
    def bad(r, layout="row_major", impl="mma", src_scope="shared", dtype="float16"):
        return ORIGINAL_LOAD(r, "col_major" if r == "b" else layout, impl, src_scope, dtype)
    func = _gemm(monkeypatch, load_matrix=bad)
    with pytest.raises(EmulationError, match=r"tc_mma_sync computes d = a @ b \+ c on the fragments as the hardware "
                                             r"reads them \(.*'B\.shared\.mma\.matrix_b' col_major.*\), which gives "
                                             r".* but the intrinsic's definition gives .*: the definition must read "
                                             r"each fragment in its layout"):
        _emulate(func, rng)


def _copy_through_fragment(scope, dtype, rows=16, cols=16):
    """B = A * 2 with A read through a fragment in ``scope`` by a plain (untensorized) compute;
    the fragment holds ``rows`` x ``cols`` elements."""
    A = te.placeholder((16, cols), name="A", dtype=dtype)
    B = te.compute((16, cols), lambda i, j: A[i, j].astype("float32") * 2, name="B")
    s = te.create_schedule(B.op)
    AF = s.cache_read(A, scope, [B])
    io, ii = s[B].split(B.op.axis[0], factor=rows)
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    s[AF].compute_at(s[B], io)
    return tc.lower(s, [A, B], target="cuda")


def test_fragment_touched_element_by_element(rng):
    # a wmma fragment read by a plain compute (not tensorized): the CUDA C cannot express it
    func = _copy_through_fragment("wmma.matrix_a", "float16")
    msg = (r"'A\.wmma\.matrix_a' is a fragment \(scope wmma.matrix_a\) but is (read|written) element by element; "
           r"its elements live in the registers of a whole warp, so only tensor-core calls may touch it: "
           r"tensorize the stages that read and write it \(load, mma, store\)")
    with pytest.raises(FragmentError, match=msg):
        generate_cuda(func)
    with pytest.raises(EmulationError, match=msg):
        emulate(func, [rng.uniform(-1, 1, (16, 16)).astype("float16"), np.full((16, 16), np.nan, "float32")])


def test_fragment_of_a_partial_tile():
    func = _copy_through_fragment("wmma.matrix_a", "float16", rows=8)
    with pytest.raises(FragmentError, match=r"the fragment 'A\.wmma\.matrix_a' in scope wmma.matrix_a holds 128 "
                                            r"elements, not a whole number of 16 x 16 tiles"):
        generate_cuda(func)


def test_mma_fragment_of_the_wrong_dtype():
    func = _copy_through_fragment("mma.matrix_a", "int16")
    with pytest.raises(FragmentError, match=r"the fragment 'A\.mma\.matrix_a' in scope mma.matrix_a is int16; "
                                            r"the mma.sync path takes float16, bfloat16, float32 \(tf32\) or int8 operands "
                                            r"and a float32 or int32 accumulator"):
        generate_cuda(func)


def test_mma_operand_fragment_of_a_partial_tile():
    # a float32 (tf32) operand tile is 16 x 8 = 128 elements: 8 x 8 is not a whole tile
    func = _copy_through_fragment("mma.matrix_a", "float32", rows=8, cols=8)
    with pytest.raises(FragmentError, match=r"the fragment 'A\.mma\.matrix_a' in scope mma.matrix_a holds 64 "
                                            r"elements, not a whole number of 16 x 8 tiles"):
        generate_cuda(func)


# -- building the calls ------------------------------------------------------------------------------

def _frag():
    return tir.decl_buffer((16, 16), "float16", name="F", scope="wmma.matrix_a").data


def _mem():
    return tir.decl_buffer((16, 16), "float16", name="M", scope="shared")


def test_warp_call_argument_count():
    with pytest.raises(ValueError, match=r"call_intrin\('tir.tc_mma_fill'\) takes 3 arguments \(frag, index, "
                                         r"value\), got 2"):
        tir.call_intrin("handle", "tir.tc_mma_fill", _frag(), 0)


def test_warp_call_layout():
    with pytest.raises(ValueError, match=r"must be 'row_major' or 'col_major', got 'diagonal'"):
        tir.call_intrin("handle", "tir.tc_ldmatrix", _frag(), 0, _mem().access_ptr("r"), 16, "diagonal")


def test_warp_call_argument_kinds():
    m = _mem()
    with pytest.raises(TypeError, match=r"must be a fragment buffer's data \(BC.data\), got `3`"):
        tir.call_intrin("handle", "tir.tc_mma_fill", 3, 0, 0.0)
    with pytest.raises(TypeError, match=r"must be a pointer into memory \(Buffer.access_ptr\), got `M`"):
        tir.call_intrin("handle", "tir.tc_ldmatrix", _frag(), 0, m.data, 16, "row_major")
    with pytest.raises(ValueError, match=r"must be 16 \(tiles are 16 x 16 x 16\), got `8`"):
        tir.call_intrin("handle", "tir.tvm_fill_fragment", _frag(), 8, 16, 16, 0, 0.0)
    with pytest.raises(TypeError, match=r"must be an integer expression, got `1.5f?` \(float32\)"):
        tir.call_intrin("handle", "tir.tc_ldmatrix", _frag(), 1.5, m.access_ptr("r"), 16, "row_major")
    with pytest.raises(TypeError, match=r"is the string 'x'"):
        tir.call_intrin("handle", "tir.tc_mma_fill", _frag(), "x", 0.0)


def test_store_of_an_operand_fragment(monkeypatch):
    def bad(r, layout="row_major", impl="wmma", src_scope="shared", dtype="float16"):
        if r != "a":
            return ORIGINAL_LOAD(r, layout, impl, src_scope, dtype)
        A = te.placeholder((16, 16), name="A", dtype="float16")
        C = te.compute((16, 16), lambda i, j: A[i, j], name="C")
        BA = T._tile_buffer("float16", "src", src_scope)
        BC = T._tile_buffer("float16", "frag", "wmma.matrix_a")

        def lower(ins, outs):          # the wrong call: a store where a load belongs
            return tir.call_intrin("handle", "tir.tvm_store_matrix_sync", outs[0].data, 16, 16, 16,
                                   T.fragment_index(outs[0]), ins[0].access_ptr("w"), ins[0].strides[0], layout)
        return te.decl_tensor_intrin(C.op, lower, name="store_as_load", binds={A: BA, C: BC})
    func = _gemm(monkeypatch, impl="wmma", load_matrix=bad)
    with pytest.raises(FragmentError, match=r"tvm_store_matrix_sync of 'A_shared_wmma_matrix_a' \(wmma.matrix_a\): "
                                            r"only an accumulator fragment can be stored"):
        generate_cuda(func)


# -- the other mma.sync kinds: what the CUDA C cannot express -----------------------------------------

def _int8_gemm():
    s, (A, B, C) = T.matmul_tensorcore(32, 32, 64, impl="mma", layout_b="col_major", dtype="int8", block=(1, 1),
                                       warp=(2, 2), chunk=2, double_buffer=False)
    return tc.lower(s, [A, B, C], target="cuda")


def test_ldmatrix_cannot_transpose_8_bit_elements(monkeypatch):
    # an int8 B tile stored (n, k) but loaded as if stored (k, n): ldmatrix.trans moves 16-bit elements
    def bad(r, layout="row_major", impl="mma", src_scope="shared", dtype="float16"):
        if r != "b":
            return ORIGINAL_LOAD(r, layout, impl, src_scope, dtype)
        shape = T.operand_shape("b", layout, dtype)
        A = te.placeholder(shape, name="A", dtype=dtype)
        C = te.compute(shape, lambda i, j: A[i, j], name="C")
        BA = T._tile_buffer(dtype, "src", src_scope, shape)
        BC = T._tile_buffer(dtype, "frag", T.SCOPES[impl][1], shape)

        def lower(ins, outs):
            return tir.call_intrin("handle", "tir.tc_ldmatrix", outs[0].data, T.fragment_index(outs[0]),
                                   ins[0].access_ptr("r"), ins[0].strides[0], "row_major")
        return te.decl_tensor_intrin(C.op, lower, name="bad_load_b", binds={A: BA, C: BC})
    monkeypatch.setattr(T, "load_matrix", bad)
    with pytest.raises(FragmentError, match=r"tc_ldmatrix into 'B_shared_mma_matrix_b' \(mma.matrix_b, int8\) of a "
                                            r"tile stored row_major: ldmatrix transposes 16-bit elements only; store "
                                            r"B as N x K \(col_major\)"):
        generate_cuda(_int8_gemm())


def test_mma_of_operands_and_accumulator_no_instruction_takes(monkeypatch):
    # float16 operands into an int32 accumulator: no mma.sync kind multiplies that
    monkeypatch.setitem(T.KINDS, "float16", (16, "int32"))
    s, (A, B, C) = T.matmul_tensorcore(32, 32, 32, impl="mma", block=(1, 1), warp=(2, 2), chunk=2,
                                       double_buffer=False)
    with pytest.raises(FragmentError, match=r"tc_mma_sync .* on float16 x float16 -> int32: mma.sync multiplies "
                                            r"float16 x float16 -> float32, float32 x float32 -> float32, "
                                            r"int8 x int8 -> int32"):
        generate_cuda(tc.lower(s, [A, B, C], target="cuda"))


def test_store_of_an_accumulator_as_another_dtype(monkeypatch):
    def bad(impl="wmma", dst_scope="global", acc="float32", out=None):
        A = te.placeholder((16, 16), name="A", dtype=acc)
        C = te.compute((16, 16), lambda i, j: A[i, j].astype(out), name="C")
        BA = T._tile_buffer(acc, "frag", T.SCOPES[impl][2])
        BC = T._tile_buffer(out, "dst", dst_scope)

        def lower(ins, outs):
            return tir.call_intrin("handle", "tir.tc_mma_store", ins[0].data, T.fragment_index(ins[0]),
                                   outs[0].access_ptr("w"), outs[0].strides[0])
        return te.decl_tensor_intrin(C.op, lower, name="store_as_int", binds={A: BA, C: BC})
    monkeypatch.setattr(T, "store_matrix", bad)
    s, (A, B, C) = T.matmul_tensorcore(32, 32, 32, impl="mma", block=(1, 1), warp=(2, 2), chunk=2,
                                       double_buffer=False, out_dtype="int32")
    with pytest.raises(FragmentError, match=r"tc_mma_store of 'C' \(float32\) into 'C_out' \(int32\): "
                                            r"an accumulator is stored as its own dtype "
                                            r"\(or float32 as float16 or bfloat16\)"):
        generate_cuda(tc.lower(s, [A, B, C], target="cuda"))


def _doubling(pragma_on: str, value):
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].pragma(bx if pragma_on == "block" else tx, "min_blocks_per_sm", value)
    return tc.lower(s, [A, B], target="cuda")


def test_min_blocks_pragma():
    from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
    assert "__launch_bounds__(64, 3)" in generate_cuda(_doubling("block", 3))
    with pytest.raises(GPULoweringError, match=r"pragma min_blocks_per_sm=2 on loop 'i.inner' \(bound to "
                                               r"threadIdx.x\): it takes a positive int, on a loop bound to blockIdx"):
        _doubling("thread", 2)
    with pytest.raises(GPULoweringError, match=r"pragma min_blocks_per_sm=0 on loop 'i.outer' \(bound to "
                                               r"blockIdx.x\): it takes a positive int"):
        _doubling("block", 0)
