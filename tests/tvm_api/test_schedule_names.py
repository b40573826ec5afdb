"""TVM's schedule names its unit tests read (ported in spirit from ``test_te_schedule.py`` and
``test_te_schedule_bound_inference.py``): ``tvm.te.schedule.Fuse`` / ``Split`` / ``Singleton``
among ``s[T].relations``, ``iter_var_attrs[iv].iter_type`` against ``IterVar.Unrolled`` /
``Vectorized`` / ..., ``pragma_keys``, ``pragma(ax, "vectorize")`` as ``vectorize(ax)``, and
``tvm.container.Map`` / ``Array``."""
import numpy as np

import tilecraft as tvm
from tilecraft import te


def _copy(m=None, n=None):
    m, n = m or te.size_var("m"), n or te.size_var("n")
    A = te.placeholder((m, n), name="A")
    return A, te.compute((m, n), lambda i, j: A[i, j], name="T")


def test_relations_are_tvms_classes():
    _, T = _copy()
    s = te.create_schedule(T.op)
    xo, yo, xi, yi = s[T].tile(T.op.axis[0], T.op.axis[1], x_factor=10, y_factor=5)
    fused = s[T].fuse(xo, yo)
    kinds = [type(r) for r in s[T].relations]
    assert kinds == [tvm.te.schedule.Split, tvm.te.schedule.Split, tvm.te.schedule.Fuse]
    assert tuple(s[T].leaf_iter_vars) == (fused, xi, yi)
    A = te.placeholder((), name="A")
    S = te.compute((), lambda: A() + 1.0, name="S")
    s = te.create_schedule(S.op)
    s[S].fuse()
    assert any(isinstance(r, tvm.te.schedule.Singleton) for r in s[S].relations)


def test_iter_type_and_pragma_keys(check_llvm, rand):
    A, T = _copy(64, 100)
    s = te.create_schedule(T.op)
    xo, yo, xi, yi = s[T].tile(T.op.axis[0], T.op.axis[1], x_factor=8, y_factor=4)
    s[T].vectorize(yi)
    s[T].unroll(xi)
    s[T].parallel(xo)
    s[T].pragma(yo, "pragma1")
    IterVar = tvm.te.schedule.IterVar
    attrs = s[T].iter_var_attrs
    assert [attrs[v].iter_type for v in (xo, xi, yi)] == [IterVar.Parallelized, IterVar.Unrolled, IterVar.Vectorized]
    assert (IterVar.DataPar, IterVar.Unrolled, IterVar.Vectorized, IterVar.Tensorized) == (0, 5, 6, 8)   # TVM's codes
    assert [k.value for k in attrs[yo].pragma_keys] == ["pragma1"] and attrs[yo].iter_type == IterVar.DataPar
    check_llvm(s, [A, T], {A: rand((64, 100), "float32")})


def test_pragma_vectorize_and_unroll_are_the_primitives(check_llvm, rand):
    A, T = _copy(100, 8)
    s = te.create_schedule(T.op)
    xo, xi = s[T].split(T.op.axis[0], factor=10)
    s[T].pragma(xi, "unroll")
    s[T].pragma(T.op.axis[1], "vectorize")
    attrs = s[T].iter_var_attrs
    assert attrs[xi].iter_type == tvm.te.schedule.IterVar.Unrolled and attrs[xi].pragmas == []
    assert attrs[T.op.axis[1]].iter_type == tvm.te.schedule.IterVar.Vectorized
    assert [step.kind for step in s.steps] == ["split", "unroll", "vectorize"]     # recorded as the primitives
    assert "ramp(" in str(tvm.lower(s, [A, T], simple_mode=True))
    check_llvm(s, [A, T], {A: rand((100, 8), "float32")})


def test_containers():
    A, T = _copy()
    s = te.create_schedule(T.op)
    xo, xi = s[T].split(T.op.axis[0], 8)
    bounds = tvm.te.schedule.InferBound(s)
    assert isinstance(bounds, tvm.container.Map) and bounds[xi].extent.value == 8
    assert isinstance(T.op.axis, tvm.container.Array) and isinstance(T.shape, tvm.container.Array)
    assert np.all([isinstance(x, tvm.container.Array) for x in (T.op.reduce_axis, A.shape)])
