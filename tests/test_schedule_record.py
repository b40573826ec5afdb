"""A schedule is a record of frozen steps. For every primitive, and for random schedules from the
CPU fuzzer:

* ``s.to_python()`` is executed on a fresh schedule of the same outputs (the tensors given by
  name) and gives the same printed IR and the same steps;
* ``s.to_json()`` → ``from_json`` gives the same printed IR and the same JSON;
* both apply to a separately built graph of the same definition (what a saved record needs).
"""
import json

import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.topi import cuda_schedules as cs
from tilecraft.schedule import Step, from_json, python_names, replay, step_from_json
from tilecraft.schedule.record import STEP_TYPES, SplitStep, intrins_by_name

from test_llvm_ops import blocked_matmul, conv2d_nchw, softmax
from test_schedule_fuzz import conv, matmul, random_schedule, reduce_producer, stencil, symbolic
from tensorize_intrins import tensorized_gemv


def vadd():
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


def softmax_rows():
    s, A, out = softmax(16, 32)
    return s, [A, out]


def conv2d_inline_fuse_unroll():
    A, Wt, Apad, Out = conv2d_nchw(1, 2, 8, 8, 2, 3, stride=2, pad=1)
    s = te.create_schedule(Out.op)
    s[Apad].compute_inline()
    n, f, y, x = Out.op.axis
    rc, ry, rx = Out.op.reduce_axis
    s[Out].reorder(n, f, y, rc, ry, rx, x)
    s[Out].parallel(s[Out].fuse(n, f))
    s[Out].unroll(rx)
    return s, [A, Wt, Out]


def cache_read_align_pragma_nparts():
    A = te.placeholder((24, 30), name="A")
    B = te.compute((24, 30), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "global", [B])
    s[AA].storage_align(AA.op.axis[0], 16, 1)
    io, ii = s[B].split(B.op.axis[0], nparts=4)
    s[B].pragma(io, "auto_unroll_max_step", 16)
    s[AA].compute_at(s[B], io)
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


def rfactor_factor_axis_attached():
    A = te.placeholder((6, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=8)
    SF = s.rfactor(S, ki, factor_axis=1)
    s[SF].compute_at(s[S], s[S].op.axis[0])
    return s, [A, S]


def tile_compute_root():
    A = te.placeholder((20, 20), name="A")
    B = te.compute((20, 20), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((20, 20), lambda i, j: B[j, i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    s[B].compute_at(s[C], yo)
    s[B].compute_root()
    s[B].compute_at(s[C], xo)
    return s, [A, C]


def cache_write_fuse_three_set_scope():
    A = te.placeholder((4, 6, 10), name="A")
    B = te.compute((4, 6, 10), lambda i, j, k: A[i, j, k] * 2.0, name="B")
    C = te.compute((4, 6, 10), lambda i, j, k: B[i, j, k] + A[i, j, k], name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=16)
    s[CL].compute_at(s[C], fo)
    s[B].set_scope("local")
    s[B].compute_at(s[CL], s[CL].op.axis[0])
    return s, [A, C]


def same_names():
    """Two stages named ``compute`` and two caches of A in one scope: the record says which."""
    A = te.placeholder((32,), name="A")
    B = te.compute((32,), lambda i: A[i] * 2.0)
    C = te.compute((32,), lambda i: B[i] + A[i])
    s = te.create_schedule(C.op)
    A1 = s.cache_read(A, "global", [B])
    A2 = s.cache_read(A, "global", [C])
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], io)
    s[A1].compute_at(s[B], s[B].op.axis[0])
    s[A2].compute_at(s[C], io)
    return s, [A, C]


def tensorize_reset_update():
    """The tutorial's reduce-update schedule: the intrinsic is named in the record."""
    s, args, _ = tensorized_gemv(n=4, m=32, l=24, factor=16, kfactor=8)
    return s, args


def gpu_matmul_bind_vthread_double_buffer():
    return cs.matmul(64, 64, 32, block=(32, 32), threads=(4, 4), vthreads=(2, 2), k_tile=8, double_buffer=True)


def gpu_matmul_pipeline():
    s, args = cs.matmul(64, 64, 32, block=(32, 32), threads=(4, 4), vthreads=(2, 2), k_tile=8, double_buffer=False)
    _stage(s, "B.shared").pipeline(3)          # B is copied as it is: cp.async; AT (a transpose) is not
    return s, args


def _stage(s, name):
    return next(st for st in s.stages if st.name == name)


def gpu_named_thread_axes():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[j, i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    io, jo, ii, ji = s[B].tile(B.op.axis[0], B.op.axis[1], 16, 16)
    s[B].bind(io, te.thread_axis("blockIdx.y"))
    s[B].bind(jo, te.thread_axis("blockIdx.x"))
    iv, ii = s[B].split(ii, nparts=2)
    s[B].bind(iv, te.thread_axis((0, 2), "vthread", name="vy"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], jo)
    s[AS].storage_align(AS.op.axis[0], 32, 1)
    ay, ax = s[AS].split(s[AS].fuse(*s[AS].op.axis), factor=16)
    s[AS].bind(ax, te.thread_axis("threadIdx.x"))
    s[AS].unroll(ay)
    return s, [A, B]


def scan_split_compute_at():
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    s1 = te.compute((m, n), lambda t, i: state[t - 1, i] * 2.0, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    res = te.scan(init, s2, state, inputs=[X])
    s = te.create_schedule(res.op)
    to, ti = s[res].split(res.op.scan_axis, factor=2)
    s[res].unroll(ti)
    xo, xi = s[s2].split(s2.op.axis[1], factor=8)
    s[s1].compute_at(s[s2], xo)
    return s, [X, res]


def store_predicate_threads():
    A = te.placeholder((64, 8), name="A")
    B = te.compute((64, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, tx)
    s[B].set_store_predicate((tx.var < 8) & (B.op.axis[1] % 2 == 0))
    return s, [A, B]


def groups_nested():
    A = te.placeholder((6, 5), name="A")
    x = te.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="x")
    x1 = te.compute((6, 5), lambda i, j: x[i, j] + 1.0, name="x1")
    x2 = te.compute((6, 5), lambda i, j: x1[i, j] * 3.0, name="x2")
    s = te.create_schedule(x2.op)
    g1 = s.create_group(outputs=x, inputs=x, include_inputs=True)
    g2 = s.create_group(outputs=x1, inputs=x, include_inputs=True)
    g2.compute_at(s[x2], x2.op.axis[0])
    g2.compute_root()
    io, ii = s[x2].split(x2.op.axis[0], factor=2)
    g2.compute_at(s[x2], io)
    g1.compute_at(s[x1], x1.op.axis[1])
    return s, [A, x2]


def transform_layout_split():
    A = te.placeholder((6, 8), name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((6, 8), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[A].transform_layout(lambda i, j: [j, i])
    jo, i, ji = s[B].transform_layout(lambda i, j: [j // 4, i, j % 4])
    s[B].vectorize(ji)
    return s, [A, C]


SCHEDULES = [vadd, matmul_blocked, softmax_rows, conv2d_inline_fuse_unroll, cache_read_align_pragma_nparts,
             rfactor_parallel, rfactor_factor_axis_attached, tile_compute_root, cache_write_fuse_three_set_scope,
             same_names, tensorize_reset_update, gpu_matmul_bind_vthread_double_buffer, gpu_named_thread_axes,
             scan_split_compute_at, store_predicate_threads, groups_nested, transform_layout_split,
             gpu_matmul_pipeline]


def _ir(s, args) -> str:
    return str(tc.lower(s, args, simple_mode=True))


def _run_python(code: str, outputs, intrins=()):
    """Execute ``to_python()`` code on a fresh schedule of ``outputs``, the tensors (and tensor
    intrinsics) by name."""
    s = te.create_schedule(outputs)
    exec(compile(code, "<to_python>", "exec"), {"s": s, **python_names(outputs, intrins)})
    return s


def _check_round_trips(s, args, rebuilt_args=None):
    """Python and JSON forms of ``s``, executed / replayed on the same graph and, when given, on a
    separately built one (``rebuilt_args``), lower to the same IR."""
    want = _ir(s, args)
    outputs = list(s.outputs)
    code, text = s.to_python(), s.to_json()
    intrins = intrins_by_name(s.steps)
    s_py = _run_python(code, outputs, intrins)
    assert _ir(s_py, args) == want, f"to_python() code gives another loop nest:\n{code}"
    assert s_py.steps == s.steps and s_py.to_python() == code
    s_json = from_json(text, outputs, intrins)
    assert _ir(s_json, args) == want, f"from_json gives another loop nest:\n{text}"
    assert s_json.to_json() == text and s_json.steps == s.steps
    if rebuilt_args is not None:
        fresh_out = _outputs_of(rebuilt_args, outputs)
        assert _ir(_run_python(code, fresh_out, intrins), rebuilt_args) == want
        assert _ir(from_json(text, fresh_out, intrins), rebuilt_args) == want
    return code, text


def _outputs_of(args, outputs):
    names = {op.name for op in outputs}
    return [t.op for t in args if t.op.name in names]


@pytest.mark.parametrize("make", SCHEDULES, ids=lambda f: f.__name__)
def test_python_and_json_forms_replay_to_the_same_loop_nest(make):
    s, args = make()
    assert s.steps, "the schedule recorded no steps"
    _, rebuilt = make()
    _check_round_trips(s, args, rebuilt)


def test_every_primitive_is_covered():
    kinds = set()
    for make in SCHEDULES:
        kinds |= {step.kind for step in make()[0].steps}
    assert kinds == set(STEP_TYPES)


def test_gpu_schedule_lowers_the_same_for_cuda():
    """bind, vthread and double_buffer survive both forms down to the kernels."""
    s, args = gpu_matmul_bind_vthread_double_buffer()
    want = str(tc.lower(s, args, target="cuda"))
    s2 = _run_python(s.to_python(), list(s.outputs))
    assert str(tc.lower(s2, args, target="cuda")) == want
    assert str(tc.lower(from_json(s.to_json(), list(s.outputs)), args, target="cuda")) == want


def test_python_form_reads_like_the_schedule():
    s, args = vadd()
    assert s.to_python() == "\n".join([
        "from tilecraft import te",
        "# s: te.create_schedule of the same outputs; the tensors by name: C",
        "C_i = s[C].op.axis[0]",
        "C_i_outer, C_i_inner = s[C].split(C_i, factor=64)",
        "s[C].parallel(C_i_outer)",
        "s[C].vectorize(C_i_inner)",
    ])
    assert json.loads(s.to_json()) == [
        {"step": "split", "stage": "C", "axis": "i", "factor": 64},
        {"step": "parallel", "stage": "C", "axis": "i.outer"},
        {"step": "vectorize", "stage": "C", "axis": "i.inner"},
    ]


def test_created_stages_are_named_in_the_record():
    s, _ = same_names()
    steps = json.loads(s.to_json())
    assert steps[0] == {"step": "cache_read", "tensor": "A", "scope": "global", "readers": ["compute#0"],
                        "result": "A.global"}
    assert steps[1] == {"step": "cache_read", "tensor": "A", "scope": "global", "readers": ["compute#1"],
                        "result": "A.global#0"}
    assert {"step": "compute_at", "stage": "A.global#1", "parent": "compute#0", "axis": "i"} in steps
    s, _ = rfactor_parallel()
    assert json.loads(s.to_json())[1] == {"step": "rfactor", "tensor": "S", "axis": "k.outer",
                                          "factor_axis": 0, "result": "S.rf"}


def test_steps_are_frozen_values():
    s, _ = vadd()
    step = s.steps[0]
    assert isinstance(step, Step) and step == SplitStep("C", "i", factor=64)
    with pytest.raises(AttributeError):
        step.factor = 8
    assert [step_from_json(x) for x in json.loads(s.to_json())] == s.steps


def test_replay_folds_over_apply():
    s, args = matmul_blocked()
    assert _ir(replay(s.steps, list(s.outputs)), args) == _ir(s, args)
    fresh = te.create_schedule(list(s.outputs))
    for step in s.steps:
        step.apply(fresh)
    assert fresh.steps == s.steps and _ir(fresh, args) == _ir(s, args)


def test_the_record_format_before_typed_steps_is_read():
    s, args = cache_read_align_pragma_nparts()
    old = [["cache_read", "", ["A", "global", ["B"]]], ["storage_align", "A.global", ["ax0", 16, 1]],
           ["split", "B", ["i", "nparts", 4]], ["pragma", "B", ["i.outer", "auto_unroll_max_step", 16]],
           ["compute_at", "A.global", ["B", "i.outer"]]]
    assert _ir(replay(old, list(s.outputs)), args) == _ir(s, args)


def test_replayed_schedule_runs(check_llvm, rand):
    s, (A, B, C) = matmul_blocked()
    r = _run_python(s.to_python(), list(s.outputs))
    a, b = rand((64, 64)), rand((64, 64))
    check_llvm(r, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [stencil, matmul, reduce_producer, symbolic, conv], ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", range(10))
def test_random_schedules_round_trip(make, case, rng):
    """Property: a random schedule of the CPU fuzzer, printed as Python and executed (and as JSON
    and replayed), lowers to the same IR."""
    s, inputs, C = random_schedule(rng, make)
    _check_round_trips(s, inputs + [C])


PRIMITIVES = ["split", "tile", "fuse", "reorder", "vectorize", "unroll", "parallel", "bind", "pragma",
              "compute_at", "compute_inline", "compute_root", "storage_align", "set_scope", "double_buffer",
              "pipeline", "tensorize"]


@pytest.mark.parametrize("name", PRIMITIVES + ["cache_read", "cache_write", "rfactor"])
def test_each_primitive_docstring_shows_before_and_after(name):
    from tilecraft.schedule import Schedule, Stage
    doc = getattr(Stage if name in PRIMITIVES else Schedule, name).__doc__
    assert "Before" in doc and "After" in doc and f"{name}(" in doc
