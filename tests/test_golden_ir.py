"""Golden files for the printed loop nests of a few schedules (``tests/golden/*.txt``).

A difference fails the test and shows both texts; when a change is intended, refresh the files
with ``python3 -m pytest tests/test_golden_ir.py --update-golden`` and review the diff.
``GOLDEN`` (name → a function returning ``(schedule, args)``) is also run by
``tests/test_interp_lowered.py``, which checks that these loop nests compute the right thing.
"""
import pytest

import tilecraft as tc
from tilecraft import te

from test_llvm_ops import blocked_matmul, conv2d_nchw, softmax
from tensorize_intrins import gemv_extern, matmul_bt, tensorized_gemv, vfma


def printed(s, args) -> str:
    return str(tc.lower(s, args))   # the whole pipeline (simple_mode would leave out loop partitioning)


def vadd_split_parallel_vectorize():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    return s, [A, B, C]


def matmul_blocked():
    return blocked_matmul(64, 64, 64)


def softmax_compute_at():
    s, A, out = softmax(16, 32)
    return s, [A, out]


def conv2d_pad_inlined():
    A, Wt, Apad, Out = conv2d_nchw(1, 2, 8, 8, 2, 3, stride=2, pad=1)
    s = te.create_schedule(Out.op)
    s[Apad].compute_inline()
    return s, [A, Wt, Out]


def cache_read_storage_align_pragma():
    A = te.placeholder((24, 30), name="A")
    B = te.compute((24, 30), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "global", [B])
    s[AA].storage_align(AA.op.axis[0], 16, 1)
    s[B].pragma(B.op.axis[0], "auto_unroll_max_step", 16)
    return s, [A, B]


def rfactor_parallel():
    A = te.placeholder((1024,), name="A")
    k = te.reduce_axis((0, 1024), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, nparts=8)
    SF = s.rfactor(S, ko)
    s[SF].parallel(SF.op.axis[0])
    return s, [A, S]


def split_tail_fuse_reorder_unroll():
    A = te.placeholder((10, 7), name="A")
    B = te.compute((10, 7), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=3)
    s[B].reorder(jo, i, ji)
    s[B].fuse(jo, i)
    s[B].unroll(ji)
    return s, [A, B]


def pragma_auto_unroll():
    """Loops inside the pragma whose whole subtree has at most 4 iterations become copies."""
    A = te.placeholder((4, 12), name="A")
    B = te.compute((4, 12), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].pragma(B.op.axis[0], "auto_unroll_max_step", 4)
    return s, [A, B]


def vector_reduce_accumulators():
    """A vectorized reduction axis with a tail, two unrolled vector accumulators and init=: the
    accumulators start from the identity, the init is combined once at the end."""
    A = te.placeholder((6, 45), name="A")
    k = te.reduce_axis((0, 45), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k] * A[i, k], axis=k, init=0.5), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=8)
    ko, ku = s[S].split(ko, factor=2)
    s[S].unroll(ku)
    s[S].vectorize(ki)
    return s, [A, S]


def tensorize_gemv_reset_update():
    """A GEMV intrinsic (loops on its declared buffers) with the reduction split: reset, then
    update per chunk; the buffers bound to boxes of A, B, C with their offsets and strides."""
    s, args, _ = tensorized_gemv(n=4, m=32, l=24, factor=16, kfactor=8)
    return s, args


def tensorize_llvm_fma():
    """A vector intrinsic: one llvm.fma.v8f32 per 8 elements, under a parallel loop."""
    A, B, C = (te.placeholder((3, 40), name=x) for x in "ABC")
    D = te.compute((3, 40), lambda i, j: A[i, j] * B[i, j] + C[i, j], name="D")
    s = te.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=8)
    s[D].parallel(D.op.axis[0])
    s[D].tensorize(ji, vfma(8))
    return s, [A, B, C, D]


GOLDEN = {f.__name__: f for f in (
    vadd_split_parallel_vectorize, matmul_blocked, softmax_compute_at, conv2d_pad_inlined,
    cache_read_storage_align_pragma, rfactor_parallel, split_tail_fuse_reorder_unroll,
    pragma_auto_unroll, vector_reduce_accumulators, tensorize_gemv_reset_update,
    tensorize_llvm_fma)}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_printed_loop_nest_matches_golden_file(name, golden):
    s, args = GOLDEN[name]()
    golden(name, printed(s, args))


def test_tensorized_loop_nest_calls_the_c_function(golden):
    """The tutorial's reduce-update form with C functions: reset, then update per chunk, each a
    call_extern with pointers into A, B and C (offsets in the outer loops) and the bound stride."""
    A, B, C = matmul_bt(8, 32, 32)
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    zo, zi = s[C].split(C.op.reduce_axis[0], factor=16)
    s[C].reorder(C.op.axis[0], yo, zo, yi, zi)
    s[C].tensorize(yi, gemv_extern(16, 16))
    golden("tensorize_call_extern", printed(s, [A, B, C]))
