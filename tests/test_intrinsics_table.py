"""Every intrinsic of the table (``tilecraft/ir/intrinsics.py``), for every dtype it accepts,
against its numpy reference and against the exact value, in every consumer:

* the reference interpreter (equal to the table's reference, element for element);
* the lowered-IR interpreter: before legalize (equal to the reference) and after legalizing the
  same function for LLVM and for CUDA (the decompositions);
* the LLVM build, scalar and vectorized with a tail, on two poisons;
* CUDA: generated, run in the emulator (scalar and vector statements), all of them compiled by
  nvcc in one module, and run on a GPU where there is one (``cuda`` marker).

Inputs are fresh random values over the row's ``domain`` plus special values (NaN, ±inf, ±0,
subnormals, the largest finite values, ties for the rounding functions). A result is right when
its NaNs and infinities are where the exact value's are and every finite element is within the
row's ``ulps`` of the exact value (float16 computes in float32 and rounds once: 1 ulp, 0 for the
exact functions). The exact value is the reference computed in float64 (fma: in fractions); for
float64 arguments that is numpy's float64, itself up to an ulp off, so they get one ulp more.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import tilecraft
from tilecraft import interp, interp_lowered, te
from tilecraft.ir import dtype as dt
from tilecraft.ir import intrinsics
from tilecraft.ir.dtype import DTypeError
from tilecraft.ir.expr import Call, Cast
from tilecraft.ir.functor import post_order_visit
from tilecraft.schedule.passes.legalize import LegalizeError, legalize, legalize_func
from tilecraft.testing import poison

N = 8 * 37 + 5                       # vectors of 8 (LLVM) and 4 (CUDA) with a tail
CASES = [(row, d) for row in intrinsics.TABLE for d in row.dtypes]
IDS = [f"{row.name}-{d}" for row, d in CASES]
TARGETS = tuple(intrinsics.TARGETS)
# the one pair of (intrinsic, target) with neither a native form nor a decomposition: legalize
# never makes round_to_float32_odd for CUDA (its float64 -> float16 conversion is native)
ABSENT = {("round_to_float32_odd", "cuda")}


# --- inputs, exact values, comparison ----------------------------------------------------------

def _specials(dtype: str, row) -> np.ndarray:
    fi = np.finfo(dtype)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
            fi.smallest_normal, fi.max, -fi.max, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5]
    lo, hi = row.domain
    vals += [lo, hi, math.nextafter(lo, math.inf) if lo == 0 else lo * 0.999]
    return np.array(vals, np.float64).astype(dtype)


def _inputs(rng, row, dtype: str, n: int = N) -> list:
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        x[:6] = [0, 1, info.max, info.min, info.max // 2, info.max - 1] if info.min == 0 else \
            [0, 1, -1, info.max, info.min, info.min + 1]
        return [x]
    if dtype == "bool":
        x = rng.random(n) < 0.5
        x[:2] = [True, False]
        return [x]
    lo, hi = row.domain
    hi = min(hi, float(np.finfo(dtype).max))
    xs = []
    for k in range(row.arity):
        x = rng.uniform(lo, hi, n).astype(dtype)
        sp = _specials(dtype, row)
        # each argument gets every special value, at shuffled places, so pairs vary
        x[rng.permutation(n)[:len(sp)] if k else np.arange(len(sp))] = sp
        xs.append(x)
    return xs


def _exact(row, xs) -> np.ndarray:
    """The exact value in float64 (bool for a bool result)."""
    if row.name == "fma":
        def one(a, b, c):
            if not all(map(math.isfinite, (a, b, c))):
                return a * b + c
            try:
                return float(Fraction(a) * Fraction(b) + Fraction(c))
            except OverflowError:
                return math.inf if Fraction(a) * Fraction(b) + Fraction(c) > 0 else -math.inf
        with np.errstate(all="ignore"):
            return np.vectorize(one, otypes=[np.float64])(*[x.astype(np.float64) for x in xs])
    with np.errstate(all="ignore"):
        if xs[0].dtype == np.bool_ or xs[0].dtype.kind in "iu" or row.name == "round_to_float32_odd":
            return np.asarray(row.reference(*xs))
        return np.asarray(row.reference(*[x.astype(np.float64) for x in xs]), np.float64)


def _tolerance(row, dtype: str) -> float:
    if row.ulps == 0:
        return 0.0
    if dtype == "float16":
        return 1.0
    # the float64 "exact" value is numpy's float64, itself up to an ulp off (tanh: numpy 1,
    # glibc 2 ulps from the correctly rounded value)
    return row.ulps + (1.0 if dtype == "float64" else 0.0)


def _check(got, row, dtype: str, xs, who: str) -> None:
    """``got`` is within the row's ulps of the exact value, NaNs and infinities included."""
    want = _exact(row, xs)
    rd = row.result_dtype(dtype)
    got = np.asarray(got)
    assert got.dtype == np.dtype("bool" if rd == "bool" else rd), f"{who}: result dtype {got.dtype}, want {rd}"
    where = f"{who}: {row.name} on {dtype}"
    if rd == "bool" or not dt.is_float(rd):
        bad = np.nonzero(got != want.astype(rd))[0]
        assert not bad.size, f"{where} differs at {[(*(x[i] for x in xs), got[i]) for i in bad[:5]]}"
        return
    with np.errstate(all="ignore"):
        w = want.astype(rd)
    nan_bad = np.isnan(got) != np.isnan(w)
    inf = ~np.isnan(w) & (np.isinf(w) | np.isinf(got))
    inf_bad = inf & (got != w)
    fin = ~np.isnan(w) & ~inf
    with np.errstate(all="ignore"):
        ulp = np.spacing(np.abs(w[fin])).astype(np.float64)    # the largest value's is inf: its ulp
        ulp = np.where(np.isinf(ulp), np.spacing(np.nextafter(np.abs(w[fin]), 0)).astype(np.float64), ulp)
    err = np.zeros(got.shape)
    err[fin] = np.abs(got[fin].astype(np.float64) - want[fin]) / ulp
    tol = _tolerance(row, dtype)
    bad = np.nonzero(nan_bad | inf_bad | (err > tol + 1e-6))[0]
    if bad.size:
        show = [f"{row.name}({', '.join(repr(x[i].item()) for x in xs)}) = {got[i].item()!r}, exact "
                f"{want[i].item()!r} ({err[i]:.2f} ulps)" for i in bad[:6]]
        pytest.fail(f"{where}: {bad.size} of {got.size} elements wrong (tolerance {tol} ulps):\n  "
                    + "\n  ".join(show))


def _op(row, dtype: str, n: int = N, name: str = "C"):
    ins = [te.placeholder((n,), dtype, name=f"X{k}") for k in range(row.arity)]
    C = te.compute((n,), lambda i: intrinsics.call(row.name, *[X[i] for X in ins]), name=name)
    return ins, C


def _cpu_schedule(row, dtype: str, n: int = N):
    """Two outputs: C scalar, V vectorized by 8 with a tail."""
    ins = [te.placeholder((n,), dtype, name=f"X{k}") for k in range(row.arity)]
    outs = [te.compute((n,), lambda i: intrinsics.call(row.name, *[X[i] for X in ins]), name=nm)
            for nm in ("C", "V")]
    s = te.create_schedule([o.op for o in outs])
    _, vi = s[outs[1]].split(outs[1].op.axis[0], factor=8)
    s[outs[1]].vectorize(vi)
    return s, ins, outs


def _same(got, want) -> bool:
    return np.array_equal(got, want, equal_nan=np.asarray(want).dtype.kind == "f")


# --- the table itself --------------------------------------------------------------------------

def test_every_intrinsic_is_native_or_decomposed_on_every_target():
    absent = {(row.name, t) for row in intrinsics.TABLE for t in TARGETS
              if not row.native_on(t) and row.expand is None}
    assert absent == ABSENT


def test_names_are_unique_and_purity_comes_from_the_table():
    names = [row.name for row in intrinsics.TABLE]
    assert len(names) == len(set(names))
    assert intrinsics.PURE_CALLS == {row.name for row in intrinsics.TABLE if row.pure}
    from tilecraft.ir import cse
    assert cse.PURE_CALLS is intrinsics.PURE_CALLS


@pytest.mark.parametrize("name", ["exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh",
                                  "sigmoid", "erf", "floor", "ceil", "round", "trunc", "sin", "cos"])
def test_te_functions_make_the_tables_calls(name):
    A = te.placeholder((4,), "float16", name="A")
    e = getattr(te, name)(A[0])
    assert isinstance(e, Call) and e.name == name and e.dtype == "float16"


@pytest.mark.parametrize("row", intrinsics.TABLE, ids=[r.name for r in intrinsics.TABLE])
def test_the_dtype_rule_is_enforced_with_a_message(row):
    bad = "float32" if "int32" in row.dtypes else "int32"
    I = te.placeholder((4,), bad, name="I")
    if row.arity == 1:
        with pytest.raises(DTypeError, match=rf"te\.{row.name} needs a .* argument, got `I\[0\]` of dtype {bad}; "
                                             rf"cast it first"):
            intrinsics.call(row.name, I[0])
    else:
        with pytest.raises(DTypeError, match=rf"te\.{row.name} needs (two|three) float arguments of one dtype, "
                                             rf"got int32(, int32)? and int32"):
            intrinsics.call(row.name, *[I[0]] * row.arity)
    with pytest.raises(DTypeError, match=rf"te\.{row.name} takes {row.arity} arguments?, got {row.arity + 1}"):
        intrinsics.call(row.name, *[I[0]] * (row.arity + 1))


def test_fma_refuses_mixed_dtypes_and_numbers_take_the_expressions_dtype():
    A = te.placeholder((4,), "float64", name="A")
    H = te.placeholder((4,), "float16", name="H")
    with pytest.raises(DTypeError, match=r"te.fma needs three float arguments of one dtype, got float64, "
                                         r"float16 and float64"):
        te.fma(A[0], H[0], A[1])
    assert te.fma(2.0, A[0], 1).dtype == "float64" and te.power(H[0], 2).args[1].dtype == "float16"


def test_legalize_errors_name_the_intrinsic_and_the_target():
    X = te.placeholder((4,), "float64", name="X")
    C = te.compute((4,), lambda i: Call("round_to_float32_odd", (X[i],), "float32"), name="C")
    f = tilecraft.lower(te.create_schedule(C.op), [X, C])
    with pytest.raises(LegalizeError, match=r"the intrinsic 'round_to_float32_odd' has no lowering for target "
                                            r"'cuda' and no decomposition \(in `round_to_float32_odd\(X\[i\]\)`\)"):
        legalize(f.body, "cuda")
    with pytest.raises(LegalizeError, match=r"no legalization rules for target 'opencl'; known targets: llvm, cuda"):
        legalize(f.body, "opencl")
    I = te.placeholder((4,), "int32", name="I")
    D = te.compute((4,), lambda i: Call("exp", (I[i],), "int32"), name="D")     # built by hand
    g = tilecraft.lower(te.create_schedule(D.op), [I, D])
    with pytest.raises(LegalizeError, match=r"the intrinsic 'exp' takes float16/float32/float64 arguments, got "
                                            r"int32 in `exp\(I\[i\]\)`"):
        legalize(g.body, "llvm")


def test_float32_references_round_the_float64_value_once(rng):
    # numpy's own float32 loops are up to ~3 ulps off (exp 2.4, log 3.2 measured on AVX-512):
    # the reference computes in float64 and rounds once, the same on every machine
    for name, (lo, hi) in (("exp", (-80, 80)), ("log", (1e-3, 1e4)), ("tanh", (-5, 5)), ("pow", (0.1, 4))):
        row = intrinsics.lookup(name)
        xs = [rng.uniform(lo, hi, 4096).astype("float32") for _ in range(row.arity)]
        ins, C = _op(row, "float32", 4096)
        with np.errstate(all="ignore"):
            want = row.reference(*[x.astype(np.float64) for x in xs]).astype(np.float32)
        np.testing.assert_array_equal(interp.evaluate(C, dict(zip(ins, xs))), want, err_msg=name)


def test_fma_reference_rounds_once_in_float32_and_float64(rng):
    # c close to -a*b: two roundings (a*b, then + c) lose what fma keeps
    for dtype in ("float32", "float64"):
        a, b = (rng.uniform(1, 2, 512).astype(dtype) for _ in range(2))
        c = -(a * b) * (1 + rng.uniform(-1e-3, 1e-3, 512)).astype(dtype)
        ins, C = _op(intrinsics.lookup("fma"), dtype, 512)
        got = interp.evaluate(C, dict(zip(ins, [a, b, c])))
        want = np.array([float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                         for x, y, z in zip(a, b, c)]).astype(dtype)
        np.testing.assert_array_equal(got, want, err_msg=dtype)


# --- legalize ------------------------------------------------------------------------------------

@pytest.mark.parametrize("row, dtype, target", [(r, d, t) for r, d in CASES for t in TARGETS if (r.name, t) not in ABSENT],
                         ids=[f"{r.name}-{d}-{t}" for r, d in CASES for t in TARGETS if (r.name, t) not in ABSENT])
def test_legalized_calls_are_native(row, dtype, target):
    s, ins, outs = _cpu_schedule(row, dtype)
    f = legalize_func(tilecraft.lower(s, ins + outs), target)
    assert f.attr("legalized_for") == target and legalize_func(f, target) is f
    assert legalize(f.body, target) is f.body                   # a second time changes nothing
    bad = []

    def visit(n):
        if isinstance(n, Call) and intrinsics.lookup(n.name):
            if not intrinsics.lookup(n.name).native_on(target) or n.args[0].dtype.startswith("float16"):
                bad.append(n)
        if isinstance(n, Cast) and target == "llvm" and n.dtype.startswith("float16") \
                and n.value.dtype.startswith("float64"):
            bad.append(n)
    post_order_visit(f.body, visit)
    assert not bad, f"left for {target}: {bad}"


def test_lower_with_a_target_legalizes_and_without_one_keeps_the_call():
    A = te.placeholder((16,), "float16", name="A")
    C = te.compute((16,), lambda i: te.sigmoid(A[i]), name="C")
    s = te.create_schedule(C.op)
    assert "sigmoid(A[i])" in str(tilecraft.lower(s, [A, C]))
    f = tilecraft.lower(s, [A, C], target="llvm")
    assert "sigmoid" not in str(f) and "exp(" in str(f) and f.attr("legalized_for") == "llvm"
    b, t = s[C].split(C.op.axis[0], factor=8)
    s[C].bind(b, te.thread_axis("blockIdx.x"))
    s[C].bind(t, te.thread_axis("threadIdx.x"))
    f = tilecraft.lower(s, [A, C], target="cuda")
    assert "sigmoid" not in str(f) and f.attr("legalized_for") == "cuda"


def test_functions_lowered_without_a_target_are_legalized_by_the_backend(rng):
    # TVM's flow: build(lower(s, args), target=...); the backend legalizes (once)
    from tilecraft.codegen.cuda import for_gpu, generate_cuda
    from tilecraft.codegen.cuda_emulate import emulate
    A = te.placeholder((100,), "float16", name="A")
    C = te.compute((100,), lambda i: te.sigmoid(A[i]) * te.rsqrt(A[i]), name="C")
    s = te.create_schedule(C.op)
    b, t = s[C].split(C.op.axis[0], factor=32)
    a = rng.uniform(0.1, 4, 100).astype("float16")
    want = intrinsics.evaluate("sigmoid", [a], "float16") * intrinsics.evaluate("rsqrt", [a], "float16")
    f = tilecraft.lower(s, [A, C], name="sig")
    assert f.attr("legalized_for") is None and "sigmoid(A" in str(f)
    c = poison(100, "float16")
    tilecraft.build(f, target="llvm")(a, c)
    np.testing.assert_array_equal(c, want)
    s[C].bind(b, te.thread_axis("blockIdx.x"))
    s[C].bind(t, te.thread_axis("threadIdx.x"))
    g = for_gpu(tilecraft.lower(s, [A, C]))
    assert g.attr("legalized_for") == "cuda" and "sigmoid" not in generate_cuda(g)
    c = poison(100, "float16")
    emulate(g, [a, c])
    np.testing.assert_array_equal(c, want)


def test_float64_to_float16_goes_through_round_to_odd_on_llvm_only(rng):
    A = te.placeholder((64,), "float64", name="A")
    C = te.compute((64,), lambda i: A[i].astype("float16"), name="C")
    f = tilecraft.lower(te.create_schedule(C.op), [A, C])
    assert "round_to_float32_odd" in str(legalize_func(f, "llvm"))
    assert "round_to_float32_odd" not in str(legalize_func(f, "cuda"))
    # the rounding it makes is numpy's one rounding, here in the lowered-IR interpreter
    h = (rng.standard_normal(64) * 100).astype(np.float16)
    mid = (h.astype(np.float64) + np.nextafter(h, np.float16(np.inf)).astype(np.float64)) / 2
    a = mid + rng.choice([-1.0, 0.0, 1.0], 64) * np.abs(mid) * 2.0 ** -40
    c = poison(64, "float16")
    interp_lowered.run(legalize_func(f, "llvm"), [a, c])
    np.testing.assert_array_equal(c, a.astype(np.float16))


# --- the consumers -----------------------------------------------------------------------------

@pytest.mark.parametrize("row, dtype", CASES, ids=IDS)
def test_reference_interpreter(row, dtype, rng):
    ins, C = _op(row, dtype)
    xs = _inputs(rng, row, dtype)
    got = interp.evaluate(C, dict(zip(ins, xs)))
    assert _same(got, intrinsics.evaluate(row.name, xs, C.dtype))
    _check(got, row, dtype, xs, "interpreter")


@pytest.mark.parametrize("row, dtype", CASES, ids=IDS)
def test_lowered_interpreter_before_and_after_legalize(row, dtype, rng):
    s, ins, outs = _cpu_schedule(row, dtype)
    xs = _inputs(rng, row, dtype)
    f = tilecraft.lower(s, ins + outs)
    rd = outs[0].dtype
    # (numpy's scalar and array loops may differ by an ulp: float64 pow; so ulps, not equality)
    for target in (None,) + TARGETS:
        if (row.name, target) in ABSENT:
            continue
        got = [poison(N, rd), poison(N, rd)]
        interp_lowered.run(f if target is None else legalize_func(f, target), xs + got)
        who = "lowered IR" + (f" legalized for {target}" if target else "")
        _check(got[0], row, dtype, xs, who)
        _check(got[1], row, dtype, xs, who + " (vectorized)")


@pytest.mark.parametrize("row, dtype", CASES, ids=IDS)
def test_llvm(row, dtype, rng):
    s, ins, outs = _cpu_schedule(row, dtype)
    xs = _inputs(rng, row, dtype)
    f = tilecraft.build(s, ins + outs, target="llvm")
    runs = []
    for variant in (0, 1):
        got = [poison(N, outs[0].dtype, variant) for _ in outs]
        f(*xs, *got)
        runs.append(got)
    for k, who in enumerate(("LLVM", "LLVM vectorized")):
        assert _same(runs[0][k], runs[1][k]), f"{who}: elements left unwritten"
        _check(runs[0][k], row, dtype, xs, who)


# --- CUDA: generated, emulated, compiled, run ---------------------------------------------------

CUDA_CASES = [(row, d) for row, d in CASES if (row.name, "cuda") not in ABSENT]
CUDA_IDS = [f"{row.name}-{d}" for row, d in CUDA_CASES]


def _gpu_schedule(row, dtype: str, n: int = N, name: str = ""):
    """C: one element per thread; V: 4-lane vector statements per thread, with a tail."""
    ins = [te.placeholder((n,), dtype, name=f"X{k}") for k in range(row.arity)]
    outs = [te.compute((n,), lambda i: intrinsics.call(row.name, *[X[i] for X in ins]), name=nm)
            for nm in ("C", "V")]
    s = te.create_schedule([o.op for o in outs])
    b, t = s[outs[0]].split(outs[0].op.axis[0], factor=64)
    s[outs[0]].bind(b, te.thread_axis("blockIdx.x"))
    s[outs[0]].bind(t, te.thread_axis("threadIdx.x"))
    o, v = s[outs[1]].split(outs[1].op.axis[0], factor=4)
    b, t = s[outs[1]].split(o, factor=32)
    s[outs[1]].bind(b, te.thread_axis("blockIdx.x"))
    s[outs[1]].bind(t, te.thread_axis("threadIdx.x"))
    s[outs[1]].vectorize(v)
    return tilecraft.lower(s, ins + outs, target="cuda", name=name or "f"), ins, outs


@pytest.mark.cuda
@pytest.mark.parametrize("row, dtype", CUDA_CASES, ids=CUDA_IDS)
def test_cuda_generated_and_emulated(row, dtype, rng):
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_emulate import emulate
    func, ins, outs = _gpu_schedule(row, dtype)
    src = generate_cuda(func)
    if row.cuda is not None:
        assert f"{row.cuda.function(dtype)}(" in src
    else:
        assert f"{row.name}(" not in src                        # decomposed by legalize
    xs = _inputs(rng, row, dtype)
    got = [poison(N, o.dtype) for o in outs]
    emulate(func, xs + got)
    _check(got[0], row, dtype, xs, "CUDA emulator")
    _check(got[1], row, dtype, xs, "CUDA emulator (vectorized)")


def _all_cuda_funcs():
    return [_gpu_schedule(row, d, name=f"{row.name}_{d}")[0] for row, d in CUDA_CASES]


@pytest.mark.cuda
@pytest.mark.slow
def test_cuda_every_intrinsic_compiles():
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
    src = generate_cuda(_all_cuda_funcs())
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated (and emulated) but not compiled")
    assert len(compile_cuda(src, "sm_90")) > 0


@pytest.mark.cuda
def test_cuda_every_intrinsic_on_a_gpu(rng):
    from tests.cuda.test_cuda_ops import gpu_available
    why = gpu_available()
    if why:
        pytest.skip(f"{why}: the intrinsics were emulated and compiled only")
    from tilecraft.runtime import cuda_ndarray
    dev = tilecraft.cuda(0)
    failures = []
    for func, (row, dtype) in zip(_all_cuda_funcs(), CUDA_CASES):
        mod = tilecraft.build(func, target="cuda")
        xs = _inputs(rng, row, dtype)
        outs = [cuda_ndarray.array(poison(N, row.result_dtype(dtype)), dev) for _ in range(2)]
        mod(*[cuda_ndarray.array(x, dev) for x in xs], *outs)
        for k, d in enumerate(outs):
            try:
                _check(d.numpy(), row, dtype, xs, "GPU" + (" (vectorized)" if k else ""))
            except pytest.fail.Exception as e:
                failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_pow_of_minus_infinity_follows_c_in_vector_loops():
    """numpy computes an array to the scalar power 0.5 as a square root (pow(-inf, 0.5) = nan);
    the table's reference (what the interpreters compute) gives C's values, as LLVM and CUDA
    code does, with scalar and array exponents alike."""
    import math
    ys = np.array([0.5, 3.0, -3.0, -0.5, 2.0, 0.0] * 4)
    for dtype in ("float32", "float64"):
        x = np.full(ys.shape, -np.inf, dtype)
        got = intrinsics.evaluate("pow", [x, ys.astype(dtype)], dtype)
        want = np.array([math.pow(-math.inf, y) for y in ys], dtype)
        assert _same(got, want), (dtype, got, want)
        for y in (0.5, 3.0, -0.5):
            got = intrinsics.evaluate("pow", [x, np.array(y, dtype)], dtype)
            assert _same(got, np.full(x.shape, math.pow(-math.inf, y), dtype)), (dtype, y, got)
