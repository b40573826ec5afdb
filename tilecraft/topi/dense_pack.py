"""A dense layer with weights packed ahead of time: ``C[M, N] = data[M, K] @ weight[N, K].T``,
the weight given as panels ``[N / nr, K, nr]`` (TVM's ``dense_pack.x86``), tensorized with the
fp32 FMA micro-kernel of ``cpu_intrinsics`` (AVX-512 or AVX2, picked from the host).

    import tilecraft.topi.dense_pack
    task = autotune.task.create("topi/dense_pack.llvm", args=(128, 3072, 768, "float32"), target="llvm")

The graph level packs a constant weight once, when the model is built (``AlterOpLayout`` turns
``nn.dense`` into ``nn.contrib_dense_pack``), so a run reads the panels and never repacks; an
element-wise epilogue (bias, GELU, a residual add) is computed per block, right after the
block's accumulation, while the block is still in cache.

The loop nest (BLIS's, as ``topi/matmul_tensorized.llvm``)::

    parallel for each (mc·mr × nc·nr) block of the output (fused; order knob)
      C block = 0
      for each kc slice of K
        for each nr panel of the block, for each mr rows
          micro-kernel: C[mr, nr] += data[mr, kc] · panel[kc, nr]   (accumulators in registers)
      out block = epilogue(C block)           (when the group has one; else C is the output)

Knobs: ``tile`` (``mr × nr``, the register tile; ``nr`` is also the packed weight's panel
width), ``kc``, ``mc_tiles``, ``nc_tiles``, ``order``, ``k_unroll``.
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.topi import cpu_intrinsics
from tilecraft.topi.matmul_microkernel import register_tiles


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def dense_pack_fits(M: int, N: int, K: int, dtype: str = "float32") -> bool:
    """Whether the graph level computes this dense layer with the template: float32, a target
    with FMA (AVX2 + FMA or AVX-512; without, the micro-kernel is correct but not fast) and a
    register tile of the target's vectors dividing ``M × N``.

    >>> dense_pack_fits(128, 3072, 768)                 # doctest: +SKIP
    True
    """
    isa = cpu_intrinsics.vector_isa()
    return dtype == "float32" and isa.name != "sse" and bool(register_tiles(isa, isa.lanes, M, N))


def dense_pack_config(cfg, M: int, N: int, K: int):
    """Define the template's knobs on ``cfg`` and return ``(mr, nr, kc, mc, nc, order,
    k_unroll)``: the tuned values, or the fallback's (a register tile of two vectors with about
    half the registers as accumulators, on AVX-512 of three vectors with 24 where they divide
    ``N``; ``kc`` 256, blocks of all rows up to 256 × one tile, columns outermost); None when
    the target's vectors do not divide ``N`` (no micro-kernel fits).

    >>> dense_pack_config(FallbackConfigEntity(), 128, 3072, 768)     # doctest: +SKIP
    (8, 48, 256, 16, 1, 'nm', 4)                                       # AVX-512 (AVX2: 4 x 16)
    """
    isa = cpu_intrinsics.vector_isa()
    tiles = register_tiles(isa, isa.lanes, M, N)
    if not tiles:
        return None
    cfg.define_knob("tile", tiles)
    cfg.define_knob("kc", [k for k in (64, 128, 192, 256, 384, 512, 768) if K % k == 0] or [K])
    cfg.define_knob("mc_tiles", [1, 2, 4, 8, 16])
    cfg.define_knob("nc_tiles", [1, 2, 4, 8])
    cfg.define_knob("order", ["mn", "nm"])
    cfg.define_knob("k_unroll", [1, 2, 4])
    cfg.multi_filter(lambda e: M % (e["tile"].val[0] * e["mc_tiles"].val) == 0
                     and N % (e["tile"].val[1] * e["nc_tiles"].val) == 0
                     and e["k_unroll"].val <= e["kc"].val)
    cfg.add_flop(2.0 * M * N * K)
    if cfg.is_fallback:
        lanes = isa.lanes

        def key(t):
            accs, vectors = t[0] * t[1] // lanes, t[1] // lanes
            if isa.registers >= 32 and vectors == 3:
                # AVX-512: 8 x 48 (24 accumulators, 3 B vectors: 11 loads per 24 FMAs against
                # 10 per 16 for 8 x 32) where it divides N: BERT's dense layers ran fastest
                # with it on Emerald Rapids (session 21's tuning log: 193 against 140-160
                # GFLOP/s; bench/relay_dense_variants.py, session 22: the layer's kernels 9.8
                # against 10.6 ms with 8 x 32)
                return accs <= 24, 2, accs
            return accs <= isa.registers // 2, int(vectors == 2), accs
        mr, nr = max(tiles, key=key)
        kc = 256 if K % 256 == 0 else max([k for k in (64, 128, 512) if K % k == 0] or [K])
        # blocks of up to 256 rows: a model's few rows (BERT's 128 tokens) are one block, so
        # each weight panel streams from memory once per run (in a model the weights are cold:
        # 4 blocks of rows took 20-30% longer than one block, cold, 128 x 3072 x 768)
        mc = max(t for t in (1, 2, 4, 8, 16) if M % (mr * t) == 0 and (mr * t <= 256 or t == 1))
        params = mr, nr, kc, mc, 1, "nm", 4 if kc % 4 == 0 else 1
        # recorded on the fallback too: tune_tasks measures it as the task's first candidate
        from tilecraft.autotune.space import OtherOptionEntity
        for name, val in zip(("tile", "kc", "mc_tiles", "nc_tiles", "order", "k_unroll"),
                             ((mr, nr), kc, mc, 1, "nm", params[6])):
            cfg[name] = OtherOptionEntity(val)
        return params
    (mr, nr), kc = cfg["tile"].val, cfg["kc"].val
    mc, nc = cfg["mc_tiles"].val, cfg["nc_tiles"].val
    if M % (mr * mc) or N % (nr * nc):
        cfg.raise_error(f"blocks of {mc} × {nc} tiles of {mr} × {nr} do not divide {M} × {N}")
    return mr, nr, kc, mc, nc, cfg["order"].val, cfg["k_unroll"].val


def dense_pack_compute(data, packed):
    """``C[i, j] = sum_k data[i, k] * packed[j // nr, k, j % nr]`` (``packed`` ``[N / nr, K, nr]``).

    >>> C = dense_pack_compute(data, packed)          # doctest: +SKIP
    """
    M, K = _ints(data.shape)
    nb, _, nr = _ints(packed.shape)
    k = te.reduce_axis((0, K), name="k")
    return te.compute((M, nb * nr), lambda i, j: te.sum(data[i, k] * packed[j // nr, k, j % nr], axis=k),
                      name="dense_pack")


def pack_weight(weight, nr: int):
    """A ``[N, K]`` numpy weight as the ``[N / nr, K, nr]`` panels :func:`dense_pack_compute` reads."""
    import numpy as np
    N, K = weight.shape
    return np.ascontiguousarray(weight.reshape(N // nr, nr, K).transpose(0, 2, 1))


def schedule_dense_pack(s, C, out, params) -> None:
    """Schedule :func:`dense_pack_compute`'s ``C`` (``params`` from :func:`dense_pack_config`),
    with ``out`` either ``C`` or an element-wise epilogue of the same shape whose other stages
    are inlined: then ``C`` is a per-block buffer accumulated inside ``out``'s blocks."""
    mr, nr, kc, mc, nc, order, k_unroll = params
    isa = cpu_intrinsics.vector_isa()
    mk = cpu_intrinsics.gemm_fp32(mr, nr, kc, isa=isa, a_layout="rows", unroll=min(k_unroll, kc))
    if out is not C:
        i, j = s[out].op.axis
        io, ii = s[out].split(i, factor=mr * mc)
        jo, ji = s[out].split(j, factor=nr * nc)
        jv, lane = s[out].split(ji, factor=isa.lanes)
        outer = [io, jo] if order == "mn" else [jo, io]
        s[out].reorder(*outer, ii, jv, lane)
        fused = s[out].fuse(*outer)
        s[out].parallel(fused)
        s[out].vectorize(lane)
        s[C].compute_at(s[out], fused)
        i, j = s[C].op.axis
        iio, mi = s[C].split(i, factor=mr)
        jio, ni = s[C].split(j, factor=nr)
        ko, kin = s[C].split(s[C].op.reduce_axis[0], factor=kc)
        s[C].reorder(ko, jio, iio, mi, ni, kin)
        s[C].tensorize(mi, mk)
        return
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=mr * mc)
    iio, mi = s[C].split(ii, factor=mr)
    jo, ji = s[C].split(j, factor=nr * nc)
    jio, ni = s[C].split(ji, factor=nr)
    ko, kin = s[C].split(s[C].op.reduce_axis[0], factor=kc)
    outer = [io, jo] if order == "mn" else [jo, io]
    s[C].reorder(*outer, ko, jio, iio, mi, ni, kin)
    s[C].parallel(s[C].fuse(*outer))
    s[C].tensorize(mi, mk)


@autotune.template("topi/dense_pack.llvm")
def dense_pack(M: int, N: int, K: int, dtype: str = "float32"):
    """``C[M, N] = data[M, K] @ weight.T`` with the weight pre-packed as ``[N / nr, K, nr]``
    panels (``nr`` from the config), fp32, on the target's FMA micro-kernel."""
    if dtype != "float32":
        raise ValueError(f"topi/dense_pack.llvm computes float32 (got dtype {dtype!r})")
    cfg = autotune.get_config()
    params = dense_pack_config(cfg, M, N, K)
    if params is None:
        raise ValueError(f"topi/dense_pack.llvm: N = {N} is not a multiple of the target's "
                         f"{cpu_intrinsics.vector_isa().lanes} lanes")
    nr = params[1]
    data = te.placeholder((M, K), name="data", dtype=dtype)
    packed = te.placeholder((N // nr, K, nr), name="packed_weight", dtype=dtype)
    C = dense_pack_compute(data, packed)
    s = te.create_schedule(C.op)
    schedule_dense_pack(s, C, C, params)
    return s, [data, packed, C]


# candidates of different panel widths (and the reference) measure the same weight, packed
dense_pack.input_recipe = lambda args: ("packed_panels", ())
