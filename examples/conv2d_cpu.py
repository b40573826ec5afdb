"""2-D convolution, NCHW, 3x3 kernel, padding 1, stride 2. The padding is a stage of its own
that is inlined into the convolution (if_then_else guards the border reads); each (channel, row)
of the output is accumulated in a local buffer with the row vectorized, rows run in parallel.

    python examples/conv2d_cpu.py
"""
import time

import numpy as np

import tilecraft as tc
from tilecraft import te

N, C, H, W, F, K, pad, stride = 1, 16, 56, 56, 32, 3, 1, 2
OH, OW = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1

data = te.placeholder((N, C, H, W), name="data")
kernel = te.placeholder((F, C, K, K), name="kernel")
padded = te.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, h, w: te.if_then_else(
    te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), data[n, c, h - pad, w - pad], 0.0), name="padded")
rc = te.reduce_axis((0, C), name="rc")
ry = te.reduce_axis((0, K), name="ry")
rx = te.reduce_axis((0, K), name="rx")
conv = te.compute((N, F, OH, OW), lambda n, f, y, x: te.sum(
    padded[n, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")

s = te.create_schedule(conv.op)
s[padded].compute_inline()
CL = s.cache_write(conv, "local")                # accumulate one output row in a small buffer
n, f, y, x = conv.op.axis
fy = s[conv].fuse(f, y)
s[conv].parallel(fy)
s[CL].compute_at(s[conv], fy)
nc, fc, yc, xc = s[CL].op.axis
rc, ry, rx = s[CL].op.reduce_axis
s[CL].reorder(nc, fc, yc, rc, ry, rx, xc)          # the row innermost: one vector op per tap
s[CL].vectorize(xc)
s[CL].unroll(rx)

mod = tc.build(s, [data, kernel, conv], target="llvm", name="conv2d")
d = np.random.randn(N, C, H, W).astype("float32")
w = np.random.randn(F, C, K, K).astype("float32")
out = np.full((N, F, OH, OW), np.nan, "float32")
mod(d, w, out)

# numpy reference: sum over the 9 kernel taps of strided windows of the padded input
t0 = time.perf_counter()
dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
want = sum(np.einsum("nchw,fc->nfhw", dp[:, :, i:i + stride * OH:stride, j:j + stride * OW:stride], w[:, :, i, j])
           for i in range(K) for j in range(K))
t_np = time.perf_counter() - t0
tc.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
t = mod.time_evaluator(mod.entry_name, tc.cpu(0), number=10, repeat=3)(d, w, out).median
gflop = 2 * N * F * OH * OW * C * K * K / 1e9
print(f"conv2d {N}x{C}x{H}x{W} * {F}x{C}x{K}x{K}, pad {pad}, stride {stride} -> {out.shape}: "
      f"matches numpy; {t * 1e3:.2f} ms, {gflop / t:.1f} GFLOP/s (the numpy einsum reference: {t_np * 1e3:.2f} ms)")
