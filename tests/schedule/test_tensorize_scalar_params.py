"""Tensorize with an intrinsic's ``scalar_params``: parameter k is bound to where the region
starts along output axis k, so a definition may depend on the absolute index (``i + m0``); the
lowering reads the parameter (a ``LetStmt`` tensorize puts around each use), and the lowered-IR
interpreter runs the definition with its value. Checked end to end on the CPU (interpreter after
every pass, compiled, numpy) with fresh random inputs; a lowering that ignores the parameter fails."""
import numpy as np
import pytest

from tilecraft import te, tir


def _indexed(lanes=4, use_param=True):
    """``c[i] = a[i] * 2 + float(i + m0)`` over ``lanes`` elements, ``m0`` a scalar parameter."""
    a = te.placeholder((lanes,), name="a")
    m0 = te.var("m0")
    c = te.compute((lanes,), lambda i: a[i] * 2.0 + (i + m0).astype("float32"), name="c")

    def fcompute(ins, outs, sp):
        ib = tir.ir_builder.create()
        aa = ib.buffer_ptr(ins[0])
        cc = ib.buffer_ptr(outs[0])
        with ib.for_range(0, lanes, name="j") as j:
            cc[j] = aa[j] * 2.0 + ((j + sp[0]) if use_param else j).astype("float32")
        return ib.get()
    return te.decl_tensor_intrin(c.op, fcompute, name="indexed", scalar_params=[m0],
                                 default_buffer_params={"offset_factor": 1})


def _schedule(n=32, lanes=4, use_param=True):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 2.0 + i.astype("float32"), name="C")
    s = te.create_schedule(C.op)
    _, xi = s[C].split(C.op.axis[0], factor=lanes)
    s[C].tensorize(xi, _indexed(lanes, use_param))
    return s, A, C


def test_scalar_param_is_the_region_start(check_llvm, rng):
    s, A, C = _schedule()
    a = rng.uniform(-1, 1, 32).astype("float32")
    check_llvm(s, [A, C], {A: a}, expected={C: a * 2 + np.arange(32, dtype="float32")}, passes=True)


def test_a_lowering_ignoring_the_parameter_differs(check_llvm, rng):
    s, A, C = _schedule(use_param=False)
    a = rng.uniform(-1, 1, 32).astype("float32")
    with pytest.raises(AssertionError):
        check_llvm(s, [A, C], {A: a}, passes=False)
