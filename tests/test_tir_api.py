"""TVM's tir surface for tensor intrinsics: decl_buffer (access_ptr, vload, vstore), ir_builder, the
builtin calls, te.decl_tensor_intrin; what they build and one test per error they raise."""
import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te, tir
from tilecraft.ir import AccessPtr, BufferLoad, BufferStore, Call, Const, Var
from tilecraft.ir.simplify import simplify
from tilecraft.ir.builtin import call_args, symbol_of
from tilecraft.te import TEError


# -- decl_buffer -------------------------------------------------------------------------------------

def test_decl_buffer_defaults_as_tvm():
    b = tir.decl_buffer((16, 64), "float32", name="B")
    assert b.strides is None and b.scope == "global" and isinstance(b.elem_offset, Const) \
        and b.elem_offset.value == 0 and b.data.dtype == "handle" and b.offset_factor == 0
    f = tir.decl_buffer((16,), "int8", name="F", offset_factor=4)
    assert isinstance(f.elem_offset, Var) and f.elem_offset.name == "F_elem_offset"


def test_access_ptr_offset_extent_and_mask():
    s1 = te.var("s1")
    b = tir.decl_buffer((16, 8), "float32", name="B", offset_factor=1, strides=[s1, 1])
    p = b.access_ptr("r")
    assert isinstance(p, AccessPtr) and p.access_mask == 1 and p.buffer is b
    assert str(simplify(p.offset - b.elem_offset)) == "0"
    # the span of a strided buffer: from its first element to its last
    assert str(simplify(p.extent)) == "s1 * 15 + 8"
    q = b.access_ptr("rw", offset=3, extent=5)
    assert q.access_mask == 3 and str(q.extent) == "5" and str(q.offset) == "B_elem_offset + 3"
    c = tir.decl_buffer((4, 4), "float32", name="C")        # compact, no offset
    assert str(c.access_ptr("w", offset=2).offset) == "2" and str(c.access_ptr(2).extent) == "16"


def test_vload_and_vstore():
    b = tir.decl_buffer((4, 16), "float32", name="B")
    v = b.vload([1, 8], "float32x8")
    assert isinstance(v, BufferLoad) and v.dtype == "float32x8" and str(v) == "B[1, ramp(8, 1, 8)]"
    st = b.vstore([2, 0], v)
    assert isinstance(st, BufferStore) and str(st) == "B[2, ramp(0, 1, 8)] = B[1, ramp(8, 1, 8)]"
    assert str(b.vload([0, 3])) == "B[0, 3]"


@pytest.mark.parametrize("call,message", [
    (lambda: tir.decl_buffer((4, 4), strides=[1], name="X"), "decl_buffer 'X': 1 strides for 2 dimensions"),
    (lambda: tir.decl_buffer((4,), offset_factor=-1, name="X"), "decl_buffer 'X': offset_factor must be an integer >= 0, got -1"),
    (lambda: tir.decl_buffer((4,), data=te.var("d"), name="X"), "decl_buffer 'X': data must be a handle variable"),
    (lambda: tir.decl_buffer((4,), axis_separators=[1], name="X"), "decl_buffer 'X': axis_separators are not supported"),
    (lambda: tir.decl_buffer((4,), name="X").access_ptr("x"), "access_ptr of buffer 'X': the access mask must be 'r', 'w' or 'rw'"),
    (lambda: tir.decl_buffer((4,), name="X").access_ptr("r", content_lanes=4), "access_ptr of buffer 'X': only ptr_type='handle' and content_lanes=1"),
    (lambda: tir.decl_buffer((4, 4), name="X").vload([0]), "vload of buffer 'X': it has 2 dimension\\(s\\), got 1 index"),
    (lambda: tir.decl_buffer((4,), name="X").vload([0], "int32x4"), "vload of buffer 'X' \\(float32\\) as int32x4: the element types differ"),
    (lambda: tir.decl_buffer((), name="X").vload([], "float32x4"), "vload of 4 lanes from the 0-d buffer 'X'"),
])
def test_buffer_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- builtins --------------------------------------------------------------------------------------

def test_call_extern_and_llvm_intrin_shapes():
    b = tir.decl_buffer((4,), name="B")
    c = tir.call_extern("int32", "kernel", b.access_ptr("w"), 4)
    assert isinstance(c, Call) and c.name == "call_extern" and symbol_of(c) == "kernel" and c.dtype == "int32"
    assert [str(a) for a in call_args(c)] == ['B.access_ptr("w", offset=0, extent=4)', "4"]
    x = b.vload([0], "float32x4")
    f = tir.call_llvm_pure_intrin("float32x4", "llvm.fma.v4f32", x, x, x)
    assert f.name == "call_llvm_pure_intrin" and symbol_of(f) == "llvm.fma.v4f32" and len(call_args(f)) == 3
    g = tir.call_llvm_intrin("float32x4", "llvm.fma", tvm.tir.const(1, "uint32"), x, x, x)   # TVM's form
    assert g.args[1].value == 1 and len(call_args(g)) == 3
    assert tir.call_intrin("int32", "tir.call_extern", "kernel", 4).name == "call_extern"
    assert tir.call_intrin("float32", "tir.exp", tvm.tir.const(1.0)).name == "exp"
    assert tir.call_pure_extern("float32", "expf", tvm.tir.const(1.0)).name == "call_pure_extern"


@pytest.mark.parametrize("call,message", [
    (lambda: tir.call_extern("int32", "not a name"), "call_extern: the function name must be a C identifier"),
    (lambda: tir.call_extern("int32", "f", "text"), "call_extern\\('f'\\): argument 0 is the string 'text'"),
    (lambda: tir.call_extern("int32", "f", object()), "call_extern\\('f'\\): argument 0 must be an expression or a number"),
    (lambda: tir.call_llvm_intrin("int32", "fma"), "call_llvm_intrin: the name must be an LLVM intrinsic's"),
    (lambda: tir.call_llvm_intrin("float32", "llvm.fma", tvm.tir.const(2, "uint32"), 1.0),
     "call_llvm_intrin\\('llvm.fma'\\): the signature count 2 exceeds the 1 argument"),
    (lambda: tir.call_intrin("int32", "tir.nope", 1), "call_intrin: unknown intrinsic 'tir.nope'"),
    (lambda: tir.call_intrin("int32", "call_extern", 1), "call_intrin\\('call_extern'\\): the first argument is the C function's name"),
])
def test_builtin_errors(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_evaluate_takes_a_number():
    e = tir.Evaluate(0)
    assert isinstance(e.value, Const) and e.value.value == 0


# -- ir_builder --------------------------------------------------------------------------------------

def test_ir_builder_builds_loops_branches_and_allocations():
    ib = tir.ir_builder.create()
    n = te.var("n")
    A = tir.decl_buffer((16,), name="A")
    acc = ib.allocate("float32", (16,), name="acc")
    with ib.for_range(0, 16, name="i", kind="unroll") as i:
        with ib.for_range(0, 4) as j:
            acc[i] = A.vload([i]) + tvm.tir.const(1.0)
    x = ib.let("x", n * 2)
    with ib.if_scope(x > 3):
        ib.emit(tir.call_extern("int32", "f", A.access_ptr("w")))
    with ib.else_scope():
        ib.emit(A.vstore([0], acc[0]))
    stmt = ib.get()
    assert str(stmt).splitlines() == [
        'acc = allocate(float32[16], "local")',
        "for i in unroll(0, 16):",
        "  for j in range(0, 4):",
        "    acc[i] = A[i] + 1.0",
        "x = n * 2",
        "if x > 3:",
        '  call_extern("f", A.access_ptr("w", offset=0, extent=16))',
        "else:",
        "  A[0] = acc[0]",
    ]


@pytest.mark.parametrize("build,message", [
    (lambda ib: ib.for_range(0, 4, kind="spin").__enter__(), "ir_builder.for_range: kind must be one of"),
    (lambda ib: ib.if_scope(te.var("n")).__enter__(), "ir_builder.if_scope: the condition `n` is int32, not bool"),
    (lambda ib: ib.else_scope().__enter__(), "ir_builder.else_scope must follow an if_scope"),
    (lambda ib: ib.emit("text"), "ir_builder.emit: expected a statement or an expression"),
    (lambda ib: ib.allocate("float32", (4, 4), name="t").__getitem__(0), "buffer 't' has 2 dimension\\(s\\), indexed with 1"),
    (lambda ib: ib.allocate("float32", (4,), name="t").__setitem__(0, te.var("n")),
     "storing a int32 value into the float32 buffer 't'"),
])
def test_ir_builder_errors(build, message):
    ib = tir.ir_builder.create()
    with pytest.raises((ValueError, TypeError), match=message):
        build(ib)


def test_ir_builder_get_with_an_open_scope():
    ib = tir.ir_builder.create()
    with ib.for_range(0, 4):
        with pytest.raises(ValueError, match="ir_builder.get: a scope \\(for_range, if_scope\\) is still open"):
            ib.get()


# -- decl_tensor_intrin --------------------------------------------------------------------------------

def _op():
    a = te.placeholder((8,), name="a")
    return a, te.compute((8,), lambda i: a[i] * 2.0, name="c")


def test_decl_tensor_intrin_buffers_and_parts():
    a, c = _op()
    seen = {}

    def fcompute(ins, outs):
        seen["buffers"] = (ins, outs)
        return tir.call_extern("int32", "double8", outs[0].access_ptr("w"), ins[0].access_ptr("r"))
    intrin = te.decl_tensor_intrin(c.op, fcompute, name="double8", default_buffer_params={"offset_factor": 8})
    ins, outs = seen["buffers"]
    assert [b.name for b in intrin.buffers] == ["a", "c"] and intrin.buffers == tuple(ins + outs)
    assert all(b.offset_factor == 8 for b in intrin.buffers)
    assert intrin.body is not None and intrin.reduce_init is None and intrin.reduce_update is None
    assert intrin.inputs == (a,) and not intrin.is_reduction


def test_scalar_params_reach_fcompute():
    a, c = _op()
    x = te.var("x")
    got = []
    te.decl_tensor_intrin(c.op, lambda ins, outs, sp: got.append(sp) or tir.Evaluate(0), scalar_params=[x])
    assert got == [[x]]


@pytest.mark.parametrize("make,message", [
    (lambda a, c: te.decl_tensor_intrin(a.op, lambda i, o: tir.Evaluate(0), name="t"),
     "decl_tensor_intrin 't': expected the operation of a te.compute"),
    (lambda a, c: te.decl_tensor_intrin(te.compute((8,), lambda i: c[i] + 1.0, name="d").op,
                                        lambda i, o: tir.Evaluate(0), name="t"),
     "decl_tensor_intrin 't': the input 'c' is computed by 'c'; an intrinsic's inputs must be placeholders"),
    (lambda a, c: te.decl_tensor_intrin(c.op, lambda i, o: tir.Evaluate(0), name="t",
                                        binds={te.placeholder((8,), name="z"): tir.decl_buffer((8,))}),
     "decl_tensor_intrin 't': binds has the key .* which is not an input or output of 'c'"),
    (lambda a, c: te.decl_tensor_intrin(c.op, lambda i, o: tir.Evaluate(0), name="t", binds={a: "buffer"}),
     "decl_tensor_intrin 't': binds\\[a\\] must be a buffer from tir.decl_buffer"),
    (lambda a, c: te.decl_tensor_intrin(c.op, lambda i, o: tir.Evaluate(0), name="t",
                                        binds={a: tir.decl_buffer((8,), "float16")}),
     "decl_tensor_intrin 't': binds\\[a\\] is a float16 buffer of 1 dimension\\(s\\) but a is float32 with 1"),
    (lambda a, c: te.decl_tensor_intrin(c.op, lambda i, o: "code", name="t"),
     "decl_tensor_intrin 't': the body returned by fcompute is str, not a statement or an expression"),
    (lambda a, c: te.decl_tensor_intrin(c.op, lambda i, o: (tir.Evaluate(0),) * 4, name="t"),
     "decl_tensor_intrin 't': fcompute must return a statement or \\(body, reset, update\\), got 4 values"),
    (lambda a, c: te.decl_tensor_intrin(c.op, lambda i, o: (tir.Evaluate(0),) * 3, name="t"),
     "decl_tensor_intrin 't': 'c' is not a reduction, so it has no reset or update"),
])
def test_decl_tensor_intrin_errors(make, message):
    a, c = _op()
    with pytest.raises(TEError, match=message):
        make(a, c)


def test_calling_an_intrinsic_inside_compute_is_refused():
    a, c = _op()
    intrin = te.decl_tensor_intrin(c.op, lambda i, o: tir.Evaluate(0), name="t")
    with pytest.raises(TEError, match="tensor intrinsic 't': calling an intrinsic inside te.compute"):
        intrin(a)
