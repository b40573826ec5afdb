"""The steps of TVM's tune_conv2d_cuda tutorial (gallery/how_to/tune_with_autotvm/tune_conv2d_cuda.py,
TVM <= 0.14) with `tvm` and `autotvm` imported from tilecraft: the conv2d template written with
topi.nn.conv2d_nchw and AutoTVM knobs, a task for "cuda", measure options, the best config of an
empty history (record_file = None, as the tutorial ships), and the kernel built with it.
Run by tests/test_tvm_scripts.py as `python tune_conv2d_cuda.py`; prints OK.

On a machine without a GPU the kernel is generated and compiled with nvcc (the build), and the
template is run in tilecraft's CUDA emulator on a smaller workload (the emulator is slow); with
`--gpu` the tutorial's workload runs on the GPU and is timed, as in the tutorial. `--gpu --tune`
also runs the tutorial's tuning step (5 XGBTuner trials logged to conv2d.log, then the best of that
log applied), which the tutorial ships commented out."""
import logging
import sys
import numpy as np
import tilecraft as tvm
from tilecraft import te, topi, testing
from tilecraft.topi.testing import conv2d_nchw_python
import tilecraft.testing

GPU = "--gpu" in sys.argv
from tilecraft import autotune as autotvm

@autotvm.template("tutorial/conv2d_no_batching")
def conv2d_no_batching(N, H, W, CO, CI, KH, KW, stride, padding):
    assert N == 1, "Only consider batch_size = 1 in this template"
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    n, f, y, x = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    pad_data = s[conv].op.input_tensors[0]
    s[pad_data].compute_inline()
    data, raw_data = pad_data, data
    output = conv
    OL = s.cache_write(conv, "local")
    AA = s.cache_read(data, "shared", [OL])
    WW = s.cache_read(kernel, "shared", [OL])
    AL = s.cache_read(AA, "local", [OL])
    WL = s.cache_read(WW, "local", [OL])
    n, f, y, x = s[output].op.axis
    bf, vf, tf, fi = cfg["tile_f"].apply(s, output, f)
    by, vy, ty, yi = cfg["tile_y"].apply(s, output, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, output, x)
    kernel_scope = n
    s[output].bind(bf, te.thread_axis("blockIdx.z"))
    s[output].bind(by, te.thread_axis("blockIdx.y"))
    s[output].bind(bx, te.thread_axis("blockIdx.x"))
    s[output].bind(vf, te.thread_axis("vthread"))
    s[output].bind(vy, te.thread_axis("vthread"))
    s[output].bind(vx, te.thread_axis("vthread"))
    s[output].bind(tf, te.thread_axis("threadIdx.z"))
    s[output].bind(ty, te.thread_axis("threadIdx.y"))
    s[output].bind(tx, te.thread_axis("threadIdx.x"))
    s[output].reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    s[OL].compute_at(s[output], tx)
    n, f, y, x = s[OL].op.axis
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rcm, rci = cfg["tile_rc"].apply(s, OL, rc)
    ryo, rym, ryi = cfg["tile_rx"].apply(s, OL, ry)
    rxo, rxm, rxi = cfg["tile_ry"].apply(s, OL, rx)
    s[OL].reorder(rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, n, f, y, x)
    s[AA].compute_at(s[OL], rxo)
    s[WW].compute_at(s[OL], rxo)
    s[AL].compute_at(s[OL], rxm)
    s[WL].compute_at(s[OL], rxm)
    for load in [AA, WW]:
        n, f, y, x = s[load].op.axis
        fused = s[load].fuse(n, f, y, x)
        tz, fused = s[load].split(fused, nparts=cfg["tile_f"].size[2])
        ty, fused = s[load].split(fused, nparts=cfg["tile_y"].size[2])
        tx, fused = s[load].split(fused, nparts=cfg["tile_x"].size[2])
        s[load].bind(tz, te.thread_axis("threadIdx.z"))
        s[load].bind(ty, te.thread_axis("threadIdx.y"))
        s[load].bind(tx, te.thread_axis("threadIdx.x"))
    s[output].pragma(kernel_scope, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    s[output].pragma(kernel_scope, "unroll_explicit", cfg["unroll_explicit"].val)
    return s, [raw_data, kernel, conv]

logging.getLogger("autotvm").setLevel(logging.DEBUG)
logging.getLogger("autotvm").addHandler(logging.StreamHandler(sys.stdout))
N, H, W, CO, CI, KH, KW, strides, padding = 1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)
task = autotvm.task.create("tutorial/conv2d_no_batching", args=(N, H, W, CO, CI, KH, KW, strides, padding), target="cuda")
print(task.config_space)
measure_option = autotvm.measure_option(builder=autotvm.LocalBuilder(), runner=autotvm.LocalRunner(repeat=3, min_repeat_ms=100, timeout=4))
record_file = None
if "--tune" in sys.argv:      # the tutorial's tuning step, commented out there ("takes too long")
    tuner = autotvm.tuner.XGBTuner(task)
    record_file = "conv2d.log"
    tuner.tune(
        n_trial=5,
        measure_option=measure_option,
        callbacks=[autotvm.callback.log_to_file(record_file)],
    )
dispatch_context = autotvm.apply_history_best(record_file)
best_config = dispatch_context.query(task.target, task.workload)
print("\nBest config:")
print(best_config)
with autotvm.apply_history_best(record_file):
    with tvm.target.Target("cuda"):
        s, arg_bufs = conv2d_no_batching(N, H, W, CO, CI, KH, KW, strides, padding)
        func = tvm.build(s, arg_bufs)

# check correctness
def check(N, H, W, CO, CI, KH, KW, strides, padding, func):
    a_np = np.random.uniform(size=(N, CI, H, W)).astype(np.float32)
    w_np = np.random.uniform(size=(CO, CI, KH, KW)).astype(np.float32)
    c_np = conv2d_nchw_python(a_np, w_np, strides, padding)
    c_out = np.full(c_np.shape, np.nan, dtype=np.float32)
    if GPU:
        dev = tvm.cuda()
        a_tvm = tvm.nd.array(a_np, device=dev)
        w_tvm = tvm.nd.array(w_np, device=dev)
        c_tvm = tvm.nd.array(c_out, device=dev)
        func(a_tvm, w_tvm, c_tvm)
        tvm.testing.assert_allclose(c_np, c_tvm.numpy(), rtol=1e-2)
        evaluator = func.time_evaluator(func.entry_name, dev, number=400)
        print("Time cost of this operator: %f" % evaluator(a_tvm, w_tvm, c_tvm).mean)
    else:
        from tilecraft.codegen.cuda_emulate import emulate
        emulate(func, [a_np, w_np, c_out])
        tvm.testing.assert_allclose(c_np, c_out, rtol=1e-4)


assert "__global__" in func.imported_modules[0].get_source()
if GPU:
    check(N, H, W, CO, CI, KH, KW, strides, padding, func)
else:
    small = (1, 7, 7, 8, 4, 3, 3, (1, 1), (1, 1))
    with autotvm.apply_history_best(record_file):
        with tvm.target.Target("cuda"):
            s, arg_bufs = conv2d_no_batching(*small)
            f = tvm.lower(s, arg_bufs, target="cuda", name="conv2d")
    check(*small, f)
print("OK")
