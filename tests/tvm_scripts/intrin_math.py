"""The steps of TVM's intrin_math tutorial (gallery/how_to/work_with_schedules/intrin_math.py,
TVM <= 0.14) with `tvm` imported from tilecraft: a direct call of CUDA's __expf
(tir.call_pure_extern), the unified te.exp, a custom lowering rule for exp on CUDA
(register_intrin_lowering at level 99) and a new intrinsic mylog (register_op_attr + a CUDA rule).
Run by tests/test_tvm_scripts.py as `python intrin_math.py`; prints OK.

Each kernel is built for "cuda" as in the tutorial (CUDA C, compiled with nvcc) and, in addition,
run in tilecraft's CUDA emulator against numpy (with `--gpu`, on the GPU). The tutorial's OpenCL
build is there: tilecraft generates OpenCL C (source only, no OpenCL runtime), which is printed
and checked for OpenCL's spellings."""
from __future__ import absolute_import, print_function

import sys

import numpy as np

import tilecraft as tvm
import tilecraft.testing
from tilecraft import te
from tilecraft.ir import register_op_attr, register_intrin_lowering

GPU = "--gpu" in sys.argv


def check(s, args, name, reference):
    """Run the tutorial's schedule on n = 1000 (a tail for the 64-thread blocks)."""
    a = np.random.uniform(0.5, 2.0, size=1000).astype("float32")
    b = np.full(1000, np.nan, "float32")
    if GPU:
        f = tvm.build(s, args, "cuda", name=name)
        dev = tvm.cuda(0)
        bb = tvm.nd.array(b, dev)
        f(tvm.nd.array(a, dev), bb)
        b = bb.numpy()
    else:
        from tilecraft.codegen.cuda_emulate import emulate
        emulate(tvm.lower(s, args, target="cuda", name=name), [a, b])
    tvm.testing.assert_allclose(b, reference(a), rtol=1e-5)


######################################################################
# Direct Declare Extern Math Call
n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.compute(A.shape, lambda i: tvm.tir.call_pure_extern("float32", "__expf", A[i]), name="B")
s = te.create_schedule(B.op)
num_thread = 64
bx, tx = s[B].split(B.op.axis[0], factor=num_thread)
s[B].bind(bx, te.thread_axis("blockIdx.x"))
s[B].bind(tx, te.thread_axis("threadIdx.x"))
f = tvm.build(s, [A, B], "cuda", name="myexp")
print(f.imported_modules[0].get_source())
assert "__expf(A[" in f.imported_modules[0].get_source()
check(s, [A, B], "myexp", np.exp)

######################################################################
# Unified Intrinsic Call
n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.compute(A.shape, lambda i: te.exp(A[i]), name="B")
s = te.create_schedule(B.op)
num_thread = 64
bx, tx = s[B].split(B.op.axis[0], factor=num_thread)
s[B].bind(bx, te.thread_axis("blockIdx.x"))
s[B].bind(tx, te.thread_axis("threadIdx.x"))
fcuda = tvm.build(s, [A, B], "cuda", name="myexp")
print(fcuda.imported_modules[0].get_source())
check(s, [A, B], "myexp", np.exp)
fopencl = tvm.build(s, [A, B], "opencl", name="myexp")
print(fopencl.imported_modules[0].get_source())
src = fopencl.imported_modules[0].get_source()
assert "__kernel void myexp" in src and " = exp(A[" in src and "get_local_id(0)" in src and "expf" not in src


######################################################################
# Intrinsic Lowering Rule
def my_cuda_math_rule(op):
    """Customized CUDA intrinsic lowering rule"""
    assert isinstance(op, tvm.tir.Call)
    name = op.op.name
    assert name.startswith("tir.")
    dispatch_name = name[4:]
    if op.dtype == "float32":
        # call float function
        return tvm.tir.call_pure_extern("float32", "%sf" % dispatch_name, op.args[0])
    elif op.dtype == "float64":
        # call double function
        return tvm.tir.call_pure_extern("float32", dispatch_name, op.args[0])
    else:
        # cannot do translation, return self.
        return op


register_intrin_lowering("tir.exp", target="cuda", f=my_cuda_math_rule, level=99)
fcuda = tvm.build(s, [A, B], "cuda", name="myexp")
print(fcuda.imported_modules[0].get_source())
assert " = expf(A[" in fcuda.imported_modules[0].get_source()
check(s, [A, B], "myexp", np.exp)


######################################################################
# Add Your Own Intrinsic
def mylog(x):
    """customized log intrinsic function"""
    return tvm.tir.call_intrin(x.dtype, "tir.mylog", x)


def my_cuda_mylog_rule(op):
    """CUDA lowering rule for log"""
    if op.dtype == "float32":
        return tvm.tir.call_pure_extern("float32", "logf", op.args[0])
    elif op.dtype == "float64":
        return tvm.tir.call_pure_extern("float64", "log", op.args[0])
    else:
        return op


# new op registration is triggered by registering an attribute of the op
register_op_attr("tir.mylog", "TCallEffectKind", tvm.tir.CallEffectKind.Pure)
register_intrin_lowering("tir.mylog", target="cuda", f=my_cuda_mylog_rule, level=99)

n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.compute(A.shape, lambda i: mylog(A[i]), name="B")
s = te.create_schedule(B.op)
num_thread = 64
bx, tx = s[B].split(B.op.axis[0], factor=num_thread)
s[B].bind(bx, te.thread_axis("blockIdx.x"))
s[B].bind(tx, te.thread_axis("threadIdx.x"))
fcuda = tvm.build(s, [A, B], "cuda", name="mylog")
print(fcuda.imported_modules[0].get_source())
assert " = logf(A[" in fcuda.imported_modules[0].get_source()
check(s, [A, B], "mylog", np.log)
print("OK")
