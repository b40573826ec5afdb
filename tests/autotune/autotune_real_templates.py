"""Templates compiled for real (by the LLVM backend), some of whose configs misbehave on purpose:
segfault (reads 4 GiB past an input, through ``i % n``, which lower's static index check does
not follow), hang (a 2^31-step reduction per element), or compute the
wrong thing. The fallback config (behaviour "ok") is what the reference is built from."""
import tilecraft.autotune as autotune
from tilecraft import te


@autotune.template("test/real_misbehaving_vadd")
def misbehaving_vadd(n):
    cfg = autotune.get_config()
    cfg.define_knob("behaviour", ["ok", "segfault", "hang", "wrong"])
    cfg.define_split("tile", n, num_outputs=2, policy="candidate", candidate=[[-1, 4], [-1, 8]])
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    b = cfg["behaviour"].val
    if b == "segfault":
        C = te.compute((n,), lambda i: A[i % n + (1 << 30)] + B[i], name="C")
    elif b == "hang":
        k = te.reduce_axis((0, (1 << 31) - 1), name="k")
        C = te.compute((n,), lambda i: te.sum(A[(i + k) % n] * B[i], axis=k), name="C")
    elif b == "wrong":
        C = te.compute((n,), lambda i: A[i] - B[i], name="C")
    else:
        C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    cfg["tile"].apply(s, C, C.op.axis[0])
    cfg.add_flop(n)
    return s, [A, B, C]


@autotune.template("test/real_matmul")
def small_matmul(n):
    cfg = autotune.get_config()
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg.define_annotate("ann", [y, x], policy="try_vec")
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, s[C].op.reduce_axis[0], yi, xi)
    cfg["ann"].apply(s, C, [yi, xi])
    return s, [A, B, C]
