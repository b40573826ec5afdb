"""``te.hybrid.script``: TVM's hybrid-script tests (``test_te_hybrid_script.py``, 18 tests) ported in
spirit. Each script is called with tensors (a ``HybridOp``), built for the CPU and run on fresh
random inputs with poisoned outputs (``check_llvm``), and compared with the same script run as
plain Python on the numpy arrays (which is how the interpreter evaluates a ``HybridOp``) and,
where there is one, with a numpy formula.

Not ported: ``test_bind``/``test_allocate``'s GPU halves (``bind``, shared memory) run here only as
far as the IR (no GPU; ``tests/cuda/test_hybrid_cuda.py`` runs them); ``HybridModule``
save/load (``te.hybrid.build``): ``test_hybrid_module.py``."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.ir.expr import Binary, BinOp, BufferLoad
from tilecraft.ir.stmt import Allocate, BufferStore, For, ForKind, IfThenElse, SeqStmt
from tilecraft.ir.dtype import DTypeError
from tilecraft.te.hybrid import HYBRID_GLOBALS, HybridError, HybridOp


def run_and_check(check_llvm, rand, func, args, scalars=None, outs=None, sch=None, expected=None, low=-1, high=1):
    """Build the HybridOp of ``func(*args)`` and run it; compare with ``func`` run as Python on the
    same arrays (and with ``expected(*arrays)`` when given). Returns the compiled outputs."""
    scalars = scalars or {}
    outs = outs if outs is not None else func(*args)
    outs = outs if isinstance(outs, list) else [outs]
    assert isinstance(outs[0].op, HybridOp)
    s = sch or te.create_schedule([outs[0].op])
    feed, py_args = {}, []

    def arr(t):
        shape = tuple(int(scalars.get(d, d).value) if hasattr(scalars.get(d, d), "value") else
                      int(scalars.get(d, d)) for d in t.shape)
        if t not in feed:
            feed[t] = rand(shape, t.dtype, low, high)
        return feed[t]
    for a in args:
        if isinstance(a, te.Tensor):
            py_args.append(arr(a))
        elif isinstance(a, list) and a and isinstance(a[0], te.Tensor):
            py_args.append([arr(t) for t in a])
        elif isinstance(a, tc.ir.expr.Var):
            py_args.append(scalars[a])
        elif isinstance(a, tc.ir.expr.Const):
            py_args.append(a.value)
        else:
            py_args.append(a)
    tensors = [t for t in feed]
    got = check_llvm(s, [*tensors, *outs], feed, scalars=scalars)
    ref = func(*py_args)
    ref = list(ref) if isinstance(ref, tuple) else [ref]
    for o, r in zip(outs, ref):
        np.testing.assert_allclose(got[o], r, rtol=1e-5, atol=1e-5)
    if expected is not None:
        want = expected(*py_args)
        for o, w in zip(outs, want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(got[o], w, rtol=1e-5, atol=1e-5)
    return [got[o] for o in outs]


@te.hybrid.script
def outer_product(n, m, a, b):
    """A docstring, skipped by the parser."""
    c = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            assert i < n and j < m, "index out of range!"
            c[i, j] = a[i] * b[j]
    return c


def test_outer_product(check_llvm, rand):
    n, m = te.size_var("n"), te.size_var("m")
    a = te.placeholder((n,), name="a")
    b = te.placeholder((m,), name="b")
    c = outer_product(n, m, a, b)
    ir = c.op.body
    assert isinstance(ir, For) and ir.loop_var.name == "i" and ir.min.value == 0 and ir.extent is n
    jloop = ir.body
    assert isinstance(jloop, For) and jloop.loop_var.name == "j" and jloop.extent is m
    store = jloop.body               # the assert is checked as Python, not compiled
    assert isinstance(store, BufferStore) and store.buffer.name == "c"
    assert [x.name for x in store.indices] == ["i", "j"]
    assert isinstance(store.value, Binary) and store.value.op is BinOp.MUL
    assert [x.buffer.name for x in (store.value.a, store.value.b)] == ["a", "b"]
    run_and_check(check_llvm, rand, outer_product, [n, m, a, b], {n: 9, m: 11},
                  expected=lambda n, m, x, y: np.outer(x, y))
    for key in HYBRID_GLOBALS:            # running as Python does not leak the hybrid names
        assert key not in globals() or key in ("range",) and globals()[key] is range


def test_fanout_scalar_variables(check_llvm, rand):
    @te.hybrid.script
    def fanout(n, a):
        three = 3.0
        b = output_tensor((a.shape[0] - 3,), a.dtype)
        for i in range(a.shape[0] - 3):
            sigma = 0.0
            for j in range(3):
                sigma += a[i + j]
            sigma = sigma / three
            b[i] = sigma
        return b

    n = te.size_var("n")
    a = te.placeholder((n,), "float32", name="a")
    b = fanout(n, a)
    ir = b.op.body
    assert isinstance(ir, For) and ir.loop_var.name == "i"
    alloc = ir.body                      # sigma: one element per iteration of i
    assert isinstance(alloc, Allocate) and alloc.buffer.name == "sigma" and alloc.buffer.scope == "local"
    body = alloc.body
    assert isinstance(body, SeqStmt) and len(body.seq) == 4
    assert isinstance(body.seq[1], For) and body.seq[1].extent.value == 3
    run_and_check(check_llvm, rand, fanout, [n, a], {n: 10},
                  expected=lambda n, x: np.convolve(x, np.ones(3), "valid")[:n - 3] / 3)


def test_looptype(check_llvm, rand):
    @te.hybrid.script
    def looptype(a, b, c):
        d = output_tensor((16,), "int32")
        e = output_tensor((16,), "int32")
        f = output_tensor((16,), "int32")
        for i in parallel(16):
            d[i] = a[i]
        for j in vectorize(16):
            e[j] = b[j]
        for k in unroll(16):
            f[k] = c[k]
        return d, e, f

    a, b, c = (te.placeholder((16,), name=x, dtype="int32") for x in "abc")
    d, e, f = looptype(a, b, c)
    assert [s.kind for s in d.op.body.seq] == [ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED]
    run_and_check(check_llvm, rand, looptype, [a, b, c], outs=[d, e, f], low=-100, high=100,
                  expected=lambda x, y, z: (x, y, z))


def test_if(check_llvm, rand):
    @te.hybrid.script
    def if_then_else(a):
        b = output_tensor((10,), "int32")
        c = output_tensor((10,), "int32")
        for i in unroll(10):
            b[i] = -1 if i % 2 == 0 else 1
        for i in range(10):
            if i % 2 == 0:
                c[i] = a[i]
            else:
                c[i] = b[i]
        return b, c

    @te.hybrid.script
    def if_triple_condition(a):
        b = output_tensor((10,), "int32")
        for i in range(10):
            if 0 <= i < 5:
                b[i] = a[i]
            else:
                b[i] = a[i] + 1
        return b

    @te.hybrid.script
    def if_and(a):
        b = output_tensor((10,), "int32")
        for i in range(10):
            if i >= 0 and i < 5:
                b[i] = a[i]
            elif not i < 8:
                b[i] = a[i] * 2
            else:
                b[i] = a[i] + 1
        return b

    a = te.placeholder((10,), dtype="int32", name="a")
    run_and_check(check_llvm, rand, if_then_else, [a], low=-50, high=50)
    assert isinstance(if_triple_condition(a).op.body.body, IfThenElse)
    run_and_check(check_llvm, rand, if_triple_condition, [a], low=-50, high=50,
                  expected=lambda x: x + (np.arange(10) >= 5))
    run_and_check(check_llvm, rand, if_and, [a], low=-50, high=50,
                  expected=lambda x: np.where(np.arange(10) < 5, x, np.where(np.arange(10) >= 8, 2 * x, x + 1)))


def test_bind_makes_thread_loops():
    @te.hybrid.script
    def vec_add(a, b):
        c = output_tensor((1000,), "float32")
        for tx in bind("threadIdx.x", 1000):
            c[tx] = a[tx] + b[tx]
        return c

    a = te.placeholder((1000,), name="a")
    b = te.placeholder((1000,), name="b")
    c = vec_add(a, b)
    loop = c.op.body
    assert loop.kind is ForKind.THREAD_BINDING and loop.thread_tag == "threadIdx.x" and loop.extent.value == 1000
    x, y = np.random.default_rng(0).random((2, 1000), dtype=np.float64).astype("float32")
    np.testing.assert_allclose(vec_add(x, y), x + y)


def test_math_intrin(check_llvm):
    @te.hybrid.script
    def intrin_real(a):
        b = output_tensor((8,), "float32")
        b[0] = sqrt(a[0])
        b[1] = log(a[1])
        b[2] = exp(a[2])
        b[3] = sigmoid(a[3])
        b[4] = power(a[4], a[5])
        b[5] = tanh(a[5])
        b[6] = min(a[4], a[5])
        b[7] = max(a[5], a[6])
        return b

    a8 = te.placeholder((8,), dtype="float32", name="a")
    b8 = intrin_real(a8)
    x = np.random.default_rng().uniform(0.5, 3.0, 8).astype("float32")
    got = check_llvm(te.create_schedule(b8.op), [a8, b8], {a8: x})
    want = [np.sqrt(x[0]), np.log(x[1]), np.exp(x[2]), 1 / (1 + np.exp(-x[3])), x[4] ** x[5], np.tanh(x[5]),
            min(x[4], x[5]), max(x[5], x[6])]
    np.testing.assert_allclose(got[b8], want, rtol=1e-5)
    np.testing.assert_allclose(intrin_real(x), want, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64"])
def test_popcount(check_llvm, dtype):
    """TVM's ``intrin_int`` (``popcount`` of an int32, 114514 among them), on every integer dtype
    the intrinsic takes, negative values included: compiled (LLVM ``ctpop``) and as Python."""
    @te.hybrid.script
    def intrin_int(a):
        b = output_tensor((a.shape[0],), "int32")
        for i in range(a.shape[0]):
            b[i] = int32(popcount(a[i]))
        return b

    info = np.iinfo(dtype)
    x = np.random.default_rng().integers(info.min, info.max, 37, dtype=dtype, endpoint=True)
    x[:4] = [114514, 0, info.max, info.min]
    a = te.placeholder((37,), dtype, name="a")
    b = intrin_int(a)
    got = check_llvm(te.create_schedule(b.op), [a, b], {a: x})
    want = np.array([bin(int(v) & ((1 << info.bits) - 1)).count("1") for v in x], "int32")
    assert want[0] == 11
    np.testing.assert_array_equal(got[b], want)
    np.testing.assert_array_equal(intrin_int(x), want)


def test_max_num_threads():
    """TVM's ``max_num_threads(True)``: the current target's limit, a number when parsed."""
    @te.hybrid.script
    def doubled(a):
        b = output_tensor(a.shape, a.dtype)
        m = max_num_threads(True)
        for i in bind("blockIdx.x", ceil_div(a.shape[0], m)):
            for j in bind("threadIdx.x", m):
                if i * m + j < a.shape[0]:
                    b[i * m + j] = a[i * m + j] + a[i * m + j]
        return b

    a = te.placeholder((3000,), name="a")
    with tc.target.Target("cuda"):
        b = doubled(a)
        np.testing.assert_array_equal(doubled(np.arange(3000, dtype="float32")), 2 * np.arange(3000))
    text = str(tc.lower(te.create_schedule(b.op), [a, b], target="cuda"))
    assert "grid(3, 1, 1) block(1024, 1, 1)" in text
    with tc.target.Target("cuda -max_num_threads=256"):
        b = doubled(a)
    assert "block(256, 1, 1)" in str(tc.lower(te.create_schedule(b.op), [a, b], target="cuda"))
    with pytest.raises(HybridError, match=r"max_num_threads\(\) needs a current target"):
        doubled(a)


def test_non_zero_loop_starts(check_llvm, rand):
    @te.hybrid.script
    def blur(a):
        b = output_tensor((30, 30), "float32")
        for i in range(2, 32):
            for j in range(2, 32):
                s = 0.0
                for di in range(3):
                    for dj in range(3):
                        s += a[i - di, j - dj]
                b[i - 2, j - 2] = s / 9.0
        return b

    @te.hybrid.script
    def triangle(a, b):
        c = output_tensor((10, 10), dtype="float32")
        for i in range(10):
            for j in range(i):
                c[i, j] = 0.0
            for j in range(i, 10):
                c[i, j] = a[i] * b[j]
        return c

    a = te.placeholder((32, 32), "float32", "a")
    run_and_check(check_llvm, rand, blur, [a])
    a = te.placeholder((10,), dtype="float32", name="a")
    b = te.placeholder((10,), dtype="float32", name="b")
    run_and_check(check_llvm, rand, triangle, [a, b], expected=lambda x, y: np.triu(np.outer(x, y)))


def test_allocate(check_llvm, rand):
    @te.hybrid.script
    def blur2d(a):
        b = output_tensor((30, 30), "float32")
        for i in parallel(30):
            ha = allocate((3, 30), "float32")
            for j in range(3):
                for k in range(30):
                    ha[j, k] = a[i + j, k] + a[i + j, k + 1] + a[i + j, k + 2]
            for j in range(30):
                b[i, j] = (ha[0, j] + ha[1, j] + ha[2, j]) / 9.0
        return b

    a = te.placeholder((32, 32), "float32", "a")
    b = blur2d(a)
    assert isinstance(b.op.body.body, Allocate) and b.op.body.body.buffer.name == "ha"

    def want(x):
        return sum(x[di:di + 30, dj:dj + 30] for di in range(3) for dj in range(3)) / 9
    run_and_check(check_llvm, rand, blur2d, [a], expected=want)


def test_upstream_and_downstream(check_llvm, rand):
    @te.hybrid.script
    def upstream(a):
        b = output_tensor((20,), "float32")
        for i in range(20):
            b[i] = a[i] * i
        return b

    a = te.placeholder((20,), "float32", name="a")
    b = te.placeholder((20,), "float32", name="b")
    c = te.compute((20,), lambda x: a[x] + b[x], name="c")
    d = upstream(c)
    e = te.compute((20,), lambda x: d[x] + 1.0, name="e")
    s = te.create_schedule(e.op)
    x, y = rand((20,)), rand((20,))
    check_llvm(s, [a, b, e], {a: x, b: y}, expected={e: (x + y) * np.arange(20) + 1})


def test_const_param(check_llvm, rand):
    @te.hybrid.script
    def add_something(a, b):
        c = output_tensor((11,), "int32")
        for i in range(11):
            c[i] = a[i] + b
        return c

    a = te.placeholder((11,), dtype="int32", name="a")
    b = tc.tir.const(11, "int32")
    c = add_something(a, b)
    x = rand((11,), "int32", -100, 100)
    check_llvm(te.create_schedule(c.op), [a, c], {a: x}, expected={c: x + 11})
    np.testing.assert_array_equal(add_something(x, 11), x + 11)


def test_value_index(check_llvm, rand):
    @te.hybrid.script
    def kernel_a(a):
        b = output_tensor((16,), "int32")
        c = output_tensor((4, 4), "int32")
        for i in range(16):
            b[i] = a[i] + 2
            c[i // 4, i % 4] = a[i] + 1
        return b, c

    @te.hybrid.script
    def kernel_b(b, a):
        c = output_tensor((4, 4), "int32")
        for i in range(4):
            for j in range(4):
                c[i, j] = a[i * 4 + j] * b[i, j]
        return c

    a = te.placeholder((16,), "int32", name="a")
    b, c = kernel_a(a)
    d = kernel_b(c, b)
    x = rand((16,), "int32", -100, 100)
    check_llvm(te.create_schedule(d.op), [a, d], {a: x},
               expected={d: ((x + 2) * (x + 1)).reshape(4, 4)})


def test_bool(check_llvm, rand):
    @te.hybrid.script
    def foo(a):
        b = output_tensor(a.shape, a.dtype)
        b[0] = 1.2
        b[9] = 2.5
        for i in range(1, a.shape[0] - 1):
            if a[i] * a[i - 1] < a[i] or a[i] * a[i - 1] < a[i - 1] or i * a[i] == a[i]:
                b[i] = a[i]
            else:
                b[i] = 0.0
        return b

    a = te.placeholder((10,), name="a")
    run_and_check(check_llvm, rand, foo, [a])


def test_const_range(check_llvm, rand):
    @te.hybrid.script
    def foo(a, b):
        c = output_tensor(a.shape, a.dtype)
        d = output_tensor(a.shape, "int32")
        for i in const_range(2):
            for j in const_range(5):
                c[i, j] = float32(int32(a[i, j]) + b[i][j])
        for i in const_range(len(b)):
            for j in const_range(len(b[0])):
                d[i, j] = int32(a[i, j] + b[i][j])
        return c, d

    @te.hybrid.script
    def goo(a, b):
        c = output_tensor(a.shape, a.dtype)
        len_b = len(b)
        for i in const_range(len_b * 2):
            if i < len_b:
                c[i] = a[i] + b[i]
            else:
                c[i - len_b] = a[i - len_b] + b[i - len_b]
        return c

    @te.hybrid.script
    def hoo(a, b):
        c = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in const_range(len(b)):
                d = a[i] * b[j]
                d += a[i] + b[j]
                c[i] = d
        return c

    a = te.placeholder((2, 5), name="a", dtype="float32")
    lists = [[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]]
    c, d = foo(a, lists)
    assert not isinstance(c.op.body, For)          # unrolled when parsed
    run_and_check(check_llvm, rand, foo, [a, lists], outs=[c, d], low=-20, high=20)
    a = te.placeholder((5,), name="a", dtype="int32")
    run_and_check(check_llvm, rand, goo, [a, [1, 2, 3, 4, 5]], low=-50, high=50,
                  expected=lambda x, y: x + np.array(y))
    run_and_check(check_llvm, rand, hoo, [a, [1, 2, 3, 4, 5]], low=-50, high=50,
                  expected=lambda x, y: x * 5 + x + 5)


def test_capture(check_llvm, rand):
    n = 8
    constant_tuple = (10, n)
    constant_list = [[1, 2], [3, n]]
    const_value = 1

    @te.hybrid.script
    def add_something(a):
        c = output_tensor((constant_tuple[1],), "int32")
        for i in range(constant_tuple[1]):
            c[i] = a[i] + constant_list[1][const_value]
        return c

    a = te.placeholder((n,), dtype="int32", name="a")
    run_and_check(check_llvm, rand, add_something, [a], low=-50, high=50, expected=lambda x: x + 8)


def test_array_inputs(check_llvm, rand):
    @te.hybrid.script
    def sum_array(inputs):
        out = output_tensor((10,), inputs[0].dtype)
        n = len(inputs)
        for i in range(10):
            out[i] = 0.0
            for j in const_range(n):
                out[i] += inputs[j][i]
        return out

    inputs = [te.placeholder((10,), name=f"t{i}", dtype="float32") for i in range(5)]
    out = sum_array(inputs)
    assert len(out.op.input_tensors) == 5
    run_and_check(check_llvm, rand, sum_array, [inputs], expected=lambda xs: sum(xs))


def test_float64_promotion_and_2d_partial_index(check_llvm, rand):
    @te.hybrid.script
    def mix(a, w):
        b = output_tensor((4, 3), "float64")
        for i in range(4):
            for j in range(3):
                b[i][j] = a[i][j] * i + w * 0.5 - j // 2 + abs(a[i, j] - 1.0) + a[i, j] ** 2.0
        return b

    a = te.placeholder((4, 3), "float64", name="a")
    run_and_check(check_llvm, rand, mix, [a, 3],
                  expected=lambda x, w: x * np.arange(4)[:, None] + 1.5 - np.arange(3) // 2 + abs(x - 1) + x ** 2)


def test_errors_name_the_line_and_construct():
    a = te.placeholder((4,), name="a")

    @te.hybrid.script
    def uses_while(a):
        b = output_tensor((4,), "float32")
        while True:
            b[0] = a[0]
        return b

    @te.hybrid.script
    def undefined(a):
        b = output_tensor((4,), "float32")
        for i in range(4):
            b[i] = a[i] * not_a_name
        return b

    @te.hybrid.script
    def int_div(a):
        b = output_tensor((4,), "float32")
        for i in range(4):
            b[i] = a[i / 2]
        return b

    @te.hybrid.script
    def calls_script(a):
        b = outer_product(4, 4, a, a)
        return b

    @te.hybrid.script
    def no_return(a):
        b = output_tensor((4,), "float32")
        b[0] = a[0]

    @te.hybrid.script
    def pops(a):
        b = output_tensor((4,), "int32")
        b[0] = popcount(a[0])
        return b

    with pytest.raises(HybridError, match=r"hybrid script 'uses_while', line \d+: `while` loops are not part"):
        uses_while(a)
    with pytest.raises(HybridError, match="hybrid script 'undefined', line .*name 'not_a_name' is not defined"):
        undefined(a)
    with pytest.raises(HybridError, match="`/` of two integers: write `//`"):
        int_div(a)
    with pytest.raises(HybridError, match=r"hybrid script 'calls_script', line \d+: `return b`: the result of a "
                                          r"hybrid script call is a temporary buffer of this script; copy it"):
        calls_script(a)
    with pytest.raises(HybridError, match="the script must end with `return` of its output tensor"):
        no_return(a)
    with pytest.raises(DTypeError, match=r"te.popcount needs a int32/uint32/int64/uint64 argument, got .* of dtype "
                                         r"float32"):
        pops(a)


@te.hybrid.script
def outer_product_64(a, b):
    c = output_tensor((64, 64), a.dtype)
    for i in range(64):
        for j in range(64):
            c[i, j] = a[i] * b[j]
    return c


def _loops(stmt):
    """The loop variables' names and kinds of the nest at the top of ``stmt`` (attrs skipped)."""
    out = []
    while True:
        if isinstance(stmt, For):
            out.append((stmt.loop_var.name, stmt.kind))
        elif not hasattr(stmt, "body"):
            return out
        stmt = stmt.body


def test_schedule(check_llvm, rand):
    """TVM's test_schedule: a hybrid stage's outermost loops are its axes: split, reorder,
    parallel, vectorize, fuse, an imperfect split (a guarded tail)."""
    a = te.placeholder((64,), name="a")
    b = te.placeholder((64,), name="b")
    c = outer_product_64(a, b)
    assert [iv.var.name for iv in c.op.axis] == ["i", "j"]
    sch = te.create_schedule(c.op)
    i, j = c.op.axis
    io, ii = sch[c].split(i, 4)
    sch[c].parallel(ii)
    jo, ji = sch[c].split(j, 4)
    joo, joi = sch[c].split(jo, 4)
    sch[c].vectorize(ji)
    sch[c].reorder(ii, io, joo, joi, ji)
    body = tc.lower(sch, [a, b, c])["main"].body
    assert _loops(body) == [("i.inner", ForKind.PARALLEL), ("i.outer", ForKind.SERIAL),
                            ("j.outer.outer", ForKind.SERIAL), ("j.outer.inner", ForKind.SERIAL)]
    outer = lambda x, y: np.outer(x, y)
    run_and_check(check_llvm, rand, outer_product_64, [a, b], outs=[c], sch=sch, expected=outer)

    sch = te.create_schedule(c.op)
    sch[c].fuse(c.op.axis[0], c.op.axis[1])
    assert _loops(tc.lower(sch, [a, b, c])["main"].body) == [("i.j.fused", ForKind.SERIAL)]
    run_and_check(check_llvm, rand, outer_product_64, [a, b], outs=[c], sch=sch, expected=outer)

    sch = te.create_schedule(c.op)
    sch[c].split(c.op.axis[0], 3)                     # 64 = 21 * 3 + 1: the tail is guarded
    text = str(tc.lower(sch, [a, b, c], simple_mode=True))
    assert "for i.outer in range(0, 22)" in text and "if i.outer * 3 + i.inner < 64" in text
    run_and_check(check_llvm, rand, outer_product_64, [a, b], outs=[c], sch=sch, expected=outer)


def test_schedule_keeps_the_scripts_loop_kinds_and_stops_at_dependent_loops(check_llvm, rand):
    @te.hybrid.script
    def tri(a):
        c = output_tensor((16, 16), a.dtype)
        for i in parallel(16):
            for j in range(i + 1):          # depends on i: not an axis
                c[i, j] = a[i, j]
            for j in range(i + 1, 16):
                c[i, j] = 0.0
        return c

    a = te.placeholder((16, 16), name="a")
    c = tri(a)
    assert [iv.var.name for iv in c.op.axis] == ["i"]
    sch = te.create_schedule(c.op)
    assert _loops(tc.lower(sch, [a, c])["main"].body)[0] == ("i", ForKind.PARALLEL)
    io, ii = sch[c].split(c.op.axis[0], 8)            # ii keeps no kind of its own: serial
    assert _loops(tc.lower(sch, [a, c])["main"].body)[:2] == [("i.outer", ForKind.SERIAL), ("i.inner", ForKind.SERIAL)]
    run_and_check(check_llvm, rand, tri, [a], outs=[c], sch=sch, expected=lambda x: np.tril(x))

    @te.hybrid.script
    def lower_rows(a):
        c = output_tensor((16, 16), a.dtype)
        for i in range(16):
            for j in range(i + 1):          # its extent depends on i: the nest of axes stops here
                c[i, j] = a[i, j]
        return c

    assert [iv.var.name for iv in lower_rows(a).op.axis] == ["i"]


@te.hybrid.script
def outer_product_10(n, m, a, b):
    c = output_tensor((n, m), a.dtype)
    for i in range(n):
        for j in range(m):
            c[i, j] = a[i] * b[j]
    return c


def test_func_call(check_llvm, rand):
    """TVM's test_func_call: a script calling another; the callee's output is a temporary of the
    caller, and the callee reads what the caller passes (here a buffer the caller filled)."""
    @te.hybrid.script
    def foo(a, b):
        t = allocate((10,), "float32")
        for i in range(len(a)):
            t[i] = a[i] + 1.0
        c = outer_product_10(10, 10, t, b)
        d = output_tensor(c.shape, c.dtype)
        for i in range(10):
            for j in range(10):
                d[i, j] = c[i, j] + i * j
        return d

    a = te.placeholder((10,), name="a")
    b = te.placeholder((10,), name="b")
    d = foo(a, b)
    assert d.op.input_tensors == [a, b]
    run_and_check(check_llvm, rand, foo, [a, b], outs=[d],
                  expected=lambda x, y: np.outer(x + 1, y) + np.outer(np.arange(10), np.arange(10)))


def test_func_call_errors():
    a = te.placeholder((10,), name="a")

    @te.hybrid.script
    def wrong_count(a):
        c = outer_product_10(10, a, a)
        d = output_tensor((10,), "float32")
        return d

    @te.hybrid.script
    def unassigned(a):
        d = output_tensor((10,), "float32")
        d[0] = outer_product_10(10, 10, a, a)[0, 0]
        return d

    with pytest.raises(HybridError, match=r"hybrid script 'wrong_count', line \d+: `outer_product_10\(10, a, a\)`: "
                                          r"'outer_product_10' takes 4 argument\(s\), got 3"):
        wrong_count(a)
    with pytest.raises(HybridError, match=r"hybrid script 'unassigned', line \d+: `outer_product_10\(10, 10, a, a\)`: "
                                          r"assign a hybrid script's result to a name"):
        unassigned(a)


def test_compute_at_a_hybrid_loop_is_refused():
    a = te.placeholder((64,), name="a")
    b = te.placeholder((64,), name="b")
    a2 = te.compute((64,), lambda i: a[i] * 2.0, name="a2")
    c = outer_product_64(a2, b)
    s = te.create_schedule(c.op)
    with pytest.raises(tc.schedule.ScheduleError, match=r"compute_at of stage 'a2' at loop 'i' of stage "
                                                       r"'outer_product_64': a hybrid script reads its inputs as "
                                                       r"whole buffers"):
        s[a2].compute_at(s[c], c.op.axis[0])
