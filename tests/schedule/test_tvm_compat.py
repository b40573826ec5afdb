"""A TVM tutorial script ("How to optimize GEMM on CPU", blocking + packing + write cache) runs
unchanged with ``import tilecraft as tvm``."""
import numpy
import pytest


def test_tvm_gemm_tutorial_runs_with_tilecraft_as_tvm():
    import tilecraft as tvm
    from tilecraft import te

    M = K = N = 256
    dtype = "float32"
    target = tvm.target.Target(target="llvm", host="llvm")
    dev = tvm.device(target.kind.name, 0)
    a = tvm.nd.array(numpy.random.rand(M, K).astype(dtype), dev)
    b = tvm.nd.array(numpy.random.rand(K, N).astype(dtype), dev)
    answer = numpy.dot(a.numpy(), b.numpy())

    bn = 32
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    packedB = te.compute((N / bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute(
        (M, N),
        lambda x, y: te.sum(A[x, k] * packedB[tvm.tir.indexdiv(y, bn), k, tvm.tir.indexmod(y, bn)], axis=k),
        name="C",
    )
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], yo)
    xc, yc = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(k, factor=4)
    s[CC].reorder(ko, xc, ki, yc)
    s[CC].unroll(ki)
    s[CC].vectorize(yc)
    s[C].parallel(xo)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)

    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "parallel" in text and "ramp" in text
    func = tvm.build(s, [A, B, C], target=target, name="mmult")
    c = tvm.nd.array(numpy.full((M, N), numpy.nan, dtype=dtype), dev)
    func(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), answer, rtol=1e-5)
    evaluator = func.time_evaluator(func.entry_name, dev, number=2)
    assert evaluator(a, b, c).mean > 0
