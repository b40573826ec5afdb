"""``te.scan`` (recurrences), ported in spirit from TVM's ``test_te_tensor.py`` (scan, multiple
outputs), ``test_te_schedule_ops.py`` (scan schedules, scan with several stages) and
``test_te_schedule_bound_inference.py`` (scan bounds): each compiled result checked with
``check_llvm`` (the lowered-IR interpreter after every pass, bounds-checked and plain builds on
poisoned outputs, the TE interpreter) against numpy; the GPU schedule of TVM's scan tutorial
emulated and compiled with nvcc; one test per error message."""
import json

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.interp import InterpError, evaluate
from tilecraft.schedule import ScheduleError
from tilecraft.te import TEError


def cumsum_scan(m=None, n=None):
    m = te.var("m") if m is None else m
    n = te.var("n") if n is None else n
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, init, update, te.scan(init, update, state, inputs=[X])


def two_stage_scan(m=None, n=None):
    m = te.var("m") if m is None else m
    n = te.var("n") if n is None else n
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    s1 = te.compute((m, n), lambda t, i: state[t - 1, i] * 2.0, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    return X, s1, s2, te.scan(init, s2, state, inputs=[X])


def two_stage_ref(x):
    r = x.astype("float64").copy()
    for t in range(1, len(r)):
        r[t] = r[t - 1] * 2.0 + x[t]
    return r


# ---- the TE interpreter ---------------------------------------------------------------------

def test_interpreter_cumsum_and_initial_rows(rand):
    X, init, update, res = cumsum_scan()
    x = rand((6, 5))
    np.testing.assert_allclose(evaluate(res, {X: x}), np.cumsum(x, 0), rtol=1e-5)
    assert res.op.scan_axis.var.name == "scan.idx" and res.op.body_ops == [update.op]
    assert res.op.input_tensors == [init, update] and res.shape == update.shape


def test_interpreter_refuses_a_read_of_the_current_step(rand):
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    bad = te.compute((m, n), lambda t, i: state[t, i] + X[t, i], name="bad")
    res = te.scan(init, bad, state)
    with pytest.raises(InterpError, match=r"out-of-bounds read state\[1, 0\].*extent 1"):
        evaluate(res, {X: rand((4, 3))})


# ---- CPU: compiled against numpy ------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 7), (9, 13)])
def test_cumsum_scan_default_schedule(check_llvm, rand, shape):
    X, init, update, res = cumsum_scan()
    s = te.create_schedule(res.op)
    x = rand(shape)
    check_llvm(s, [X, res], {X: x}, {res: np.cumsum(x, 0)})


def test_scan_with_split_inner_stages_and_compute_at(check_llvm, rand):
    X, s1, s2, res = two_stage_scan()
    s = te.create_schedule(res.op)
    xo, xi = s[s2].split(s2.op.axis[1], factor=4)
    s[s1].compute_at(s[s2], xo)
    s[s2].vectorize(xi)
    x = rand((7, 10))
    check_llvm(s, [X, res], {X: x}, {res: two_stage_ref(x)})


def test_split_scan_axis_with_a_tail_and_body_back_at_the_scan(check_llvm, rand):
    X, s1, s2, res = two_stage_scan()
    s = te.create_schedule(res.op)
    to, ti = s[res].split(res.op.scan_axis, factor=3)
    s[res].unroll(ti)
    s[s1].compute_at(s[s2], s2.op.axis[1])
    s[s1].compute_root()          # back to the scan's loop, not the root: it reads the state
    assert s[s1].attach_stage is s[res] and s[s1].attach_ivar is ti
    x = rand((9, 5))
    check_llvm(s, [X, res], {X: x}, {res: two_stage_ref(x)})


def test_scan_with_two_states(check_llvm, rand):
    m, n, l = te.var("m"), te.var("n"), te.var("l")
    X = te.placeholder((m, n), name="X")
    st1, st2 = te.placeholder((m, n), name="st1"), te.placeholder((m, l), name="st2")
    i1 = te.compute((1, n), lambda _, i: X[0, i], name="i1")
    i2 = te.compute((1, l), lambda _, i: 0.5, name="i2")
    u1 = te.compute((m, n), lambda t, i: st1[t - 1, i] + X[t, i], name="u1")
    u2 = te.compute((m, l), lambda t, i: st2[t - 1, i] * 0.5 + st1[t - 1, 0], name="u2")
    r1, r2 = te.scan([i1, i2], [u1, u2], [st1, st2], inputs=[X])
    assert r1.op is r2.op and (r1.name, r2.name) == ("scan.v0", "scan.v1")
    s = te.create_schedule(r1.op)
    x = rand((6, 4))
    want1 = np.cumsum(x, 0)
    want2 = np.full((6, 3), 0.5)
    for t in range(1, 6):
        want2[t] = want2[t - 1] * 0.5 + want1[t - 1, 0]
    check_llvm(s, [X, r1, r2], {X: x}, {r1: want1, r2: want2}, scalars={l: 3})


def test_fibonacci_with_two_initial_steps_and_constant_shapes(check_llvm, rand):
    # constant shapes: the static index check sees state[t - 2] only from the first step (t >= 2)
    X = te.placeholder((10, 3), name="X")
    state = te.placeholder((10, 3), name="state")
    init = te.compute((2, 3), lambda t, i: X[t, i], name="init")
    update = te.compute((10, 3), lambda t, i: state[t - 1, i] + state[t - 2, i] * 0.5, name="update")
    res = te.scan(init, update, state, inputs=[X])
    assert res.op.scan_axis.dom.min.value == 2 and res.op.scan_axis.dom.extent.value == 8
    s = te.create_schedule(res.op)
    x = rand((10, 3))
    want = x.astype("float64").copy()
    for t in range(2, 10):
        want[t] = want[t - 1] + want[t - 2] * 0.5
    check_llvm(s, [X, res], {X: x}, {res: want})


def test_scan_whose_body_reduces_over_the_state(check_llvm, rand):
    # an RNN-like cell: h[t] = W @ h[t-1] + X[t]; the reduction reads the whole previous row
    m, n = te.var("m"), 6
    X = te.placeholder((m, n), name="X")
    W = te.placeholder((n, n), name="W")
    h = te.placeholder((m, n), name="h")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    k = te.reduce_axis((0, n), name="k")
    wh = te.compute((m, n), lambda t, i: te.sum(W[i, k] * h[t - 1, k], axis=k), name="wh")
    upd = te.compute((m, n), lambda t, i: wh[t, i] + X[t, i], name="upd")
    res = te.scan(init, upd, h, inputs=[X])
    s = te.create_schedule(res.op)
    s[wh].compute_at(s[upd], upd.op.axis[1])
    x, w = rand((5, n)), rand((n, n), low=-0.5, high=0.5)
    want = x.astype("float64").copy()
    for t in range(1, 5):
        want[t] = w @ want[t - 1] + x[t]
    check_llvm(s, [X, W, res], {X: x, W: w}, {res: want})


def test_scan_output_read_by_a_later_stage_is_allocated(check_llvm, rand):
    X, init, update, res = cumsum_scan()
    out = te.compute(res.shape, lambda t, i: res[t, i] * 3.0, name="out")
    s = te.create_schedule(out.op)
    x = rand((5, 4))
    text = str(tc.lower(s, [X, out], simple_mode=True))
    assert 'scan = allocate(' in text
    check_llvm(s, [X, out], {X: x}, {out: np.cumsum(x, 0) * 3.0})


def test_lowered_cumsum_golden(golden):
    X, init, update, res = cumsum_scan()
    s = te.create_schedule(res.op)
    xo, xi = s[update].split(update.op.axis[1], factor=16)
    golden("scan_cumsum_split", str(tc.lower(s, [X, res], simple_mode=True)))


def test_schedule_record_round_trip_with_the_scan_axis():
    from tilecraft.schedule.schedule import from_json
    X, s1, s2, res = two_stage_scan()
    s = te.create_schedule(res.op)
    s[res].split(res.op.scan_axis, factor=2)
    xo, _ = s[s2].split(s2.op.axis[1], factor=4)
    s[s1].compute_at(s[s2], xo)
    code = s.to_python()
    assert "= s[scan].op.scan_axis" in code
    want = str(tc.lower(s, [X, res]))
    X2, a2, b2, res2 = two_stage_scan()
    s_py = te.create_schedule(res2.op)
    exec(code, {"s": s_py, "scan": res2, "s1": a2, "s2": b2})
    assert str(tc.lower(s_py, [X2, res2])) == want
    assert str(tc.lower(from_json(s.to_json(), [res2.op]), [X2, res2])) == want
    assert "scan.idx.outer" in want


# ---- GPU: TVM's tutorial schedule, emulated and compiled ------------------------------------

def gpu_cumsum(num_thread=32):
    X, init, update, res = cumsum_scan()
    s = te.create_schedule(res.op)
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    for stage in (init, update):
        xo, xi = s[stage].split(stage.op.axis[1], factor=num_thread)
        s[stage].bind(xo, bx)
        s[stage].bind(xi, tx)
    return s, [X, res]


def test_gpu_scan_kernels_run_once_per_step_in_the_emulator(rand):
    from tilecraft.codegen.cuda_emulate import emulate
    from tilecraft.schedule.passes.gpu_lower import kernels_of, launch_program
    s, (X, res) = gpu_cumsum()
    f = tc.lower(s, [X, res], target="cuda", name="myscan")
    _, program = launch_program(f.body)
    assert [k for k, _, _ in program] == ["kernel", "loop"]
    assert [info.name for info, _ in kernels_of(f.body)[1]] == ["myscan_kernel0", "myscan_kernel1"]
    x = rand((6, 45))
    y = np.full((6, 45), np.nan, "float32")
    emulate(f, [x, y])
    np.testing.assert_allclose(y, np.cumsum(x, 0), rtol=1e-5, atol=1e-6)


def test_gpu_scan_compiles_with_nvcc_and_plans_a_host_loop():
    from tilecraft.codegen.cuda import generate_cuda
    from tilecraft.codegen.cuda_compile import compile_cuda, find_nvcc
    from tilecraft.runtime.cuda_runtime import FunctionPlan, plan_of
    s, args = gpu_cumsum(256)
    f = tc.lower(s, args, target="cuda", name="myscan")
    src = generate_cuda(f)
    assert "int scan_idx" in src
    plan = plan_of(f)
    assert plan.program == (("k", 0), ("loop", 0, "scan.idx#0", "int32", 0, ("-", "m", 1), (("k", 1),)))
    assert ("loop", 0) in plan.kernels[1].params
    assert FunctionPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    if find_nvcc() is None:
        pytest.skip("nvcc is absent: the CUDA C was generated and emulated but not compiled")
    assert compile_cuda(src)


def test_gpu_launch_list_unrolls_the_host_loop():
    # the launcher's calls without a GPU: fake kernels record their arguments
    from types import SimpleNamespace
    from tilecraft.runtime.cuda_runtime import CUDAFunction, plan_of
    s, args = gpu_cumsum(256)
    plan = plan_of(tc.lower(s, args, target="cuda"))
    kernels = [SimpleNamespace(plan=k, fn=k.name, block=k.block, static_grid=None, smem=k.dynamic_shared_bytes)
               for k in plan.kernels]
    f = CUDAFunction(None, plan, kernels)
    values = {("arg", 0): "X", ("arg", 1): "scan", ("arg", 2): 5, ("arg", 3): 300}
    calls = []
    f._calls(plan.program, {"m": 5, "n": 300}, values, calls)
    steps = [int(a) for fn, _, _, kargs, _ in calls[1:] for a, p in zip(kargs, plan.kernels[1].params)
             if p == ("loop", 0)]
    assert [c[0] for c in calls] == ["main_kernel0"] + ["main_kernel1"] * 4 and steps == [0, 1, 2, 3]
    assert all(c[1] == (2, 1, 1) and c[4] == 0 for c in calls)       # no dynamic shared memory


def test_gpu_two_stage_scan_keeps_its_intermediate_in_workspace(rand):
    # s1 (global, allocated per step) becomes workspace of the function; the time guard of its
    # region is proved away by the scan loop's range (a guard there split the host loop before)
    from tilecraft.codegen.cuda_emulate import emulate
    from tilecraft.schedule.passes.gpu_lower import launch_program
    X, s1, s2, res = two_stage_scan()
    s = te.create_schedule(res.op)
    init = res.op.init[0]
    for x in (init, s1, s2):
        xo, xi = s[x].split(x.op.axis[1], factor=32)
        s[x].bind(xo, te.thread_axis("blockIdx.x"))
        s[x].bind(xi, te.thread_axis("threadIdx.x"))
    assert "scan.idx + 1 < m" not in str(tc.lower(s, [X, res], simple_mode=True))
    f = tc.lower(s, [X, res], target="cuda")
    workspace, program = launch_program(f.body)
    assert [b.name for b in workspace] == ["s1"] and [len(p[2]) for p in program if p[0] == "loop"] == [2]
    x = rand((5, 70))
    y = np.full((5, 70), np.nan, "float32")
    emulate(f, [x, y])
    want = two_stage_ref(x)
    # float32 steps of r[t] = 2 r[t-1] + x[t] can cancel: an absolute tolerance on the scale of the row
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def test_gpu_scan_errors():
    from tilecraft.schedule.passes.gpu_kernels import GPULoweringError
    s, (X, res) = gpu_cumsum()
    s[res].split(res.op.scan_axis, factor=3)
    with pytest.raises(GPULoweringError, match=r"a te.scan's loop over the steps runs on the host .* split the "
                                               r"scan axis evenly or leave it unsplit"):
        tc.lower(s, [X, res], target="cuda")
    X, init, update, res = cumsum_scan()
    s = te.create_schedule(res.op)
    xo, xi = s[init].split(init.op.axis[1], factor=32)
    s[init].bind(xo, te.thread_axis("blockIdx.x"))
    s[init].bind(xi, te.thread_axis("threadIdx.x"))
    with pytest.raises(GPULoweringError, match=r"stage 'update' runs at every step of scan 'scan' and is not "
                                               r"bound to the GPU grid: .* its loops must be bound"):
        tc.lower(s, [X, res], target="cuda")


# ---- errors ---------------------------------------------------------------------------------

def _parts():
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return m, n, X, state, init, update


def test_scan_declaration_errors():
    m, n, X, state, init, update = _parts()
    with pytest.raises(TEError, match=r"1 init, 2 update and 1 state tensor\(s\)"):
        te.scan([init], [update, update], [state])
    with pytest.raises(TEError, match=r"state_placeholder must be a te.placeholder, got the result of 'update'"):
        te.scan(init, update, update)
    s16 = te.placeholder((m, n), "float16", name="s16")
    with pytest.raises(TEError, match=r"init 'init' is float32, update 'update' float32 and the state float16"):
        te.scan(init, update, s16)
    s3 = te.placeholder((m, n, 2), name="s3")
    with pytest.raises(TEError, match=r"have 2, 2 and 3 dimension\(s\)"):
        te.scan(init, update, s3)
    s_short = te.placeholder((m - 1, n), name="short")
    with pytest.raises(TEError, match=r"the update 'update' has m time steps but the state has m - 1"):
        te.scan(init, update, s_short)
    wide = te.compute((1, n + 1), lambda _, i: 0.0, name="wide")
    with pytest.raises(TEError, match=r"dimension 1 is n \+ 1 in init 'wide', n in update 'update'"):
        te.scan(wide, update, state)
    with pytest.raises(TEError, match=r"init 0 must be a tensor"):
        te.scan(1.0, update, state)
    big = te.compute((12, 3), lambda t, i: 0.0, name="big")
    st = te.placeholder((10, 3), name="st")
    up = te.compute((10, 3), lambda t, i: st[t - 1, i], name="up")
    with pytest.raises(TEError, match=r"init gives 12 steps but there are only 10"):
        te.scan(big, up, st)


def test_scan_schedule_errors():
    m, n, X, state, init, update = _parts()
    res = te.scan(init, update, state, inputs=[X])
    out = te.compute((m, n), lambda t, i: res[t, i] + 1.0, name="out")
    s = te.create_schedule(out.op)
    with pytest.raises(ScheduleError, match=r"parallel on stage 'scan': axis 'scan.idx' is the time axis"):
        s[res].parallel(res.op.scan_axis)
    with pytest.raises(ScheduleError, match=r"vectorize on stage 'scan': axis 'scan.idx' is the time axis"):
        s[res].vectorize(res.op.scan_axis)
    with pytest.raises(ScheduleError, match=r"bind on stage 'scan': axis 'scan.idx' is the time axis"):
        s[res].bind(res.op.scan_axis, te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match=r"compute_at of stage 'update': it is the update of scan 'scan'"):
        s[update].compute_at(s[out], out.op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_inline of stage 'update': it is the update"):
        s[update].compute_inline()
    with pytest.raises(ScheduleError, match=r"compute_at of the scan 'scan': a scan runs at the root"):
        s[res].compute_at(s[out], out.op.axis[0])
    with pytest.raises(ScheduleError, match=r"'init' is part of scan 'scan' .* pass the scan's output 'scan'"):
        tc.lower(s, [X, init, out])


def test_body_stage_cannot_leave_the_scan():
    X, s1, s2, res = two_stage_scan()
    out = te.compute(res.shape, lambda t, i: res[t, i] + 1.0, name="out")
    s = te.create_schedule(out.op)
    with pytest.raises(ScheduleError, match=r"compute_at of stage 's1' into 'out': 's1' is in the body of scan "
                                            r"'scan' and runs once per step"):
        s[s1].compute_at(s[out], out.op.axis[0])
