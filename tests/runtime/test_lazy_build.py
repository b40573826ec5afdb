"""``tilecraft.build`` for llvm optimises the IR once and makes machine code when it is needed:
the JIT on first use, the object file on export. Any order of call and export must work and give
the same results as each other and as numpy."""
import os
import shutil
import sys

import numpy as np
import pytest

import tilecraft as tc
import tilecraft.runtime as rt
from tilecraft import te

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))
from llvm_ir_helpers import poisoned, rand  # noqa: E402

pytestmark = pytest.mark.usefixtures("seeded_ir_helpers")   # rand() replays with the seed

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="export links with gcc")
N = 48


def build_ops():
    """C = tanh(A @ B) + 1 with a parallel, vectorized outer nest (libm and libgomp calls, a
    constant pool), and a serial copy D = 2 * A."""
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    M = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="M")
    C = te.compute((N, N), lambda i, j: te.tanh(M[i, j]) + 1.0, name="C")
    D = te.compute((N, N), lambda i, j: A[i, j] * 2.0, name="D")
    s = te.create_schedule([C.op, D.op])
    s[M].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    return tc.build(s, [A, B, C, D], target="llvm", name="ops")


def expected(a, b):
    return np.tanh(a @ b) + 1.0, a * 2.0


def run(f, a, b):
    c, d = poisoned((N, N)), poisoned((N, N))
    f(a, b, c, d)
    return c, d


def jit_compiled(mod) -> bool:
    return mod.artifact._engine is not None


def test_build_does_not_jit_until_first_use():
    mod = build_ops()
    assert not jit_compiled(mod)
    assert "define" in mod.get_source("ll") and "ops:" in mod.get_source("asm")
    f = mod.get_function("ops")
    assert not jit_compiled(mod)
    with pytest.raises(TypeError, match="ops expects 4 arguments"):
        f(rand((N, N)))
    a, b = rand((N, N), lo=-0.5, hi=0.5), rand((N, N), lo=-0.5, hi=0.5)
    c, d = run(f, a, b)
    assert jit_compiled(mod)
    want_c, want_d = expected(a, b)
    np.testing.assert_allclose(c, want_c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d, want_d, rtol=1e-6)


def test_time_evaluator_compiles_on_first_use():
    mod = build_ops()
    a, b = rand((N, N), lo=-0.5, hi=0.5), rand((N, N), lo=-0.5, hi=0.5)
    c, d = poisoned((N, N)), poisoned((N, N))
    res = mod.time_evaluator(mod.entry_name, tc.cpu(0), number=2)(a, b, c, d)
    assert res.mean > 0
    np.testing.assert_allclose(d, a * 2.0, rtol=1e-6)


@needs_gcc
def test_export_of_a_never_called_module(tmp_path):
    mod = build_ops()
    path = mod.export_library(str(tmp_path / "ops.so"))
    assert not jit_compiled(mod)            # exporting needs no JIT
    a, b = rand((N, N), lo=-0.5, hi=0.5), rand((N, N), lo=-0.5, hi=0.5)
    lib = rt.load_module(path)
    c_lib, d_lib = run(lib, a, b)
    want_c, want_d = expected(a, b)
    np.testing.assert_allclose(c_lib, want_c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d_lib, want_d, rtol=1e-6)
    # calling after exporting: the same optimised IR, so the same results, bit for bit
    c_jit, d_jit = run(mod, a, b)
    np.testing.assert_array_equal(c_jit, c_lib)
    np.testing.assert_array_equal(d_jit, d_lib)


@needs_gcc
def test_export_after_call_and_twice(tmp_path):
    mod = build_ops()
    a, b = rand((N, N), lo=-0.5, hi=0.5), rand((N, N), lo=-0.5, hi=0.5)
    c_jit, d_jit = run(mod, a, b)
    first = mod.export_library(str(tmp_path / "first.so"))
    second = mod.export_library(str(tmp_path / "second.so"))
    for path in (first, second):
        c_lib, d_lib = run(rt.load_module(path), a, b)
        np.testing.assert_array_equal(c_lib, c_jit)
        np.testing.assert_array_equal(d_lib, d_jit)
    c_again, _ = run(mod, a, b)             # the JIT-ed code still runs after exports
    np.testing.assert_array_equal(c_again, c_jit)


@needs_gcc
def test_thread_count_reaches_a_module_jit_compiled_after_export(tmp_path):
    import ctypes
    mod = build_ops()
    mod.export_library(str(tmp_path / "ops.so"))
    old = rt.get_num_threads()
    try:
        rt.set_num_threads(3)               # set before the JIT exists: applied when it is made
        addr = mod.artifact.engine.get_global_value_address("tilecraft_num_threads")
        assert ctypes.c_int32.from_address(addr).value == 3
        rt.set_num_threads(1)
        assert ctypes.c_int32.from_address(addr).value == 1
    finally:
        rt.set_num_threads(old)
