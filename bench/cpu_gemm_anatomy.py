"""Where a tensorized GEMM loses to the FMA peak: the micro-kernel alone, the blocked loop nest on
panels packed beforehand, the packing, and the whole template, each as a share of the peak that
the bench measures itself (``cpu_microkernels.fma_peak``), all in one process, in turns.

    python bench/cpu_gemm_anatomy.py                   # 1 thread, fp32 and int8, the default variants
    python bench/cpu_gemm_anatomy.py --threads 2 --only fp32 --rounds 5
    python bench/cpu_gemm_anatomy.py --asm             # also the micro-kernels' hot loops, counted
    python bench/cpu_gemm_anatomy.py --threads 2 --best best.json   # then: cpu_microkernels.py --knobs-from best.json

Rows (``--only``):

- ``fp32``: ``kernel MRxNR``: the micro-kernel ``gemm_fp32(mr, nr, kc, a_layout="panel")`` on one
  packed A panel and one B panel that stay in L1, repeated (``threads`` copies in parallel; its
  ``body`` form: C tiles written, never read); ``panels ...``: the template's blocked loop nest on
  A and B packed beforehand (C read and written per ``kc`` slice, A from L2, B from L1); ``pack
  A`` / ``pack B``: the packing stages alone (milliseconds); ``gemm ...``: the whole
  ``topi/matmul_tensorized.llvm`` with the named knobs.
- ``conv8``: ``topi/conv2d_nchwc_int8.llvm`` on conv2d 1×64×56×56, 64 filters 3×3 (the bench's),
  with the vector kernel's tuned config and, where the CPU has AMX, AMX tiles (knob ``amx``).
- ``int8``: ``kernel``: ``gemm_u8s8s32`` (VNNI, or the AVX2 / AVX512-BW form) and, where the CPU
  has AMX, ``cpu_amx``'s kernel, each on L1-resident operands, in int-ops/s beside the FMA peak's
  FLOP/s ×4 (``vpdpbusd`` does 4 products where an FMA does 1; AMX is not bound by it); ``dense
  ...``: ``topi/dense_int8.llvm`` with the named knobs, the weights packed beforehand (``packed
  weight``) and, for the tuned configs, also in the call.

A gap between ``kernel`` and ``panels`` is the loop nest (C traffic, L2), between ``panels`` and
``gemm`` the packing. On a shared machine compare rows of one run only; the medians of
``--rounds`` rounds are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
N = 1024
# (mr, nr, unroll, kc): kc 128 as well, since at 256 a 32-wide B slice (32 KB) and the A panel
# nearly fill a 48 KB L1 (Emerald Rapids ran every kernel at 61-77% of its FMA peak at 256)
FP32_KERNELS = [(8, 32, 4, 256), (14, 32, 1, 256), (6, 64, 2, 256), (12, 32, 2, 256), (28, 16, 1, 256),
                (8, 32, 4, 128), (12, 32, 2, 128), (14, 32, 1, 128), (6, 64, 2, 128)]
FP32_GEMMS = {  # the tuned config of the quiet Emerald Rapids run (session 19), and variants
    "8x32 er-tuned": dict(tile=(8, 32), kc=256, mc_tiles=32, nc_tiles=8, order="nm", k_unroll=4,
                          pack_a=1, pack_b=1, c_block=0),
    "8x32 c_block": dict(tile=(8, 32), kc=256, mc_tiles=32, nc_tiles=8, order="nm", k_unroll=4,
                         pack_a=1, pack_b=1, c_block=1),
    "8x32 kc1024 c_block": dict(tile=(8, 32), kc=1024, mc_tiles=8, nc_tiles=4, order="nm", k_unroll=4,
                                pack_a=1, pack_b=1, c_block=1),
    "14x32 padded": dict(tile=(14, 32), kc=256, mc_tiles=2, nc_tiles=8, order="nm", k_unroll=1,
                         pack_a=1, pack_b=1, c_block=1),
    "6x64 padded": dict(tile=(6, 64), kc=256, mc_tiles=1, nc_tiles=4, order="nm", k_unroll=2,
                        pack_a=1, pack_b=1, c_block=1),
    # the packed A panel prefetched 1 KB ahead (knob a_prefetch)
    "14x32 padded prefetch": dict(tile=(14, 32), kc=256, mc_tiles=2, nc_tiles=8, order="nm", k_unroll=1,
                                  pack_a=1, pack_b=1, c_block=1, a_prefetch=1024),
    "8x32 c_block prefetch": dict(tile=(8, 32), kc=256, mc_tiles=32, nc_tiles=8, order="nm", k_unroll=4,
                                  pack_a=1, pack_b=1, c_block=1, a_prefetch=1024),
    # the fastest kernel alone on Emerald Rapids (12 x 32), and the L1-sized kc 128
    "12x32 padded": dict(tile=(12, 32), kc=256, mc_tiles=4, nc_tiles=8, order="nm", k_unroll=2,
                         pack_a=1, pack_b=1, c_block=1),
    "12x32 padded kc128": dict(tile=(12, 32), kc=128, mc_tiles=4, nc_tiles=8, order="nm", k_unroll=2,
                               pack_a=1, pack_b=1, c_block=1),
    "8x32 c_block kc128": dict(tile=(8, 32), kc=128, mc_tiles=32, nc_tiles=8, order="nm", k_unroll=4,
                               pack_a=1, pack_b=1, c_block=1),
    # the best of session 21's 48-trial tuning on Emerald Rapids (221 GFLOP/s, not quiet: the
    # untuned default on Intel AVX-512 until session 23, whose default is "8x32 kc1024 c_block"), and
    # blockings for its 48 KB L1d / 2 MB L2: the kc x nr B slice in L1 beside the A panel, the
    # mc*mr x kc A block and the kc x nc*nr B block in L2
    "8x32 generic fallback": dict(tile=(8, 32), kc=256, mc_tiles=4, nc_tiles=4, order="mn", k_unroll=4,
                                  pack_a=0, pack_b=1, c_block=0),   # the untuned default off Intel
    "8x32 s21-tuned": dict(tile=(8, 32), kc=256, mc_tiles=32, nc_tiles=4, order="nm", k_unroll=4,
                           pack_a=1, pack_b=1, c_block=0),
    "8x32 kc128 nc16": dict(tile=(8, 32), kc=128, mc_tiles=32, nc_tiles=16, order="nm", k_unroll=4,
                            pack_a=1, pack_b=1, c_block=0),
    "12x32 padded kc128 u4": dict(tile=(12, 32), kc=128, mc_tiles=4, nc_tiles=16, order="nm", k_unroll=4,
                                  pack_a=1, pack_b=1, c_block=1),
    "6x64 padded kc128": dict(tile=(6, 64), kc=128, mc_tiles=4, nc_tiles=2, order="nm", k_unroll=4,
                              pack_a=1, pack_b=1, c_block=1),
    # (session 23) C blocks over more of K (fewer passes of C through the kernels: kc 512 and the
    # whole 1024, the B slice then in L2), for Emerald Rapids' 2-core runs
    "8x32 kc512 c_block": dict(tile=(8, 32), kc=512, mc_tiles=16, nc_tiles=4, order="nm", k_unroll=4,
                               pack_a=1, pack_b=1, c_block=1),
    "8x32 kc1024 16x4": dict(tile=(8, 32), kc=1024, mc_tiles=16, nc_tiles=4, order="nm", k_unroll=4,
                             pack_a=1, pack_b=1, c_block=0),
    "12x32 padded kc512": dict(tile=(12, 32), kc=512, mc_tiles=4, nc_tiles=8, order="nm", k_unroll=2,
                               pack_a=1, pack_b=1, c_block=1),
    "6x64 padded kc512": dict(tile=(6, 64), kc=512, mc_tiles=4, nc_tiles=2, order="nm", k_unroll=4,
                              pack_a=1, pack_b=1, c_block=1),
}
INT8_DENSES = {
    # amx_tile (0, 0): the vector kernel where the target has AMX (the knob exists only there)
    "vnni 8x32": dict(tile=(8, 32), kc=256, mc_tiles=32, nc_tiles=8, order="nm", k_unroll=4, amx_tile=(0, 0)),
    "vnni 8x16 er-tuned": dict(tile=(8, 16), kc=1024, mc_tiles=4, nc_tiles=16, order="mn", k_unroll=1,
                               amx_tile=(0, 0)),
    # (session 23) C tiles over the whole K (the intrinsic's body: no reset, no C loads), the
    # untuned default since (matmul_microkernel.int8_fallback_knobs); the 4 x 64 tile (16 zmm)
    "vnni 8x32 kc1024 (fallback)": dict(tile=(8, 32), kc=1024, mc_tiles=16, nc_tiles=4, order="nm", k_unroll=4,
                                        amx_tile=(0, 0)),
    "vnni 8x32 kc1024 8x8 mn": dict(tile=(8, 32), kc=1024, mc_tiles=8, nc_tiles=8, order="mn", k_unroll=4,
                                    amx_tile=(0, 0)),
    "vnni 4x64 kc1024": dict(tile=(4, 64), kc=1024, mc_tiles=8, nc_tiles=4, order="mn", k_unroll=4,
                             amx_tile=(0, 0)),
}
CONV8 = (1, 64, 56, 56, 64, 3, 3, 1, 1)       # bench/cpu_microkernels.py's conv2d, int8
CONV8_CONFIGS = {   # the quiet Emerald Rapids tuned config (session 19, vector kernel), and AMX tiles
    "vector er-tuned": dict(tile_ic=16, tile_oc=16, tile_ow=8, ic_outer=False, k_unroll=4, amx=False),
}
CONV8_AMX_CONFIGS = {
    "amx 28x16": dict(tile_ic=64, tile_oc=16, tile_ow=28, ic_outer=False, k_unroll=1, amx=True),
    "amx 28x32": dict(tile_ic=64, tile_oc=32, tile_ow=28, ic_outer=False, k_unroll=1, amx=True),
    "amx 14x32": dict(tile_ic=64, tile_oc=32, tile_ow=14, ic_outer=False, k_unroll=1, amx=True),
    # the tile configuration kept across calls (amx_config "kept"): 9 steps a call here
    "amx 28x16 kept": dict(tile_ic=64, tile_oc=16, tile_ow=28, ic_outer=False, k_unroll=1, amx=True),
    "amx 14x32 kept": dict(tile_ic=64, tile_oc=32, tile_ow=14, ic_outer=False, k_unroll=1, amx=True),
}
AMX_DENSES = {
    "amx 32x32 er-tuned": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn"),
    "amx 32x32 kc256": dict(amx_tile=(32, 32), kc=256, mc_tiles=8, nc_tiles=8, order="nm"),
    "amx 32x16 kc1024": dict(amx_tile=(32, 16), kc=1024, mc_tiles=8, nc_tiles=8, order="mn"),
    "amx 32x32 kc1024 prefetch A": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn",
                                        amx_prefetch=1),
    "amx 32x32 kc1024 prefetch A+B": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn",
                                          amx_prefetch=2),
    # the tile configuration kept across calls (amx_config "kept"): the same configs, and smaller
    # kc (A and B in L1) that per-call configurations made too costly
    "amx 32x32 kc1024 prefetch A+B kept": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn",
                                               amx_prefetch=2),
    "amx 32x32 er-tuned kept": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn"),
    "amx 32x32 kc256 kept": dict(amx_tile=(32, 32), kc=256, mc_tiles=8, nc_tiles=8, order="nm"),
    "amx 32x32 kc512 prefetch A kept": dict(amx_tile=(32, 32), kc=512, mc_tiles=4, nc_tiles=16, order="mn",
                                            amx_prefetch=1),
    # and A packed in the call into 64-K panels (amx_a "panels": each A tile one contiguous KB)
    "amx 32x32 kc1024 prefetch A+B kept panels": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16,
                                                      order="mn", amx_prefetch=2),
    "amx 32x32 kc256 kept panels": dict(amx_tile=(32, 32), kc=256, mc_tiles=8, nc_tiles=8, order="nm"),
    "amx 32x32 kc512 prefetch A kept panels": dict(amx_tile=(32, 32), kc=512, mc_tiles=4, nc_tiles=16,
                                                   order="mn", amx_prefetch=1),
    # (session 23) C zeroed in the tiles (amx_c "zeroed", the default of every row above) or zeros
    # stored and loaded ("loaded", session 22's); C blocks over the whole K (kc 1024: one call a
    # block, every call from zeroed tiles), other blockings of it
    "amx 32x32 er-tuned kept loaded": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn"),
    "amx 32x32 kc256 kept loaded": dict(amx_tile=(32, 32), kc=256, mc_tiles=8, nc_tiles=8, order="nm"),
    "amx 32x32 kc1024 8x8 nm kept": dict(amx_tile=(32, 32), kc=1024, mc_tiles=8, nc_tiles=8, order="nm"),
    "amx 32x32 kc1024 16x2 nm kept": dict(amx_tile=(32, 32), kc=1024, mc_tiles=16, nc_tiles=2, order="nm"),
    "amx 32x16 kc1024 kept": dict(amx_tile=(32, 16), kc=1024, mc_tiles=8, nc_tiles=8, order="mn"),
    "amx 32x32 kc1024 prefetch A kept": dict(amx_tile=(32, 32), kc=1024, mc_tiles=4, nc_tiles=16, order="mn",
                                             amx_prefetch=1),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--only", default="fp32,int8,conv8")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--asm", action="store_true", help="print the micro-kernels' hot loops, counted")
    p.add_argument("--match", default="", metavar="REGEX", help="only the rows whose names match (re.search; "
                   "the FMA peak always), e.g. 'kc1024|er-tuned'")
    p.add_argument("--best", metavar="FILE", help="write the fastest whole-template variant of each family "
                   "as JSON {workload: knobs} for bench/cpu_microkernels.py --knobs-from FILE")
    return p.parse_args(argv)


def config(task, **values):
    """The config of ``task``'s space with these knob values (a split's: its innermost factor;
    knobs the space lacks, such as ``amx_tile`` off AMX targets, are ignored; the others: their
    first value)."""
    space = task.config_space
    knob = []
    for name, sub in space.space_map.items():
        vals = [sub[i].size[-1] if hasattr(sub[i], "size") else getattr(sub[i], "val", sub[i])
                for i in range(len(sub))]
        if name in values and values[name] not in vals:
            raise ValueError(f"{task.name}: knob {name} has no value {values[name]!r} here; its values: {vals}")
        knob.append(vals.index(values[name]) if name in values else 0)
    return space.get(space.knob2point(knob))


def kernel_alone_fp32(mr, nr, unroll, threads, kc=256, repeat=512):
    """The fp32 micro-kernel on one A panel and one B panel (L1), ``repeat`` times per thread."""
    import numpy as np
    import tilecraft as tc
    from tilecraft import te
    from tilecraft.topi import cpu_intrinsics

    Ap = te.placeholder((kc, mr), name="Ap")
    Bp = te.placeholder((kc, nr), name="Bp")
    k = te.reduce_axis((0, kc), name="k")
    C = te.compute((threads, repeat, mr, nr), lambda t, r, i, j: te.sum(Ap[k, i] * Bp[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].parallel(s[C].op.axis[0])
    s[C].tensorize(s[C].op.axis[2], cpu_intrinsics.gemm_fp32(mr, nr, kc, a_layout="panel", unroll=unroll))
    mod = tc.build(s, [Ap, Bp, C], target="llvm")
    a, b = np.random.rand(kc, mr).astype("float32"), np.random.rand(kc, nr).astype("float32")
    c = np.zeros((threads, repeat, mr, nr), "float32")
    return (lambda: mod(a, b, c)), 2.0 * threads * repeat * mr * nr * kc, mod


def kernel_alone_int8(mr, nr, threads, amx, kc=256, repeat=512, prefetch=0, keep_config=False, a_panels=False,
                      zero_c=False):
    """The int8 micro-kernel (VNNI or AMX) on L1-resident operands, ``repeat`` times per thread
    (each call the whole ``kc``: the intrinsic's body; AMX ``zero_c``: C tiles zeroed in the
    tile registers, else zeros stored to C and loaded)."""
    import numpy as np
    import tilecraft as tc
    from tilecraft import te
    from tilecraft.topi import cpu_amx, cpu_intrinsics

    a = te.placeholder((kc // 64, mr, 64) if a_panels else (mr, kc), "uint8", name="a")
    b = te.placeholder((kc // 4, nr, 4), "int8", name="b")
    k4 = te.reduce_axis((0, kc // 4), name="k4")
    kb = te.reduce_axis((0, 4), name="kb")
    a_at = (lambda i: a[k4 // 16, i, k4 % 16 * 4 + kb]) if a_panels else (lambda i: a[i, k4 * 4 + kb])
    C = te.compute((threads, repeat, mr, nr), lambda t, r, i, j: te.sum(
        a_at(i).astype("int32") * b[k4, j, kb].astype("int32"), axis=[k4, kb]), name="C")
    s = te.create_schedule(C.op)
    t = s[C].op.axis[0]
    s[C].parallel(t)
    mk = cpu_amx.gemm_u8s8s32_amx(mr, nr, kc, prefetch=prefetch, keep_config=keep_config,
                                  a_panels=a_panels, zero_c=zero_c) if amx else \
        cpu_intrinsics.gemm_u8s8s32(mr, nr, kc, unroll=4)
    s[C].tensorize(s[C].op.axis[2], mk)
    if amx:
        s[C].pragma(t, "import_llvm", cpu_amx.amx_kernel_ir(mr, nr, prefetch, keep_config, a_panels, zero_c))
    mod = tc.build(s, [a, b, C], target="llvm")
    x = np.random.randint(0, 256, (kc // 64, mr, 64) if a_panels else (mr, kc)).astype("uint8")
    w = np.random.randint(-128, 128, (kc // 4, nr, 4)).astype("int8")
    c = np.zeros((threads, repeat, mr, nr), "int32")
    return (lambda: mod(x, w, c)), 2.0 * threads * repeat * mr * nr * kc, mod


def panels_fp32(knobs):
    """The template's loop nest (``knobs``) on A and B packed beforehand."""
    import numpy as np
    import tilecraft as tc
    from tilecraft import te
    from tilecraft.topi import cpu_intrinsics
    from tilecraft.topi.matmul_microkernel import _schedule_gemm, _schedule_gemm_blocked, padded_rows

    (mr, nr), kc, mc, nc = knobs["tile"], knobs["kc"], knobs["mc_tiles"], knobs["nc_tiles"]
    Mp = padded_rows(N, mr, mc) if knobs["c_block"] else N
    Ap = te.placeholder((Mp // mr, N, mr), name="Ap")
    Bp = te.placeholder((N // nr, N, nr), name="Bp")
    k = te.reduce_axis((0, N), name="k")
    pf = knobs.get("a_prefetch", 0)
    mk = cpu_intrinsics.gemm_fp32(mr, nr, kc, a_layout="panel", unroll=knobs["k_unroll"], prefetch=pf)
    if knobs["c_block"]:
        CC = te.compute((Mp, N), lambda i, j: te.sum(Ap[i // mr, k, i % mr] * Bp[j // nr, k, j % nr], axis=k),
                        name="C.block")
        C = te.compute((N, N), lambda i, j: CC[i, j], name="C")
        s = te.create_schedule(C.op)
        outer = _schedule_gemm_blocked(s, C, CC, mr, nr, mc, nc, [kc], knobs["order"], mk,
                                       cpu_intrinsics.vector_isa().lanes)
    else:
        C = te.compute((N, N), lambda i, j: te.sum(Ap[i // mr, k, i % mr] * Bp[j // nr, k, j % nr], axis=k), name="C")
        s = te.create_schedule(C.op)
        outer = _schedule_gemm(s, C, mr, nr, mc, nc, [kc], knobs["order"], mk)
    if pf:
        s[C].pragma(outer, "import_llvm", cpu_intrinsics.PREFETCH_IR)
    mod = tc.build(s, [Ap, Bp, C], target="llvm")
    a = np.random.rand(Mp // mr, N, mr).astype("float32")
    b = np.random.rand(N // nr, N, nr).astype("float32")
    c = np.zeros((N, N), "float32")
    return lambda: mod(a, b, c)


def packing_fp32(mr, nr):
    """The template's packing stages alone: ``(pack A, pack B)`` callables."""
    import numpy as np
    import tilecraft as tc
    from tilecraft import te

    A = te.placeholder((N, N), name="A")
    Ap = te.compute((N // mr, N, mr), lambda x, y, z: A[x * mr + z, y], name="packedA")
    s = te.create_schedule(Ap.op)
    s[Ap].parallel(s[Ap].op.axis[0])
    ma = tc.build(s, [A, Ap], target="llvm")
    Bp = te.compute((N // nr, N, nr), lambda x, y, z: A[y, x * nr + z], name="packedB")
    s = te.create_schedule(Bp.op)
    x, _, z = s[Bp].op.axis
    s[Bp].vectorize(z)
    s[Bp].parallel(x)
    mb = tc.build(s, [A, Bp], target="llvm")
    a = np.random.rand(N, N).astype("float32")
    pa, pb = np.zeros((N // mr, N, mr), "float32"), np.zeros((N // nr, N, nr), "float32")
    return (lambda: ma(a, pa)), (lambda: mb(a, pb))


def template(name, args, knobs):
    """The module of template ``name`` with ``knobs``, built for the host."""
    import tilecraft as tc
    import tilecraft.autotune as autotune
    import tilecraft.topi.matmul_microkernel  # noqa: F401  (registers the templates)

    task = autotune.task.create(name, args=args, target="llvm")
    with tc.target.Target("llvm"):
        s, tensors = task.instantiate(config(task, **knobs))
    return tc.build(s, tensors, target="llvm")


def gemm_fp32(knobs, asm_notes=None, row=None):
    import numpy as np
    mod = template("topi/matmul_tensorized.llvm", (N, N, N, "float32"), knobs)
    if asm_notes is not None:
        asm_notes[row] = hot_loop_summary(mod, "vfmadd")
    a, b = np.random.uniform(-1, 1, (N, N)).astype("float32"), np.random.uniform(-1, 1, (N, N)).astype("float32")
    c = np.full((N, N), np.nan, "float32")
    mod(a, b, c)
    err = np.abs(c - a.astype(np.float64) @ b).max()
    assert err < 1e-3, f"fp32 GEMM {knobs}: wrong by {err}"
    return lambda: mod(a, b, c)


def dense_int8(knobs, packed_weight=False, amx_config="call", amx_a="rows", amx_c="zeroed"):
    import numpy as np
    args = (N, N, N, "packed" if packed_weight else "NK", amx_config, amx_a, amx_c)
    mod = template("topi/dense_int8.llvm", args, knobs)
    x = np.random.randint(0, 256, (N, N)).astype("uint8")
    w = np.random.randint(-128, 128, (N, N)).astype("int8")
    if packed_weight:
        from tilecraft.topi.matmul_microkernel import dense_int8_pack_weight
        nr = knobs["amx_tile"][1] if knobs.get("amx_tile", (0, 0))[0] else knobs["tile"][1]
        wt = dense_int8_pack_weight(w, nr)
    else:
        wt = w
    c = np.full((N, N), -7, "int32")
    mod(x, wt, c)
    assert (c == x.astype(np.int64) @ w.astype(np.int64).T).all(), f"int8 dense {knobs} is not exact"
    return lambda: mod(x, wt, c)


def conv_int8(knobs, amx_config="call"):
    import numpy as np
    import tilecraft.topi.conv2d_microkernel  # noqa: F401  (registers the template)
    N_, CI, H, W, CO, KH, KW, stride, pad = CONV8
    mod = template("topi/conv2d_nchwc_int8.llvm", CONV8 + (amx_config,), knobs)
    x = np.random.randint(0, 256, (N_, CI, H, W)).astype("uint8")
    w = np.random.randint(-128, 128, (CO, CI, KH, KW)).astype("int8")
    out = np.full((N_, CO, H, W), -7, "int32")
    mod(x, w, out)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = sum(np.einsum("nchw,oc->nohw", xp[:, :, r:r + H, q:q + W], w[:, :, r, q].astype(np.int64))
               for r in range(KH) for q in range(KW))
    assert (out == want).all(), f"int8 conv2d {knobs} is not exact"
    return lambda: mod(x, w, out)


def hot_loop_summary(mod, mnemonic: str) -> str:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from microkernel_asm import hot_loop, report
    r = report(hot_loop(mod.get_source("asm"), mnemonic), mnemonic)
    return (f"{r.updates} {mnemonic} into {r.accumulators} registers, {r.broadcasts} broadcasts, "
            f"{r.text.count('prefetch')} prefetches, {len(r.text.splitlines())} instructions, "
            f"{r.stack} stack accesses")


def best_variants(times: dict, variants: dict) -> dict:
    """``{workload: knobs}`` of the fastest timed row of each family (``variants``: row name →
    ``(workload, knobs)``, the workloads of ``bench/cpu_microkernels.py``).

    >>> best_variants({"a": 2.0, "b": 1.0}, {"a": ("gemm", {"kc": 1}), "b": ("gemm", {"kc": 2})})
    {'gemm': {'kc': 2}}
    """
    best = {}
    for row, (key, knobs) in variants.items():
        if row in times and (key not in best or times[row] < times[best[key]]):
            best[key] = row
    return {key: variants[row][1] for key, row in best.items()}


def time_rows(rows: dict, rounds: int) -> dict:
    """``{name: (fn, work)}`` → ``{name: median seconds per call}``, timed in turns."""
    seconds = {k: [] for k in rows}
    number = {}
    for name, (fn, _) in rows.items():
        fn()
        t0 = time.perf_counter()
        fn()
        number[name] = max(1, round(0.15 / max(time.perf_counter() - t0, 1e-6)))
    for _ in range(rounds):
        for name, (fn, _) in rows.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(number[name]):
                fn()
            seconds[name].append((time.perf_counter() - t0) / number[name])
    return {k: statistics.median(v) for k, v in seconds.items()}


def main(argv=None):
    args = parse_args(argv)
    os.environ["TILECRAFT_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cpu_microkernels
    import llvmlite.binding as llvm
    from tilecraft.topi.cpu_intrinsics import vector_isa

    isa = vector_isa("llvm")
    only = args.only.split(",")
    print(f"# {llvm.get_host_cpu_name()}, ISA {isa}, {args.threads} thread(s), medians of {args.rounds} rounds, "
          f"{cpu_microkernels.load()}", flush=True)
    rows, flops, notes = {}, {}, {}
    variants = {}       # whole-template rows: name -> (bench/cpu_microkernels.py workload, knobs)
    fn, flop = cpu_microkernels.fma_peak(args.threads)
    rows["FMA peak"], flops["FMA peak"] = (fn, flop), flop
    gemm_flop = 2.0 * N ** 3
    wanted = re.compile(args.match).search if args.match else (lambda name: True)
    if "fp32" in only:
        for mr, nr, u, kc in FP32_KERNELS:
            name = f"kernel {mr}x{nr} u{u}" + (f" kc{kc}" if kc != 256 else "")
            if nr % isa.lanes or mr * nr // isa.lanes + nr // isa.lanes + 1 > isa.registers or not wanted(name):
                continue
            fn, flop, mod = kernel_alone_fp32(mr, nr, u, args.threads, kc=kc)
            rows[name], flops[name] = (fn, flop), flop
            if args.asm:
                notes[name] = hot_loop_summary(mod, "vfmadd")
        if wanted("pack A (8-row panels)"):
            pa, pb = packing_fp32(8, 32)
            rows["pack A (8-row panels)"], rows["pack B (32-wide panels)"] = (pa, 0), (pb, 0)
        for name, knobs in FP32_GEMMS.items():
            if knobs["tile"][1] % isa.lanes:
                continue
            if wanted(f"panels {name}"):
                rows[f"panels {name}"], flops[f"panels {name}"] = (panels_fp32(knobs), gemm_flop), gemm_flop
            if wanted(f"gemm {name}"):
                fn = gemm_fp32(knobs, notes if args.asm else None, f"gemm {name}")
                rows[f"gemm {name}"], flops[f"gemm {name}"] = (fn, gemm_flop), gemm_flop
                variants[f"gemm {name}"] = ("gemm", knobs)
    if "int8" in only and isa.int8:
        lanes = isa.int8_lanes
        if wanted(f"kernel int8 {isa.int8} 8x{2 * lanes}"):
            fn, flop, mod = kernel_alone_int8(8, 2 * lanes, args.threads, amx=False)
            rows[f"kernel int8 {isa.int8} 8x{2 * lanes}"], flops[f"kernel int8 {isa.int8} 8x{2 * lanes}"] = (fn, flop), flop
            if args.asm:
                notes[f"kernel int8 {isa.int8} 8x{2 * lanes}"] = hot_loop_summary(mod, "vpdpbusd" if "vnni" in isa.int8 else "vpmadd")
        if isa.amx:
            # kc 1024: A and B (64 KB) overflow a 48 KB L1; 256 fits (16 KB), but the C tiles are
            # loaded and stored 4 times as often
            # (session 23) the configuration kept, C zeroed in the tiles or stored as zeros and loaded
            for mr, nr, pf, kc, keep, zero in ((32, 32, 0, 1024, False, False), (32, 16, 0, 1024, False, False),
                                               (32, 32, 1, 1024, False, False), (32, 32, 0, 256, False, False),
                                               (32, 16, 0, 256, False, False),
                                               (32, 32, 0, 256, True, False), (32, 32, 0, 256, True, True),
                                               (32, 32, 0, 1024, True, False), (32, 32, 0, 1024, True, True),
                                               (32, 32, 1, 1024, True, True)):
                row = (f"kernel int8 amx {mr}x{nr}" + (f" prefetch {pf}" if pf else "") + f" kc{kc}"
                       + (" kept" if keep else "") + (" zeroed" if zero else ""))
                if not wanted(row):
                    continue
                fn, flop, _ = kernel_alone_int8(mr, nr, args.threads, amx=True, kc=kc, prefetch=pf,
                                                keep_config=keep, zero_c=zero)
                rows[row], flops[row] = (fn, flop), flop
        denses = dict(INT8_DENSES)
        if isa.amx:
            denses.update(AMX_DENSES)
        for name, knobs in denses.items():
            if "tile" in knobs and knobs["tile"][1] % lanes:
                continue
            for packed in (False, True) if "er-tuned" in name else (True,):
                row = f"dense {name}{' packed weight' if packed else ''}"
                if not wanted(row):
                    continue
                kept = "kept" if " kept" in name else "call"
                a_layout = "panels" if " panels" in name else "rows"
                amx_c = "loaded" if " loaded" in name else "zeroed"
                rows[row], flops[row] = (dense_int8(knobs, packed, kept, a_layout, amx_c), gemm_flop), gemm_flop
                # bench/cpu_microkernels.py times the int8 GEMM on packed weights with the template's
                # defaults (the configuration kept, C zeroed; A in place, or in panels: its amx_a)
                if packed and (kept == "kept" and amx_c == "zeroed" or "amx" not in name):
                    variants[row] = ("int8", dict(knobs, amx_a="panels") if a_layout == "panels" else knobs)
    if "conv8" in only and isa.int8:
        N_, CI, H, W, CO, KH, KW, _, _ = CONV8
        conv_flop = 2.0 * N_ * CO * H * W * CI * KH * KW
        for name, knobs in {**CONV8_CONFIGS, **(CONV8_AMX_CONFIGS if isa.amx else {})}.items():
            kept = "kept" if name.endswith(" kept") else "call"
            if not wanted(f"conv int8 {name}"):
                continue
            rows[f"conv int8 {name}"], flops[f"conv int8 {name}"] = (conv_int8(knobs, kept), conv_flop), conv_flop
            if kept == "call":
                variants[f"conv int8 {name}"] = ("conv8", knobs)
    times = time_rows(rows, args.rounds)
    peak = flops["FMA peak"] / times["FMA peak"] / 1e9
    for name, t in times.items():
        if name in flops and name != "FMA peak":
            g = flops[name] / t / 1e9
            share = f"{100 * g / peak:5.0f}% of the FMA peak" if "int8" not in name and "dense" not in name \
                else f"{g / peak:5.2f}x the FMA peak's FLOP/s"
            print(f"  {name:<40}{g:8.1f} G/s  {share}  ({1e3 * t:.3f} ms)")
        elif name != "FMA peak":
            print(f"  {name:<40}{'':8} {1e3 * t:.3f} ms")
        else:
            print(f"  {'FMA peak':<40}{peak:8.1f} GFLOP/s")
        if name in notes:
            print(f"    hot loop: {notes[name]}")
    if args.best:
        best = best_variants(times, variants)
        with open(args.best, "w") as f:
            json.dump(best, f)
        print(f"# fastest variants -> {args.best}: {json.dumps(best)}")
    print(f"# done, {cpu_microkernels.load()}", flush=True)


if __name__ == "__main__":
    main()
