"""Calls out of generated CPU code (codegen/llvm_calls.py): C functions, LLVM intrinsics, pointers
into buffers, LLVM IR linked with pragma import_llvm, clang; the CUDA C refusing them, and the
CUDA emulator running such a region by the intrinsic's definition. Each error has a test; none of them may abort the
process (LLVM would, on an unresolved symbol or an intrinsic the CPU lacks)."""
import platform
import shutil

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te, tir
from tilecraft.codegen.llvm_types import CodegenError
from tilecraft.contrib import clang
from tilecraft.ir import (AttrStmt, Buffer, BufferRegion, BufferStore, Call, Evaluate, PrimFunc, Ramp,
                          SeqStmt, StringImm, const)
from tilecraft.ir.stmt import BUFFER_BIND_SCOPE, TENSOR_INTRIN_SCOPE
from tilecraft.schedule import ScheduleError

from tensorize_intrins import extern_library, gemv, gemv_extern, matmul_bt, tensorized_gemv

X86 = platform.machine() in ("x86_64", "AMD64")


def func_of(body, *params, name="f"):
    return PrimFunc(name, tuple(params), body)


def buf(name, n=16, dtype="float32"):
    return Buffer(name, (const(n),), dtype)


# -- C functions -------------------------------------------------------------------------------------

def test_one_symbol_with_two_signatures():
    A = buf("A")
    body = SeqStmt((Evaluate(tir.call_extern("int32", "tc_f", A.access_ptr("w"), 1)),
                    Evaluate(tir.call_extern("int32", "tc_f", A.access_ptr("w"), 1.5))))
    with pytest.raises(CodegenError, match=r"call_extern\('tc_f'\) is called as i32\(ptr, float\) here and as "
                                           r"i32\(ptr, i32\) elsewhere in this module"):
        tc.build(func_of(body, A))


def test_extern_named_like_a_function_of_the_module():
    A = buf("A")
    with pytest.raises(CodegenError, match=r"call_extern\('f'\): the module defines a function of that name"):
        tc.build(func_of(Evaluate(tir.call_extern("int32", "f", A.access_ptr("w"))), A))


def test_unresolved_symbol_is_an_error_not_an_abort():
    A = buf("A")
    f = tc.build(func_of(Evaluate(tir.call_extern("int32", "tc_no_such_function", A.access_ptr("w"))), A))
    with pytest.raises(CodegenError, match=r"'f' calls the external function 'tc_no_such_function', which is "
                                           r"neither in its module .* nor loaded in this process"):
        f(np.zeros(16, "float32"))


def test_strings_are_only_names():
    A = buf("A")
    bad = Call("call_extern", (StringImm("tc_f"), StringImm("x")), "int32")
    with pytest.raises(CodegenError, match=r"call_extern\('tc_f'\): argument 0 is a string"):
        tc.build(func_of(Evaluate(bad), A))
    store = BufferStore(A, Call("call_pure_extern", (StringImm("tc_g"), StringImm("y")), "float32"), (const(0),))
    with pytest.raises(CodegenError, match=r"argument 0 is a string"):
        tc.build(func_of(store, A))


def test_buffer_written_through_a_pointer_is_an_output(tmp_path):
    """access_ptr("w") marks the buffer written: the runtime refuses a read-only array for it."""
    extern_library(tmp_path)
    A = buf("A")
    f = tc.build(func_of(Evaluate(tir.call_extern("int32", "tc_test_fill0", A.access_ptr("w"), 16)), A))
    a = np.ones(16, "float32")
    f(a)
    assert (a == 0).all()
    a.flags.writeable = False
    with pytest.raises(ValueError, match="the function writes this array, but it is read-only"):
        f(a)


def test_bounds_checked_pointer_range(tmp_path):
    """A bounds-checked build checks every element an access_ptr may reach before the call."""
    extern_library(tmp_path)
    A = buf("A", 8)
    call = tir.call_extern("int32", "tc_test_fill0", A.access_ptr("w", offset=4, extent=8), 8)
    with tc.transform.PassContext(config={"tir.instrument_bound_checkers": True}):
        f = tc.build(func_of(Evaluate(call), A))
    with pytest.raises(tc.runtime.status.KernelIndexError, match="index 11 out of bounds for buffer 'A' of extent 8"):
        f(np.ones(8, "float32"))


# -- LLVM intrinsics -----------------------------------------------------------------------------------

def _fma_func(name, *sig):
    A, B = buf("A", 8), buf("B", 8)
    x = A.vload([0], "float32x8")
    return func_of(B.vstore([0], tir.call_llvm_pure_intrin("float32x8", name, *sig, x, x, x)), A, B)


def test_overloaded_intrinsic_named_with_tvms_signature_count(rand):
    a = rand((8,))
    for f in (_fma_func("llvm.fma.v8f32"), _fma_func("llvm.fma", tc.tir.const(1, "uint32"))):
        b = np.full(8, np.nan, "float32")
        tc.build(f)(a, b)
        np.testing.assert_allclose(b, a * a + a, rtol=1e-6)


def test_unknown_intrinsic():
    with pytest.raises(CodegenError, match="LLVM does not know the intrinsic 'llvm.fmaz.v8f32'"):
        tc.build(_fma_func("llvm.fmaz.v8f32"))


def test_intrinsic_with_wrong_argument_types():
    A, B = buf("A", 8, "int32"), buf("B", 8, "int32")
    x = A.vload([0], "int32x8")
    f = func_of(B.vstore([0], tir.call_llvm_pure_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", x, x)), A, B)
    if not X86:
        pytest.skip("an x86 intrinsic")
    with pytest.raises(CodegenError, match="LLVM cannot compile the intrinsic 'llvm.x86.avx2.pmadd.wd' as "
                                           r"<8 x i32>\(<8 x i32>, <8 x i32>\)"):
        tc.build(f)


@pytest.mark.skipif(not X86, reason="an x86 intrinsic on a baseline x86-64 CPU")
def test_intrinsic_the_cpu_lacks_is_an_error_not_an_abort():
    A, B = buf("A", 16, "int16"), buf("B", 8, "int32")
    x = A.vload([0], "int16x16")
    f = func_of(B.vstore([0], tir.call_llvm_pure_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", x, x)), A, B)
    with pytest.raises(CodegenError, match="LLVM cannot compile the intrinsic 'llvm.x86.avx2.pmadd.wd' as "
                                           r"<8 x i32>\(<16 x i16>, <16 x i16>\) for CPU 'x86-64' .*LLVM ERROR"):
        tc.build(f, target="llvm -mcpu=x86-64 -mattr=-avx2,-avx")


# -- import_llvm ----------------------------------------------------------------------------------------

ADD_ONE = """
define i32 @tc_add_one(ptr %p, i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %q = getelementptr float, ptr %p, i32 %i
  %v = load float, ptr %q
  %w = fadd float %v, 1.0
  store float %w, ptr %q
  %next = add i32 %i, 1
  %done = icmp eq i32 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}
"""


def add_one_schedule(rows=4):
    """B = A + 1 over rows of 8, each row by the C-like function of ADD_ONE (in place on B)."""
    a = te.placeholder((8,), name="a")
    c = te.compute((8,), lambda i: a[i] + 1.0, name="c")

    def fcompute(ins, outs):
        ib = tir.ir_builder.create()
        with ib.for_range(0, 8, name="i") as i:
            ib.emit(outs[0].vstore([i], ins[0].vload([i])))
        ib.emit(tir.call_extern("int32", "tc_add_one", outs[0].access_ptr("rw"), 8))
        return ib.get()
    intrin = te.decl_tensor_intrin(c.op, fcompute, name="add_one", default_buffer_params={"offset_factor": 1})
    A = te.placeholder((rows, 8), name="A")
    B = te.compute((rows, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].tensorize(B.op.axis[1], intrin)
    return s, A, B


def test_hand_written_llvm_ir_is_linked(check_llvm, rand):
    s, A, B = add_one_schedule()
    s[B].pragma(B.op.axis[0], "import_llvm", ADD_ONE)
    a = rand((4, 8))
    check_llvm(s, [A, B], {A: a}, {B: a + 1}, passes=True)
    assert f"import_llvm: {len(ADD_ONE.splitlines())} lines of LLVM IR" in str(tc.lower(s, [A, B]))


def test_a_function_defined_twice_keeps_the_first_definition(rand):
    s, A, B = add_one_schedule()
    s[B].pragma(B.op.axis[0], "import_llvm", ADD_ONE)
    s[B].pragma(B.op.axis[0], "import_llvm", ADD_ONE.replace("fadd float %v, 1.0", "fadd float %v, 5.0"))
    a = rand((4, 8))
    b = np.full((4, 8), np.nan, "float32")
    tc.build(s, [A, B])(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)


def test_typed_pointer_ir_is_read():
    """clang 14 and older write typed pointers (float*); llvmlite's LLVM reads them as ptr."""
    s, A, B = add_one_schedule()
    typed = ADD_ONE.replace("ptr %p", "float* %p").replace("float, ptr %p", "float, float* %p") \
        .replace("ptr %q", "float* %q")
    assert "float*" in typed
    s[B].pragma(B.op.axis[0], "import_llvm", typed)
    a = np.ones((4, 8), "float32")
    b = np.full((4, 8), np.nan, "float32")
    tc.build(s, [A, B])(a, b)
    assert (b == 2).all()


def test_llvm_ir_that_does_not_parse():
    s, A, B = add_one_schedule()
    s[B].pragma(B.op.axis[0], "import_llvm", ADD_ONE.replace("ret i32 0", "ret i32 %nope"))
    with pytest.raises(CodegenError, match=r"the LLVM IR given by pragma import_llvm \(number 0\) does not parse: "
                                           r"line 15:11: error: use of undefined value '%nope' \(LLVM \d+ reads the IR of its own "
                                           r"version and older\)"):
        tc.build(s, [A, B])


def test_import_llvm_needs_text():
    s, A, B = add_one_schedule()
    s[B].pragma(B.op.axis[0], "import_llvm", 3)
    with pytest.raises(ScheduleError, match="pragma import_llvm on stage 'B': the value must be LLVM IR text, "
                                            "got int"):
        tc.lower(s, [A, B])


# -- clang ------------------------------------------------------------------------------------------

def test_no_usable_clang(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"no usable clang: need clang 13\.\.\d+ .*apt-get install clang-19"):
        clang.find_clang()
    assert clang.find_clang(required=False) == []


def test_clang_version_of_something_else():
    assert clang.clang_version("/bin/true") is None
    assert clang.clang_version("/no/such/compiler") is None


needs_clang = pytest.mark.skipif(not clang.find_clang(required=False),
                                 reason="no usable clang (apt-get install clang-19)")


@needs_clang
def test_clang_compile_error():
    with pytest.raises(RuntimeError, match="(?s)clang failed .*error: expected"):
        clang.create_llvm("int f( {")


@needs_clang
def test_c_kernel_through_clang(check_llvm, rand, tmp_path):
    """The tutorial's path, C functions compiled by clang and linked with import_llvm (-O2,
    reset + update), in a tensorized matmul with a parallel outer loop."""
    code = """
      extern "C" int tc_test_gemv(float *c, const float *a, const float *b, int m, int l, int ldb) {
        for (int i = 0; i < m; ++i) { float s = c[i]; for (int j = 0; j < l; ++j) s += a[j] * b[i * ldb + j]; c[i] = s; }
        return 0;
      }
      extern "C" int tc_test_fill0(float *c, int m) { for (int i = 0; i < m; ++i) c[i] = 0; return 0; }
    """
    ll = clang.create_llvm(code, output=str(tmp_path / "k.ll"), options=["-O2"])
    assert (tmp_path / "k.ll").read_text() == ll
    A, B, C = matmul_bt(6, 32, 32)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=16)
    zo, zi = s[C].split(C.op.reduce_axis[0], factor=16)
    s[C].reorder(x, yo, zo, yi, zi)
    s[C].parallel(x)
    s[C].tensorize(yi, gemv_extern(16, 16))
    s[C].pragma(yo, "import_llvm", ll)
    a, b = rand((6, 32)), rand((32, 32))
    check_llvm(s, [A, B, C], {A: a, B: b}, {C: a @ b.T}, rtol=1e-5, atol=1e-5, passes=True)


# -- backends that cannot run them --------------------------------------------------------------------

def _gpu_schedule():
    s, args, _ = tensorized_gemv(n=4, m=32, l=16, factor=16)
    C = args[2]
    s[C].bind(s[C].leaf_iter_vars[0], te.thread_axis("blockIdx.x"))
    return s, args


def test_cuda_c_refuses_calls_out_of_the_kernel():
    from tilecraft.codegen.cuda import generate_cuda
    A, B, C = matmul_bt(4, 32, 16)
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].tensorize(yi, gemv_extern(16, 16))
    with pytest.raises(NotImplementedError, match=r"call_extern\('tc_test_fill0'\) in a kernel: this backend "
                                                  r"cannot call C functions or LLVM intrinsics"):
        generate_cuda([tc.lower(s, [A, B, C], target="cuda")])


def test_emulator_runs_a_per_thread_tensor_intrinsic_by_its_definition(rand):
    # the CUDA C cannot call gemv's C functions (above), but the emulator runs the region by the
    # intrinsic's TE definition, once per thread (no warp-wide call in its lowering)
    from tilecraft.codegen.cuda_emulate import emulate
    s, args = _gpu_schedule()
    func = tc.lower(s, args, target="cuda")
    a, b = rand((4, 16)), rand((32, 16))
    c = np.full((4, 32), np.nan, "float32")
    emulate(func, [a, b, c])
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)


# -- the lowered-IR interpreter on malformed regions ---------------------------------------------------

def test_interpreter_refuses_a_box_outside_its_buffer():
    from tilecraft.interp_lowered import LoweredInterpError, run
    g = gemv(4, 4)
    A, B, C = buf("A", 16), buf("B", 16), buf("C", 16)
    body = Evaluate(0)
    body = AttrStmt(TENSOR_INTRIN_SCOPE, g, "body", body)
    for declared, target, begin in reversed([(g.buffers[0], A, 14), (g.buffers[1], B, 0), (g.buffers[2], C, 0)]):
        shape = tuple(const(int(d.value)) for d in declared.shape)
        region = BufferRegion(target, (const(begin),), (const(int(np.prod([d.value for d in shape]))),))
        body = AttrStmt(BUFFER_BIND_SCOPE, declared, region, body)
    with pytest.raises(LoweredInterpError, match=r"the intrinsic's buffer 'A' \(shape \[4\], strides \[1\], from "
                                                 r"element 14\) reaches elements 14\.\.17 of 'A', which has 16"):
        run(func_of(body, A, B, C), [np.ones(16, "float32")] * 3)


def test_interpreter_refuses_an_intrinsic_whose_buffers_are_not_bound():
    from tilecraft.interp_lowered import LoweredInterpError, run
    g = gemv(4, 4)
    A = buf("A", 16)
    body = AttrStmt(TENSOR_INTRIN_SCOPE, g, "update", Evaluate(0))
    with pytest.raises(LoweredInterpError, match="the update of tensor intrinsic 'gemv' runs where its buffer\\(s\\) "
                                                 "A, B, C are bound to nothing"):
        run(func_of(body, A), [np.ones(16, "float32")])


def test_run_tensor_intrin_errors():
    from tilecraft.interp import InterpError, run_tensor_intrin
    a = te.placeholder((4,), name="a")
    c = te.compute((4,), lambda i: a[i] * 2.0, name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.Evaluate(0), name="double")
    out = np.zeros(4, "float32")
    with pytest.raises(InterpError, match="tensor intrinsic 'double': 'update' of an intrinsic that is not a reduction"):
        run_tensor_intrin(intrin, "update", [out], [out])
    with pytest.raises(InterpError, match=r"tensor intrinsic 'gemv': unknown part 'twice' \(body, reset, update\)"):
        run_tensor_intrin(gemv(4, 4), "twice", [], [])
