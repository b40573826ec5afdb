"""The program families of the GPU schedule fuzzer (``gpu_fuzz.py``).

Each family is a function ``rng -> Program``: it writes, as Python source, a TE declaration and a
random GPU schedule of it (``s``, ``args``), and, as numpy source, its float64 reference. Writing
source rather than calling the API directly makes every case its own reproducer: the text that
ran is the text a failure prints.

Families: ``elementwise`` (1-D/2-D, float and int dtypes, symbolic lengths, tails, vectors,
shared tiles, producer stages), ``stencil`` (windows over a haloed shared tile, zero padding
inlined; row windows padded by ``if_then_else`` with the columns vectorized), ``row_reduce``
(rows over blockIdx/threadIdx, the reduction over threadIdx.x with and without tails, or serial;
outputs global or local under compute_at; column reductions and reductions over two fused axes),
``rfactor`` (rfactor + cross-thread reduction, or the partials as their own kernel),
``softmax_layernorm`` (multi-kernel and single-kernel row softmax and layer norm),
``matmul_shared`` (cache_read shared + compute_at + cooperative fetch, vthread, cache_write
local, local caches, double buffering) and ``library`` (the hand schedules of
``tilecraft.topi.cuda_schedules`` at random sizes, non-divisible included), ``ragged`` (CSR
SpMV / SpMM through the sparse GPU schedules' knobs, ``gpu_fuzz_ragged.py``). A third of the
cross-thread reductions run over a number of threads that is not a power of two (rows of
threadIdx.x that start inside a warp, more than a warp per row).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Program:
    """One fuzz case before it runs.

    ``source`` defines ``s`` and ``args`` (the schedule and its argument tensors); ``reference``
    defines ``reference(*inputs, *scalars) -> [outputs]`` in float64 numpy; ``ranges`` gives the input
    values (``name -> (low, high)``); ``sizes`` the symbolic extents (``name -> int``).
    ``scalars`` the values of scalar arguments (``name -> number``; the reference gets them after
    the inputs). ``must_build``: a refusal is a failure (the library's schedules promise any
    size)."""
    source: str
    reference: str
    rtol: float = 1e-5
    atol: float = 1e-5
    ranges: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    must_build: bool = False
    scalars: dict = field(default_factory=dict)


def _i(rng, lo, hi) -> int:
    """An int in [lo, hi]."""
    return int(rng.integers(lo, hi + 1))


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _extent(rng, lo, hi, multiple=32) -> int:
    """A loop extent in [lo, hi]: a multiple of ``multiple`` about a third of the time (no tail),
    otherwise anything (tails)."""
    if rng.random() < 0.35 and hi >= multiple:
        return multiple * _i(rng, max(1, -(-lo // multiple)), hi // multiple)
    return _i(rng, lo, hi)


def _code(lines) -> str:
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# elementwise

_FLOAT_UNARY = [("te.exp({})", "np.exp({})"), ("te.sigmoid({})", "(1 / (1 + np.exp(-({}))))"),
                ("te.tanh({})", "np.tanh({})"), ("te.abs({})", "np.abs({})"),
                ("te.sqrt(te.abs({}) + 1.0)", "np.sqrt(np.abs({}) + 1.0)")]
_BINARY = [("({} + {})", "({} + {})"), ("({} - {})", "({} - {})"), ("({} * {})", "({} * {})"),
           ("te.max({}, {})", "np.maximum({}, {})"), ("te.min({}, {})", "np.minimum({}, {})")]


def _float_expr(rng, leaves, depth, branches=True):
    """A float expression over ``leaves`` (TE text, numpy text); ``branches``: may compare values
    (not in float16, whose rounding flips comparisons the float64 reference makes)."""
    if depth == 0 or rng.random() < 0.25:
        return leaves[int(rng.integers(len(leaves)))]
    what = rng.random()
    if what < 0.3:
        t, n = _pick(rng, _FLOAT_UNARY)
        a = leaves[int(rng.integers(len(leaves)))]     # exp of a leaf only: no overflow
        return t.format(a[0]), n.format(a[1])
    a, b = _float_expr(rng, leaves, depth - 1, branches), _float_expr(rng, leaves, depth - 1, branches)
    if what < 0.45 and branches:
        return (f"te.if_then_else({a[0]} > {b[0]}, {a[0]}, {b[0]} * 0.5)",
                f"np.where({a[1]} > {b[1]}, {a[1]}, {b[1]} * 0.5)")
    t, n = _pick(rng, _BINARY)
    return t.format(a[0], b[0]), n.format(a[1], b[1])


def _int_expr(rng, leaves, depth, small: bool):
    ops = _BINARY if not small else [_BINARY[0], _BINARY[3], _BINARY[4]]
    if depth == 0 or rng.random() < 0.25:
        return leaves[int(rng.integers(len(leaves)))]
    if not small and rng.random() < 0.2:
        a = _int_expr(rng, leaves, depth - 1, small)
        d = _pick(rng, [3, 4, 7])
        f = _pick(rng, [("floordiv", "floor_divide"), ("floormod", "mod")])
        return f"te.{f[0]}({a[0]}, {d})", f"np.{f[1]}({a[1]}, {d})"
    a, b = _int_expr(rng, leaves, depth - 1, small), _int_expr(rng, leaves, depth - 1, small)
    t, n = _pick(rng, ops)
    return t.format(a[0], b[0]), n.format(a[1], b[1])


def _threads(rng, hi=256):
    return _pick(rng, [t for t in (1, 4, 16, 32, 32, 64, 64, 96, 128, 256) if t <= hi])


# threads of a cross-thread reduction that are not a power of two: rows of threadIdx.x that start
# and end inside a warp, a partial last warp, more than a warp per row
_ODD_THREADS = (3, 6, 9, 10, 12, 24, 40, 48, 96, 100, 104, 1000)


def _reduce_threads(rng, usual, odd=_ODD_THREADS, p_odd=0.35):
    """Threads for a cross-thread reduction: one of ``usual``, or (``p_odd`` of the time) a
    number that is not a power of two."""
    return _pick(rng, list(odd)) if rng.random() < p_odd else _pick(rng, list(usual))


def _bind_1d(rng, stage: str, ax: str, lines, prefix="x"):
    """Lines that map the loop ``ax`` of ``stage`` onto blocks and threads (maybe vectors, maybe a
    serial loop per thread)."""
    how = rng.random()
    t = _threads(rng)
    if how < 0.4:
        lines += [f"{prefix}b, {prefix}t = s[{stage}].split({ax}, factor={t})"]
    elif how < 0.7:
        v = _pick(rng, [2, 4])
        lines += [f"{prefix}o, {prefix}v = s[{stage}].split({ax}, factor={v})",
                  f"{prefix}b, {prefix}t = s[{stage}].split({prefix}o, factor={t})",
                  f"s[{stage}].vectorize({prefix}v)"]
    else:
        nb = _i(rng, 1, 6)
        lines += [f"{prefix}b, {prefix}r = s[{stage}].split({ax}, nparts={nb})",
                  f"{prefix}t, {prefix}s = s[{stage}].split({prefix}r, nparts={t})"]
        if rng.random() < 0.3:
            lines += [f"s[{stage}].unroll({prefix}s)"]
    lines += [f"s[{stage}].bind({prefix}b, te.thread_axis('blockIdx.x'))",
              f"s[{stage}].bind({prefix}t, te.thread_axis('threadIdx.x'))"]
    return t


def gen_elementwise(rng) -> Program:
    dtype = _pick(rng, ["float32", "float32", "float32", "float16", "float64", "int32", "int64", "int8", "uint8"])
    is_float = dtype.startswith("float")
    two_d = rng.random() < 0.55
    if two_d:
        rows, cols = _extent(rng, 1, 40, 8), _extent(rng, 1, 160, 32)
        shape, idx = (rows, cols), "i, j"
    else:
        shape, idx = (_extent(rng, 1, 3000, 64),), "i"
    sizes, symbolic = {}, not two_d and rng.random() < 0.3
    if symbolic:                                        # a length known only at run time
        sizes = {"n": shape[0]}
    transposed = two_d and rng.random() < 0.25         # B is stored transposed
    # or has more rows than C reads (a shared tile of B then needs no guard where C does)
    tall = two_d and not transposed and rng.random() < 0.2
    b_shape = (shape[1], shape[0]) if transposed else (shape[0] + 32, shape[1]) if tall else shape
    b_idx, b_np = ("j, i", "B.T") if transposed else (idx, f"B[:{shape[0]}]" if tall else "B")
    producer = rng.random() < 0.3                       # C reads P = f(A), not A
    # A may come in another dtype, converted in the expression
    a_dtype = _pick(rng, ["float16", "int32", "float32"]) if dtype in ("float32", "float64") and rng.random() < 0.25 \
        else dtype
    a_read = f"A[{idx}]" if a_dtype == dtype else f"A[{idx}].astype({dtype!r})"
    a_leaf = ("P[%s]" % idx, "P") if producer else (a_read, "A")
    leaves = [a_leaf, (f"B[{b_idx}]", b_np)]
    if is_float:
        leaves.append((f"te.const(1.5, {dtype!r})", "1.5"))
        expr = _float_expr(rng, leaves, 1 if dtype == "float16" else 2, branches=dtype != "float16")
    else:
        small = dtype in ("int8", "uint8")
        leaves.append((f"te.const(3, {dtype!r})", "3"))
        expr = _int_expr(rng, leaves, 2, small)
    for leaf in leaves[:2]:                             # every input is read
        if leaf[0] not in expr[0]:
            expr = (f"te.max({expr[0]}, {leaf[0]})", f"np.maximum({expr[1]}, {leaf[1]})")
    scalars = {}
    if dtype in ("float16", "float32", "float64", "int32") and rng.random() < 0.25:     # a scalar argument
        scalars = {"alpha": float(_pick(rng, [-1.75, 0.5, 2.25])) if is_float else _pick(rng, [-3, 2, 5])}
        expr = (f"({expr[0]}) * alpha", f"({expr[1]}) * alpha")
    lines = ["n = te.var('n')"] if symbolic else []
    if symbolic:
        shape = b_shape = "(n,)"
    if scalars:
        lines += [f"alpha = te.var('alpha', {dtype!r})"]
    lines += [f"A = te.placeholder({shape}, {a_dtype!r}, name='A')",
              f"B = te.placeholder({b_shape}, {dtype!r}, name='B')"]
    ref = ["def reference(A, B, alpha=None):"]
    if producer:
        p_te, p_np = ((f"te.exp({a_read}) * 0.5", "np.exp(A) * 0.5") if is_float else
                      (f"{a_read} + {a_read}", "A + A"))
        lines += [f"P = te.compute({shape}, lambda {idx}: {p_te}, name='P')"]
        ref += [f"    P = {p_np}"]
    lines += [f"C = te.compute({shape}, lambda {idx}: {expr[0]}, name='C')",
              "s = te.create_schedule(C.op)"]
    ref += [f"    return [{expr[1]}]"]
    if two_d:
        lines += ["i, j = s[C].op.axis"]
        how = rng.random()
        if how < 0.3:
            lines += ["f = s[C].fuse(i, j)"]
            _bind_1d(rng, "C", "f", lines)
            thread_ax, tshape = "xt", None
        elif how < 0.55:
            tag = _pick(rng, ["blockIdx.y", "blockIdx.z"])
            t = _threads(rng)
            lines += [f"s[C].bind(i, te.thread_axis({tag!r}))",
                      f"jb, jt = s[C].split(j, factor={t})",
                      "s[C].bind(jb, te.thread_axis('blockIdx.x'))",
                      "s[C].bind(jt, te.thread_axis('threadIdx.x'))"]
            thread_ax, tshape = "jt", (1, t)
        else:
            ty, tx = _pick(rng, [1, 2, 4, 8]), _pick(rng, [4, 8, 16, 32])
            serial = rng.random() < 0.4
            if serial:
                fy, fx = ty * _i(rng, 1, 3), tx * _i(rng, 1, 3)
                lines += [f"io, jo, ii, ji = s[C].tile(i, j, {fy}, {fx})",
                          f"ti, ii = s[C].split(ii, nparts={ty})",
                          f"tj, ji = s[C].split(ji, nparts={tx})",
                          "s[C].reorder(io, jo, ti, tj, ii, ji)"]
                if rng.random() < 0.4:
                    lines += ["s[C].unroll(ji)"]
            else:
                lines += [f"io, jo, ti, tj = s[C].tile(i, j, {ty}, {tx})"]
            lines += ["s[C].bind(io, te.thread_axis('blockIdx.y'))",
                      "s[C].bind(jo, te.thread_axis('blockIdx.x'))",
                      "s[C].bind(ti, te.thread_axis('threadIdx.y'))",
                      "s[C].bind(tj, te.thread_axis('threadIdx.x'))"]
            thread_ax, tshape = "tj", (ty, tx)
            if rng.random() < 0.4:                      # B through a shared tile, fetched by all threads
                # per block, or per step of the serial row loop inside the thread loops (whose
                # row tail depends on threadIdx.y: the loop must not be split per thread)
                at = "ii" if serial and rng.random() < 0.5 else "jo"
                lines += ["BS = s.cache_read(B, 'shared', [C])",
                          f"s[BS].compute_at(s[C], {at})",
                          "bf = s[BS].fuse(*s[BS].op.axis)",
                          f"bf, bx_ = s[BS].split(bf, factor={tx})",
                          f"bf, by_ = s[BS].split(bf, factor={ty})",
                          "s[BS].bind(bx_, te.thread_axis('threadIdx.x'))",
                          "s[BS].bind(by_, te.thread_axis('threadIdx.y'))"]
                if rng.random() < 0.4:
                    lines += [f"s[BS].storage_align(s[BS].op.axis[0], {_pick(rng, [8, 16, 32])}, 1)"]
    else:
        lines += ["i, = s[C].op.axis"]
        _bind_1d(rng, "C", "i", lines)
        thread_ax, tshape = "xt", None
    if producer:
        where = rng.random()
        if where < 0.35:
            lines += ["s[P].compute_inline()"]
        elif where < 0.65:
            lines += [f"s[P].compute_at(s[C], {thread_ax})"]
        else:                                           # its own kernel
            lines += ["pf = s[P].fuse(*s[P].op.axis)" if two_d else "pf, = s[P].op.axis"]
            _bind_1d(rng, "P", "pf", lines, prefix="p")
    small_int = dtype in ("int8", "uint8")
    rng_a = (-2.0, 2.0) if is_float else ((0, 30) if dtype == "uint8" else (-20, 20) if small_int else (-100, 100))
    tol = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}.get(dtype, 0.0)
    if a_dtype != dtype:
        tol = max(tol, 1e-3) if dtype != "float64" else 1e-3 if a_dtype == "float16" else tol
    if scalars:                                         # anywhere among the arguments
        args = ["A", "B", "C"]
        args.insert(_i(rng, 0, 3), "alpha")
        lines += [f"args = [{', '.join(args)}]"]
    else:
        lines += ["args = [A, B, C]"]
    a_range = rng_a if a_dtype == dtype else ((-3, 3) if a_dtype == "int32" else (-2.0, 2.0))
    return Program(_code(lines), _code(ref), rtol=tol, atol=tol * 10, ranges={"A": a_range, "B": rng_a}, sizes=sizes,
                   scalars=scalars)


# ------------------------------------------------------------------------------------------------
# stencils: halos in shared tiles, padding by if_then_else, small serial windows

def gen_stencil(rng) -> Program:
    if rng.random() < 0.3:
        return _gen_column_stencil(rng)
    rows, cols = _extent(rng, 1, 30, 8), _extent(rng, 1, 100, 32)
    r = _pick(rng, [1, 2])                               # window radius
    w = 2 * r + 1
    padded = rng.random() < 0.5                          # zero padding inlined (conv style), same size
    lines = [f"A = te.placeholder(({rows}, {cols}), name='A')" if padded else
             f"A = te.placeholder(({rows + 2 * r}, {cols + 2 * r}), name='A')",
             f"W = te.placeholder(({w}, {w}), name='W')"]
    ref = ["def reference(A, W):"]
    if padded:
        lines += [f"P = te.compute(({rows + 2 * r}, {cols + 2 * r}), lambda y, x: te.if_then_else("
                  f"te.all(y >= {r}, y < {rows + r}, x >= {r}, x < {cols + r}), A[y - {r}, x - {r}], 0.0), name='P')"]
        ref += [f"    P = np.pad(A, {r})"]
        src = "P"
    else:
        ref += ["    P = A"]
        src = "A"
    lines += [f"ry, rx = te.reduce_axis((0, {w}), 'ry'), te.reduce_axis((0, {w}), 'rx')",
              f"C = te.compute(({rows}, {cols}), lambda i, j: te.sum({src}[i + ry, j + rx] * W[ry, rx], "
              f"axis=[ry, rx]), name='C')",
              "s = te.create_schedule(C.op)"]
    ref += ["    out = np.zeros((%d, %d))" % (rows, cols),
            f"    for dy in range({w}):",
            f"        for dx in range({w}):",
            f"            out += P[dy:dy + {rows}, dx:dx + {cols}] * W[dy, dx]",
            "    return [out]"]
    if padded:
        lines += ["s[P].compute_inline()"]
    ty, tx = _pick(rng, [1, 2, 4, 8]), _pick(rng, [4, 8, 16, 32])
    lines += ["i, j = s[C].op.axis",
              f"io, jo, ti, tj = s[C].tile(i, j, {ty}, {tx})",
              "s[C].bind(io, te.thread_axis('blockIdx.y'))",
              "s[C].bind(jo, te.thread_axis('blockIdx.x'))",
              "s[C].bind(ti, te.thread_axis('threadIdx.y'))",
              "s[C].bind(tj, te.thread_axis('threadIdx.x'))"]
    if rng.random() < 0.5:
        lines += ["ry, rx = s[C].op.reduce_axis", "s[C].unroll(rx)"]
    if rng.random() < 0.7:                                 # the tile and its halo in shared memory
        lines += [f"AS = s.cache_read({src}, 'shared', [C])",
                  "s[AS].compute_at(s[C], jo)",
                  "f = s[AS].fuse(*s[AS].op.axis)",
                  f"f, t0 = s[AS].split(f, factor={tx})",
                  f"f, t1 = s[AS].split(f, factor={ty})",
                  "s[AS].bind(t0, te.thread_axis('threadIdx.x'))",
                  "s[AS].bind(t1, te.thread_axis('threadIdx.y'))"]
        if rng.random() < 0.3:
            lines += [f"s[AS].storage_align(s[AS].op.axis[0], {_pick(rng, [4, 8, 16])}, 1)"]
    if rng.random() < 0.4:                                 # the weights too, by one thread row
        lines += ["WS = s.cache_read(W, 'shared', [C])",
                  "s[WS].compute_at(s[C], jo)",
                  "wf = s[WS].fuse(*s[WS].op.axis)",
                  f"wf, wt = s[WS].split(wf, factor={tx})",
                  "s[WS].bind(wt, te.thread_axis('threadIdx.x'))"]
    lines += ["args = [A, W, C]"]
    return Program(_code(lines), _code(ref), rtol=1e-5, atol=1e-5 * w * w,
                   ranges={"A": (-1.0, 1.0), "W": (-1.0, 1.0)})


def _gen_column_stencil(rng) -> Program:
    """A window over rows with zero padding by ``te.if_then_else`` on the row, the same for every
    column, and the columns vectorized: vector loads under a lazy select's guard (the CUDA C may
    load them widely only where the guard holds)."""
    dtype = _pick(rng, ["float32", "float32", "float16"])
    v = _pick(rng, [2, 4, 4])
    rows = _extent(rng, 1, 24, 8)
    cols = v * _i(rng, 1, 40) if rng.random() < 0.8 else _i(rng, 1, 100)     # rows of whole vectors, mostly
    r = _pick(rng, [1, 2])
    ws = [round(float(w), 2) for w in rng.uniform(-1, 1, 2 * r + 1)]
    terms, ref_terms = [], []
    for d, w in zip(range(-r, r + 1), ws):
        if d == 0:
            terms.append(f"A[i, j] * {w}")
        else:
            cond = f"i + {d} < {rows}" if d > 0 else f"i - {-d} >= 0"
            terms.append(f"te.if_then_else({cond}, A[i + {d}, j], te.const(0, {dtype!r})) * {w}")
        ref_terms.append(f"P[{r + d}:{r + d + rows}] * {w}")
    lines = [f"A = te.placeholder(({rows}, {cols}), {dtype!r}, name='A')",
             f"C = te.compute(({rows}, {cols}), lambda i, j: {' + '.join(terms)}, name='C')",
             "s = te.create_schedule(C.op)",
             "i, j = s[C].op.axis",
             f"jo, jv = s[C].split(j, factor={v})"]
    t = _pick(rng, [1, 4, 8, 32])
    if rng.random() < 0.5:                             # a row per block
        lines += [f"jb, jt = s[C].split(jo, factor={t})",
                  "s[C].bind(i, te.thread_axis('blockIdx.x'))",
                  "s[C].bind(jb, te.thread_axis('blockIdx.y'))"]
    else:                                              # several rows per block, over threadIdx.y
        ty = _pick(rng, [2, 4])
        lines += [f"ib, iy = s[C].split(i, factor={ty})",
                  f"jb, jt = s[C].split(jo, factor={t})",
                  "s[C].reorder(ib, jb, iy, jt, jv)",
                  "s[C].bind(ib, te.thread_axis('blockIdx.x'))",
                  "s[C].bind(jb, te.thread_axis('blockIdx.y'))",
                  "s[C].bind(iy, te.thread_axis('threadIdx.y'))"]
    lines += ["s[C].bind(jt, te.thread_axis('threadIdx.x'))",
              "s[C].vectorize(jv)",
              "args = [A, C]"]
    ref = ["def reference(A):",
           f"    P = np.pad(A.astype(np.float64), (({r}, {r}), (0, 0)))",
           f"    return [{' + '.join(ref_terms)}]"]
    tol = 1e-2 if dtype == "float16" else 1e-5
    return Program(_code(lines), _code(ref), rtol=tol, atol=tol, ranges={"A": (-1.0, 1.0)})


# ------------------------------------------------------------------------------------------------
# reductions over rows

_ELEMS = [("A[i, {k}]", "A"), ("A[i, {k}] * A[i, {k}]", "A * A"), ("A[i, {k}] * 2.0 + 1.0", "A * 2.0 + 1.0"),
          ("te.exp(A[i, {k}])", "np.exp(A)")]
_REDUCERS = {"sum": "np.sum", "max": "np.max", "min": "np.min", "prod": "np.prod"}


def _schedule_reduction(rng, R: str, rows_ax: str, k: str, lines, threads=None, prefix="r") -> str:
    """Lines that bind the root reduction stage ``R`` (rows ``rows_ax``, reduction ``k``).
    Returns how: ``cross`` (k over threadIdx.x), ``serial`` (a row per thread)."""
    how = rng.random()
    t = threads or _reduce_threads(rng, [16, 32, 32, 64, 128, 128, 256])
    if how < 0.45:
        lines += [f"s[{R}].bind({rows_ax}, te.thread_axis('blockIdx.x'))",
                  f"{prefix}ko, {prefix}ki = s[{R}].split({k}, factor={t})",
                  f"s[{R}].bind({prefix}ki, te.thread_axis('threadIdx.x'))"]
        return "cross"
    if how < 0.6:
        lines += [f"s[{R}].bind({rows_ax}, te.thread_axis('blockIdx.x'))",
                  f"{prefix}ko, {prefix}ki = s[{R}].split({k}, nparts={t})",
                  f"s[{R}].bind({prefix}ko, te.thread_axis('threadIdx.x'))"]
        return "cross"
    if how < 0.8:
        ty = _pick(rng, [1, 2, 3, 4, 5])
        tx = _reduce_threads(rng, [16, 32, 64], (3, 6, 10, 24, 48, 100))
        lines += [f"{prefix}b, {prefix}y = s[{R}].split({rows_ax}, factor={ty})",
                  f"s[{R}].bind({prefix}b, te.thread_axis('blockIdx.x'))",
                  f"s[{R}].bind({prefix}y, te.thread_axis('threadIdx.y'))",
                  f"{prefix}ko, {prefix}ki = s[{R}].split({k}, factor={tx})",
                  f"s[{R}].bind({prefix}ki, te.thread_axis('threadIdx.x'))"]
        return "cross"
    t = _pick(rng, [1, 2, 4, 32])
    lines += [f"{prefix}b, {prefix}t = s[{R}].split({rows_ax}, factor={t})",
              f"s[{R}].bind({prefix}b, te.thread_axis('blockIdx.x'))",
              f"s[{R}].bind({prefix}t, te.thread_axis('threadIdx.x'))"]
    if rng.random() < 0.4:
        lines += [f"{prefix}ko, {prefix}ki = s[{R}].split({k}, factor={_pick(rng, [2, 4, 7])})",
                  f"s[{R}].unroll({prefix}ki)"]
    return "serial"


def _gen_other_reduce(rng) -> Program:
    """Reductions over columns (threads along the kept axis) and over two axes at once."""
    rows, cols = _extent(rng, 1, 200, 16), _extent(rng, 1, 300, 32)
    if rng.random() < 0.5:                              # B[j] = sum_i A[i, j]
        lines = [f"A = te.placeholder(({rows}, {cols}), name='A')",
                 f"r = te.reduce_axis((0, {rows}), 'r')",
                 f"B = te.compute(({cols},), lambda j: te.sum(A[r, j], axis=r), name='B')",
                 "s = te.create_schedule(B.op)",
                 f"jb, jt = s[B].split(B.op.axis[0], factor={_pick(rng, [16, 32, 64, 128])})",
                 "s[B].bind(jb, te.thread_axis('blockIdx.x'))",
                 "s[B].bind(jt, te.thread_axis('threadIdx.x'))"]
        if rng.random() < 0.4:
            lines += [f"ro, ri = s[B].split(r, factor={_pick(rng, [2, 4, 8])})", "s[B].unroll(ri)"]
        ref = ["def reference(A):", "    return [A.sum(0)]"]
        n = rows
    else:                                               # B[i] = sum_{p, q} A[i, p, q]
        p, q = _i(rng, 1, 24), _i(rng, 1, 24)
        rows = _i(rng, 1, 6)
        lines = [f"A = te.placeholder(({rows}, {p}, {q}), name='A')",
                 f"rp, rq = te.reduce_axis((0, {p}), 'rp'), te.reduce_axis((0, {q}), 'rq')",
                 "B = te.compute((%d,), lambda i: te.sum(A[i, rp, rq], axis=[rp, rq]), name='B')" % rows,
                 "s = te.create_schedule(B.op)",
                 "s[B].bind(B.op.axis[0], te.thread_axis('blockIdx.x'))",
                 "rf = s[B].fuse(rp, rq)",
                 f"ro, rt = s[B].split(rf, factor={_reduce_threads(rng, [16, 32, 64, 128])})",
                 "s[B].bind(rt, te.thread_axis('threadIdx.x'))"]
        ref = ["def reference(A):", "    return [A.sum((1, 2))]"]
        n = p * q
    lines += ["args = [A, B]"]
    return Program(_code(lines), _code(ref), rtol=1e-5, atol=4e-6 * n, ranges={"A": (-1.0, 1.0)})


def gen_row_reduce(rng) -> Program:
    if rng.random() < 0.2:
        return _gen_other_reduce(rng)
    red = _pick(rng, ["sum", "sum", "max", "min"])
    dtype = _pick(rng, ["float32", "float32", "float64"] + (["int32"] if red != "prod" else [])
                  + (["float16"] if red in ("max", "min") else []))
    rows, cols = _i(rng, 1, 9), _extent(rng, 1, 1100, 64)
    elems = _ELEMS if dtype.startswith("float") and red != "prod" else _ELEMS[:1]
    e_te, e_np = _pick(rng, elems)
    init, init_np = "", ""
    if rng.random() < 0.25:                             # a starting value (TVM's init=)
        v = _pick(rng, [0.5, -0.75, 3.0]) if dtype.startswith("float") else _pick(rng, [7, -20])
        init = f", init=te.const({v}, {dtype!r})"
        init_np = {"sum": f" + {v}", "max": f", {v})", "min": f", {v})"}[red]
    lines = [f"A = te.placeholder(({rows}, {cols}), {dtype!r}, name='A')",
             f"k = te.reduce_axis((0, {cols}), 'k')",
             f"B = te.compute(({rows},), lambda i: te.{red}({e_te.format(k='k')}, axis=k{init}), name='B')"]
    b_np = f"{_REDUCERS[red]}({e_np}, axis=1)"
    if init and red != "sum":
        b_np = f"np.{'maximum' if red == 'max' else 'minimum'}({b_np}{init_np}"
    else:
        b_np += init_np
    ref = ["def reference(A):", f"    B = {b_np}"]
    consumer = rng.random()
    if consumer < 0.45:                                 # B is the output
        lines += ["s = te.create_schedule(B.op)"]
        _schedule_reduction(rng, "B", "B.op.axis[0]", "B.op.reduce_axis[0]", lines)
        ref += ["    return [B]"]
        lines += ["args = [A, B]"]
    elif consumer < 0.55:                               # under a consumer bound to blocks only:
        lines += [f"C = te.compute(({rows},), lambda i: B[i] * 2 + A[i, 0], name='C')",   # every thread stores C
                  "s = te.create_schedule(C.op)",
                  "s[C].bind(C.op.axis[0], te.thread_axis('blockIdx.x'))",
                  "s[B].compute_at(s[C], C.op.axis[0])",
                  f"ko, ki = s[B].split(B.op.reduce_axis[0], factor={_reduce_threads(rng, [32, 64, 128])})",
                  "s[B].bind(ki, te.thread_axis('threadIdx.x'))"]
        ref += ["    return [B * 2 + A[:, 0]]"]
        lines += ["args = [A, C]"]
    elif consumer < 0.8:                                # B local, under a softmax-like consumer
        t = _reduce_threads(rng, [32, 64, 128, 256])
        lines += [f"C = te.compute(({rows}, {cols}), lambda i, j: A[i, j] - B[i], name='C')",
                  "s = te.create_schedule(C.op)",
                  "i, j = s[C].op.axis",
                  "s[C].bind(i, te.thread_axis('blockIdx.x'))",
                  f"jo, jt = s[C].split(j, factor={t})",
                  "s[C].bind(jt, te.thread_axis('threadIdx.x'))"]
        if rng.random() < 0.7:
            lines += ["s[B].set_scope('local')"]
        lines += ["s[B].compute_at(s[C], i)"]
        how = _pick(rng, ["factor", "nparts"])
        lines += [f"ko, ki = s[B].split(B.op.reduce_axis[0], {how}={t})",
                  f"s[B].bind({'ki' if how == 'factor' else 'ko'}, te.thread_axis('threadIdx.x'))"]
        ref += ["    return [A - B[:, None]]"]
        lines += ["args = [A, C]"]
    else:                                               # B computed per thread of a row-wise consumer
        t = _pick(rng, [1, 2, 4, 32])
        lines += [f"C = te.compute(({rows},), lambda i: B[i] * 2 + A[i, 0], name='C')",
                  "s = te.create_schedule(C.op)",
                  f"cb, ct = s[C].split(C.op.axis[0], factor={t})",
                  "s[C].bind(cb, te.thread_axis('blockIdx.x'))",
                  "s[C].bind(ct, te.thread_axis('threadIdx.x'))",
                  "s[B].compute_at(s[C], ct)"]
        ref += ["    return [B * 2 + A[:, 0]]"]
        lines += ["args = [A, C]"]
    ranges = {"A": (0.9, 1.1) if red == "prod" else (-1.0, 1.0) if dtype.startswith("float") else (-50, 50)}
    if dtype.startswith("float") and red != "prod" and rng.random() < 0.5:
        ranges["A"] = (0.25, 1.25)                     # all positive: a lost tail term shows
    if dtype == "int32":
        return Program(_code(lines), _code(ref), rtol=0, atol=0, ranges=ranges)
    if dtype == "float16":                               # squares and differences round in float16
        return Program(_code(lines), _code(ref), rtol=2e-3, atol=2e-3, ranges=ranges)
    return Program(_code(lines), _code(ref), rtol=1e-5 if dtype == "float32" else 1e-10,
                   atol=(1e-6 if dtype == "float32" else 1e-12) * cols * 4, ranges=ranges)


def gen_rfactor(rng) -> Program:
    rows, cols = _i(rng, 1, 40), _extent(rng, 1, 700, 32)
    t = _reduce_threads(rng, [4, 8, 16, 32, 64], (3, 6, 9, 10, 12, 24, 48, 104))
    lines = [f"A = te.placeholder(({rows}, {cols}), name='A')",
             f"k = te.reduce_axis((0, {cols}), 'k')",
             f"B = te.compute(({rows},), lambda i: te.sum(A[i, k], axis=k), name='B')",
             "s = te.create_schedule(B.op)"]
    how = _pick(rng, ["factor", "nparts"])
    inner = rng.random() < 0.75                          # factor out the thread-sized part
    fa = _pick(rng, [0, 1])
    lines += [f"ko, ki = s[B].split(B.op.reduce_axis[0], {how}={t})"]
    lines += [f"BF = s.rfactor(B, {'ki' if (how == 'factor') == inner else 'ko'}, factor_axis={fa})"]
    variant = rng.random()
    if variant < 0.7:                                    # the partials under B's thread-bound axis
        per_block = _pick(rng, [1, 2, 3, 4, 5, 8])
        if per_block > 1:
            lines += [f"xo, xi = s[B].split(s[B].op.axis[0], factor={per_block})",
                      "s[B].bind(xo, te.thread_axis('blockIdx.x'))",
                      "s[B].bind(xi, te.thread_axis('threadIdx.y'))"]
        else:
            lines += ["s[B].bind(s[B].op.axis[0], te.thread_axis('blockIdx.x'))"]
        lines += ["s[B].bind(s[B].op.reduce_axis[0], te.thread_axis('threadIdx.x'))",
                  "s[BF].compute_at(s[B], s[B].op.reduce_axis[0])"]
    else:                                                # the partials as their own kernel
        lines += ["bff = s[BF].fuse(*s[BF].op.axis)",
                  f"bfb, bft = s[BF].split(bff, factor={_pick(rng, [32, 64, 128])})",
                  "s[BF].bind(bfb, te.thread_axis('blockIdx.x'))",
                  "s[BF].bind(bft, te.thread_axis('threadIdx.x'))",
                  f"bb, bt = s[B].split(s[B].op.axis[0], factor={_pick(rng, [1, 8, 32])})",
                  "s[B].bind(bb, te.thread_axis('blockIdx.x'))",
                  "s[B].bind(bt, te.thread_axis('threadIdx.x'))"]
    lines += ["args = [A, B]"]
    ref = ["def reference(A):", "    return [A.sum(axis=1)]"]
    return Program(_code(lines), _code(ref), rtol=1e-5, atol=4e-6 * cols, ranges={"A": (-1.0, 1.0)})


# ------------------------------------------------------------------------------------------------
# softmax and layer norm, as several kernels or one

def _schedule_rowwise(rng, Y: str, lines, threads: int, rows_per_block: int = 1):
    """Y[i, j]: a row per block (or ``rows_per_block`` rows over threadIdx.y), columns over
    ``threads`` threads (maybe vectorized). The loop of one row is ``yi``."""
    lines += [f"yi, yj = s[{Y}].op.axis"]
    if rows_per_block > 1:
        lines += [f"yb, yi = s[{Y}].split(yi, factor={rows_per_block})",
                  f"s[{Y}].bind(yb, te.thread_axis('blockIdx.x'))",
                  f"s[{Y}].bind(yi, te.thread_axis('threadIdx.y'))"]
    else:
        lines += [f"s[{Y}].bind(yi, te.thread_axis('blockIdx.x'))"]
    if rng.random() < 0.3:
        v = _pick(rng, [2, 4])
        lines += [f"yj, yv = s[{Y}].split(yj, factor={v})", f"s[{Y}].vectorize(yv)"]
    lines += [f"yo, yt = s[{Y}].split(yj, factor={threads})",
              f"s[{Y}].bind(yt, te.thread_axis('threadIdx.x'))"]


def gen_softmax_layernorm(rng) -> Program:
    rows, cols = _i(rng, 1, 6), _extent(rng, 1, 1100, 64)
    softmax = rng.random() < 0.5
    if softmax:
        stages = ["Mx", "Sm"]
        lines = [f"X = te.placeholder(({rows}, {cols}), name='X')",
                 f"k1, k2 = te.reduce_axis((0, {cols}), 'k1'), te.reduce_axis((0, {cols}), 'k2')",
                 f"Mx = te.compute(({rows},), lambda i: te.max(X[i, k1], axis=k1), name='Mx')",
                 f"Sm = te.compute(({rows},), lambda i: te.sum(te.exp(X[i, k2] - Mx[i]), axis=k2), name='Sm')",
                 f"Y = te.compute(({rows}, {cols}), lambda i, j: te.exp(X[i, j] - Mx[i]) / Sm[i], name='Y')",
                 "s = te.create_schedule(Y.op)"]
        ref = ["def reference(X):", "    e = np.exp(X - X.max(1, keepdims=True))",
               "    return [e / e.sum(1, keepdims=True)]"]
        ranges, tol = {"X": (-3.0, 3.0)}, (1e-5, 1e-6)
    else:
        stages = ["Mean", "Var"]
        lines = [f"X = te.placeholder(({rows}, {cols}), name='X')",
                 f"G = te.placeholder(({cols},), name='G')",
                 f"Bt = te.placeholder(({cols},), name='Bt')",
                 f"k1, k2 = te.reduce_axis((0, {cols}), 'k1'), te.reduce_axis((0, {cols}), 'k2')",
                 f"Mean = te.compute(({rows},), lambda i: te.sum(X[i, k1] * {1.0 / cols!r}, axis=k1), name='Mean')",
                 f"Var = te.compute(({rows},), lambda i: te.sum((X[i, k2] - Mean[i]) * (X[i, k2] - Mean[i]) "
                 f"* {1.0 / cols!r}, axis=k2), name='Var')",
                 f"Y = te.compute(({rows}, {cols}), lambda i, j: (X[i, j] - Mean[i]) * te.rsqrt(Var[i] + 1e-5) "
                 f"* G[j] + Bt[j], name='Y')",
                 "s = te.create_schedule(Y.op)"]
        ref = ["def reference(X, G, Bt):", "    m = X.mean(1, keepdims=True)",
               "    v = ((X - m) ** 2).mean(1, keepdims=True)",
               "    return [(X - m) / np.sqrt(v + 1e-5) * G + Bt]"]
        ranges, tol = {"X": (-1.0, 3.0), "G": (0.5, 1.5), "Bt": (-1.0, 1.0)}, (2e-5, 2e-5)
    one_kernel = rng.random() < 0.4
    t = _reduce_threads(rng, [32, 64, 128, 256], (24, 48, 96, 100, 192))
    # several rows per block over threadIdx.y: one all-reduce per row of threads
    rows_per_block = _pick(rng, [1, 1, 2, 4]) if one_kernel and t <= 128 else 1
    _schedule_rowwise(rng, "Y", lines, t, rows_per_block)
    for n, R in enumerate(stages):
        if one_kernel:                                   # local, attached to Y's block, like the library
            lines += [f"s[{R}].set_scope('local')", f"s[{R}].compute_at(s[Y], yi)",
                      f"{R.lower()}o, {R.lower()}t = s[{R}].split({R}.op.reduce_axis[0], factor={t})",
                      f"s[{R}].bind({R.lower()}t, te.thread_axis('threadIdx.x'))"]
        else:                                            # its own kernel
            _schedule_reduction(rng, R, f"{R}.op.axis[0]", f"{R}.op.reduce_axis[0]", lines,
                                prefix=R.lower() + "_")
    if one_kernel and rng.random() < 0.5:
        lines += ["XS = s.cache_read(X, 'shared', [%s])" % ", ".join(stages + ["Y"]),
                  "s[XS].compute_at(s[Y], yi)"]
        if rows_per_block > 1:                          # the row each threadIdx.y row reads
            lines += ["s[XS].bind(s[XS].op.axis[0], te.thread_axis('threadIdx.y'))",
                      f"xo, xt = s[XS].split(s[XS].op.axis[1], factor={t})"]
        else:
            lines += ["xf = s[XS].fuse(*s[XS].op.axis)", f"xo, xt = s[XS].split(xf, factor={t})"]
        lines += ["s[XS].bind(xt, te.thread_axis('threadIdx.x'))"]
    lines += ["args = [X, Y]" if softmax else "args = [X, G, Bt, Y]"]
    return Program(_code(lines), _code(ref), rtol=tol[0], atol=tol[1], ranges=ranges)


# ------------------------------------------------------------------------------------------------
# shared-memory matmul

def gen_matmul_shared(rng) -> Program:
    bm, bn = _pick(rng, [8, 16, 32]), _pick(rng, [8, 16, 32])
    vy, vx = (_pick(rng, [1, 2]), _pick(rng, [1, 2])) if rng.random() < 0.5 else (1, 1)
    ty = _pick(rng, [t for t in (1, 2, 4, 8) if t * vy <= bm])
    tx = _pick(rng, [t for t in (2, 4, 8, 16) if t * vx <= bn])
    M, N = _extent(rng, 1, 3 * bm, bm), _extent(rng, 1, 3 * bn, bn)
    K = _extent(rng, 1, 40, 8)
    kt = _pick(rng, [1, 2, 4, 8])
    cache_write = rng.random() < 0.6
    local_reads = cache_write and rng.random() < 0.5
    fp16 = rng.random() < 0.2                           # float16 inputs, float32 sums
    bt = rng.random() < 0.25                            # B stored transposed
    dt, cast = ("'float16'", ".astype('float32')") if fp16 else ("'float32'", "")
    b_read = "B[j, k]" if bt else "B[k, j]"
    lines = [f"A = te.placeholder(({M}, {K}), {dt}, name='A')",
             f"B = te.placeholder({(N, K) if bt else (K, N)}, {dt}, name='B')",
             f"k = te.reduce_axis((0, {K}), 'k')",
             f"C = te.compute(({M}, {N}), lambda i, j: te.sum(A[i, k]{cast} * {b_read}{cast}, axis=k), name='C')",
             "s = te.create_schedule(C.op)",
             "AS = s.cache_read(A, 'shared', [C])",
             "BS = s.cache_read(B, 'shared', [C])"]
    if local_reads:
        lines += ["AL = s.cache_read(AS, 'local', [C])", "BL = s.cache_read(BS, 'local', [C])"]
    if cache_write:
        lines += ["CL = s.cache_write(C, 'local')"]
    lines += ["i, j = s[C].op.axis",
              f"bi, ii = s[C].split(i, factor={bm})",
              f"bj, jj = s[C].split(j, factor={bn})"]
    order = ["bi", "bj"]
    if (vy, vx) != (1, 1):
        lines += [f"vi, ii = s[C].split(ii, nparts={vy})", f"vj, jj = s[C].split(jj, nparts={vx})"]
        order += ["vi", "vj"]
    lines += [f"ti, ii = s[C].split(ii, nparts={ty})", f"tj, jj = s[C].split(jj, nparts={tx})"]
    order += ["ti", "tj"]
    binds = [("bi", "blockIdx.y"), ("bj", "blockIdx.x"), ("ti", "threadIdx.y"), ("tj", "threadIdx.x")]
    if (vy, vx) != (1, 1):
        binds += [("vi", "vthread"), ("vj", "vthread")]
    if cache_write:
        lines += [f"s[C].reorder({', '.join(order)}, ii, jj)"]
        lines += [f"s[C].bind({a}, te.thread_axis({t!r}))" for a, t in binds]
        lines += ["s[CL].compute_at(s[C], tj)",
                  f"ko, ki = s[CL].split(CL.op.reduce_axis[0], factor={kt})",
                  "ci, cj = s[CL].op.axis",
                  "s[CL].reorder(ko, ki, ci, cj)"]
        R = "CL"
    else:
        lines += [f"ko, ki = s[C].split(k, factor={kt})",
                  f"s[C].reorder({', '.join(order)}, ko, ki, ii, jj)"]
        lines += [f"s[C].bind({a}, te.thread_axis({t!r}))" for a, t in binds]
        R = "C"
    lines += [f"s[AS].compute_at(s[{R}], ko)", f"s[BS].compute_at(s[{R}], ko)"]
    if local_reads:
        lines += [f"s[AL].compute_at(s[{R}], ki)", f"s[BL].compute_at(s[{R}], ki)"]
    if rng.random() < 0.4:
        lines += [f"s[{R}].unroll(ki)"]
    for X in ("AS", "BS"):
        lines += [f"f = s[{X}].fuse(*s[{X}].op.axis)"]
        vec = rng.random() < 0.3
        if vec:
            lines += [f"f, v = s[{X}].split(f, factor={_pick(rng, [2, 4])})"]
        lines += [f"f, t0 = s[{X}].split(f, factor={tx})", f"f, t1 = s[{X}].split(f, factor={ty})",
                  f"s[{X}].bind(t0, te.thread_axis('threadIdx.x'))",
                  f"s[{X}].bind(t1, te.thread_axis('threadIdx.y'))"]
        if vec:
            lines += [f"s[{X}].vectorize(v)"]
    if rng.random() < 0.2:
        lines += [f"s[AS].storage_align(s[AS].op.axis[0], {_pick(rng, [4, 8])}, 1)"]
    if rng.random() < 0.4:
        lines += ["s[AS].double_buffer()", "s[BS].double_buffer()"]
    lines += ["args = [A, B, C]"]
    ref = ["def reference(A, B):", f"    return [A @ {'B.T' if bt else 'B'}]"]
    return Program(_code(lines), _code(ref), rtol=1e-5, atol=1e-5 * max(K, 1), ranges={"A": (-1.0, 1.0), "B": (-1.0, 1.0)})


# ------------------------------------------------------------------------------------------------
# the library's hand schedules at random sizes

_CONV_REF = """def reference(Data, W):
    n, ci, h, w = Data.shape
    co, _, kh, kw = W.shape
    d = np.pad(Data, ((0, 0), (0, 0), ({pad}, {pad}), ({pad}, {pad})))
    oh, ow = (h + 2 * {pad} - kh) // {stride} + 1, (w + 2 * {pad} - kw) // {stride} + 1
    out = np.zeros((n, co, oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            patch = d[:, :, ry:ry + {stride} * (oh - 1) + 1:{stride}, rx:rx + {stride} * (ow - 1) + 1:{stride}]
            out += np.einsum("ncyx,oc->noyx", patch, W[:, :, ry, rx])
    return [out]
"""

_POOL_REF = """def reference(X):
    n, c, h, w = X.shape
    oh, ow = (h - {size}) // {stride} + 1, (w - {size}) // {stride} + 1
    out = np.full((n, c, oh, ow), -np.inf)
    for ry in range({size}):
        for rx in range({size}):
            out = np.maximum(out, X[:, :, ry:ry + {stride} * (oh - 1) + 1:{stride}, rx:rx + {stride} * (ow - 1) + 1:{stride}])
    return [out]
"""


def gen_library(rng) -> Program:
    what = _pick(rng, ["softmax", "layer_norm", "matmul", "matmul", "conv2d_nchw", "max_pool2d",
                       "row_sum_rfactor", "transpose", "elementwise", "naive"])
    tol = (1e-5, 1e-5)
    ranges, sizes = {}, {}
    if what == "softmax":
        rows, cols = _i(rng, 1, 5), _extent(rng, 1, 1100, 64)
        call = (f"cs.softmax({rows}, {cols}, threads={_reduce_threads(rng, [32, 64, 128, 256], (48, 96, 100))}, "
                f"vec={_pick(rng, [1, 2, 4])})")
        ref = ("def reference(X):\n    e = np.exp(X - X.max(1, keepdims=True))\n"
               "    return [e / e.sum(1, keepdims=True)]\n")
        ranges, tol = {"X": (-3.0, 3.0)}, (1e-5, 1e-6)
    elif what == "layer_norm":
        rows, cols = _i(rng, 1, 5), _extent(rng, 1, 700, 64)
        call = f"cs.layer_norm({rows}, {cols}, threads={_reduce_threads(rng, [32, 64, 128, 256], (48, 96, 100))})"
        ref = ("def reference(X, gamma, beta):\n    m = X.mean(1, keepdims=True)\n"
               "    v = X.var(1, keepdims=True)\n    return [(X - m) / np.sqrt(v + 1e-5) * gamma + beta]\n")
        ranges, tol = {"X": (2.0, 4.0), "gamma": (0.5, 1.5), "beta": (-1.0, 1.0)}, (1e-4, 1e-4)
    elif what == "matmul":
        bm, bn = _pick(rng, [16, 32, 64]), _pick(rng, [16, 32, 64])
        vy, vx = _pick(rng, [1, 2]), _pick(rng, [1, 2])
        ty = _pick(rng, [t for t in (2, 4, 8) if t * vy <= bm])
        tx = _pick(rng, [t for t in (2, 4, 8, 16) if t * vx <= bn])
        M, N, K = _extent(rng, 1, 2 * bm, bm), _extent(rng, 1, 2 * bn, bn), _extent(rng, 1, 40, 8)
        db = bool(rng.random() < 0.5)
        fp16 = rng.random() < 0.2
        dt = ", dtype='float16', acc='float32'" if fp16 else ""
        call = (f"cs.matmul({M}, {N}, {K}{dt}, block=({bm}, {bn}), vthreads=({vy}, {vx}), threads=({ty}, {tx}), "
                f"k_tile={_pick(rng, [1, 2, 4, 8])}, double_buffer={db}, unroll={bool(rng.random() < 0.7)})")
        ref = "def reference(A, B):\n    return [A @ B]\n"
        ranges, tol = {"A": (-1.0, 1.0), "B": (-1.0, 1.0)}, ((1e-3, 1e-3) if fp16 else (1e-5, 1e-5 * K))
    elif what == "conv2d_nchw":
        ks = _pick(rng, [1, 3])
        pad = 0 if ks == 1 else _pick(rng, [0, 1])
        stride = _pick(rng, [1, 2])
        ci = _pick(rng, [2, 4, 8])
        tile_co = _pick(rng, [4, 8])
        cpt = _pick(rng, [c for c in (1, 2, 4) if c <= tile_co])
        tile_x = _pick(rng, [2, 4])
        k_split = _pick(rng, [k for k in (1, 1, 2) if ci % k == 0])
        H, W = _i(rng, max(ks, 2), 9), _i(rng, max(ks, 2), 9)
        call = (f"cs.conv2d_nchw(N=1, CI={ci}, H={H}, W={W}, CO={_pick(rng, [4, 8, 12])}, KH={ks}, KW={ks}, "
                f"pad={pad}, tile_co={tile_co}, tile_y={_pick(rng, [2, 4])}, tile_x={tile_x}, "
                f"co_per_thread={cpt}, ci_tile={_pick(rng, [1, 2, 4])}, x_per_thread={_pick(rng, [1, 2])}, "
                f"stride={stride}, k_split={k_split})")
        ref = _CONV_REF.format(pad=pad, stride=stride)
        ranges, tol = {"Data": (-1.0, 1.0), "W": (-1.0, 1.0)}, (1e-5, 1e-4)
    elif what == "max_pool2d":
        size, stride = _pick(rng, [2, 3]), _pick(rng, [1, 2])
        call = (f"cs.max_pool2d(1, {_i(rng, 1, 4)}, {_i(rng, size, 11)}, {_i(rng, size, 11)}, size={size}, "
                f"stride={stride}, threads={_pick(rng, [32, 64, 128])})")
        ref = _POOL_REF.format(size=size, stride=stride)
        ranges, tol = {"X": (-2.0, 2.0)}, (0.0, 0.0)
    elif what == "row_sum_rfactor":
        m = _extent(rng, 1, 500, 16)
        rows = _i(rng, 1, 70)
        threads_x = _reduce_threads(rng, [4, 8, 16, 32], (6, 10, 12, 24))
        call = (f"cs.row_sum_rfactor({rows}, {m}, threads_x={threads_x}, "
                f"rows_per_block={_pick(rng, [1, 2, 4, 8, 32])})")
        ref = "def reference(A):\n    return [A.sum(1)]\n"
        ranges, tol = {"A": (-1.0, 1.0)}, (1e-5, 4e-6 * m)
    elif what == "transpose":
        tile = _pick(rng, [8, 16, 32])
        rpp = _pick(rng, [r for r in (1, 2, 4, 8) if r <= tile])
        call = (f"cs.transpose({_extent(rng, 1, 80, tile)}, {_extent(rng, 1, 80, tile)}, tile={tile}, "
                f"rows_per_pass={rpp}, pad_rows={bool(rng.random() < 0.6)})")
        ref = "def reference(A):\n    return [A.T]\n"
        ranges, tol = {"A": (-2.0, 2.0)}, (0.0, 0.0)
    elif what == "elementwise":
        n = _extent(rng, 1, 3000, 64)
        symbolic = rng.random() < 0.5
        dtype = _pick(rng, ["float32", "float32", "float16"])
        call = (f"cs.elementwise({'None' if symbolic else n}, dtype={dtype!r}, threads={_pick(rng, [32, 64, 128, 256])}, "
                f"vec={_pick(rng, [1, 2, 4])})")
        if symbolic:
            sizes = {"n": n}
        ref = "def reference(A, B):\n    return [np.exp(A) * B + 1]\n"
        ranges = {"A": (-2.0, 2.0), "B": (-2.0, 2.0)}
        tol = (2e-3, 2e-3) if dtype == "float16" else (1e-5, 1e-5)
    else:                                               # naive: one kernel per stage of a small graph
        rows, cols = _i(rng, 1, 7), _extent(rng, 1, 300, 32)
        src = _code([f"X = te.placeholder(({rows}, {cols}), name='X')",
                     f"k1, k2 = te.reduce_axis((0, {cols}), 'k1'), te.reduce_axis((0, {cols}), 'k2')",
                     f"Mx = te.compute(({rows},), lambda i: te.max(X[i, k1], axis=k1), name='Mx')",
                     f"Sm = te.compute(({rows},), lambda i: te.sum(te.exp(X[i, k2] - Mx[i]), axis=k2), name='Sm')",
                     f"Y = te.compute(({rows}, {cols}), lambda i, j: te.exp(X[i, j] - Mx[i]) / Sm[i], name='Y')",
                     f"s, args = cs.naive(Y, threads={_pick(rng, [32, 64, 128, 256])}), [X, Y]"])
        ref = ("def reference(X):\n    e = np.exp(X - X.max(1, keepdims=True))\n"
               "    return [e / e.sum(1, keepdims=True)]\n")
        return Program(src, ref, 1e-5, 1e-6, {"X": (-3.0, 3.0)}, {}, must_build=True)
    return Program(f"s, args = {call}\n", ref, tol[0], tol[1], ranges, sizes, must_build=True)


# the ragged family lives in its own file (it imports the helpers above, hence here)
try:
    from .gpu_fuzz_ragged import gen_ragged  # noqa: E402
except ImportError:
    from gpu_fuzz_ragged import gen_ragged  # noqa: E402

FAMILIES = {
    "elementwise": gen_elementwise,
    "stencil": gen_stencil,
    "row_reduce": gen_row_reduce,
    "rfactor": gen_rfactor,
    "softmax_layernorm": gen_softmax_layernorm,
    "matmul_shared": gen_matmul_shared,
    "library": gen_library,
    "ragged": gen_ragged,
}
