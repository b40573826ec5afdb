"""GEMM templates built on the CPU micro-kernels of ``cpu_intrinsics``: fp32 ``C = A @ B`` and
int8 dense ``C = data @ weight.T`` (``uint8 × int8 → int32``), tensorized for the target's ISA.

    import tilecraft.topi.matmul_microkernel
    task = autotune.task.create("topi/matmul_tensorized.llvm", args=(1024, 1024, 1024, "float32"),
                                target="llvm")

The loop nest is the classic blocked GEMM (BLIS's loops around a register-tile micro-kernel)::

    pack B into [N / nr, K, nr] panels (fp32)  |  [N / nr, K / 4, nr, 4] (int8: the VNNI layout)
    pack A into [Mp / mr, K, mr] panels         (fp32, knob pack_a; Mp: M padded with zero rows)
    parallel for each (mc × nc) block of C      (fused; the order of the two is a knob)
      C block = 0                               (the intrinsic's reset)
      for each kc slice of K
        for each nr column panel of the block   (its kc × nr slice of B stays in L1)
          for each mr row panel                 (the A block, mc × kc, stays in L2)
            micro-kernel: C[mr, nr] += A[mr, kc] · B[kc, nr]   (accumulators in registers)
      (c_block: the block is a compact buffer of mc·mr × nc·nr, copied into C at the end)

Knobs: ``tile`` (``mr × nr``: the register tile; every pair whose accumulators, B vectors and
a broadcast fit the vector registers, with at least 8 accumulators to cover the FMA latency,
``nr`` dividing N and ``mr`` dividing M, and for fp32 also the tiles that fill the register
file without dividing M: 14 × 32, 6 × 64 on AVX-512), ``kc`` (a divisor of K: the L1/L2 slice),
``mc_tiles`` / ``nc_tiles`` (the block, in register tiles: L2 and the parallel grain),
``order`` (rows of blocks or columns of blocks outermost), ``k_unroll`` (micro-kernel steps per
loop iteration), ``pack_a`` (fp32: A in ``mr``-row panels, so a step's broadcasts are
contiguous), ``pack_b`` (fp32: B in ``nr``-wide panels, or read in place), ``c_block`` (fp32:
each block of C computed in a compact buffer and copied out; required where M is padded, which
also needs ``pack_a``), ``a_prefetch`` (fp32, with ``pack_a``: bytes ahead in the A panel that
each step prefetches, or 0). The int8 template packs the weights in the call or takes them packed
(``weight_layout="packed"``, :func:`dense_int8_pack_weight`); the layout is the instruction's. Its
output is int32, or uint8 requantized as PyTorch's quantized Linear's (``requant_scale``).
"""
from __future__ import annotations

import tilecraft.autotune as autotune
from tilecraft import te
from tilecraft.topi import cpu_amx, cpu_intrinsics


A_PREFETCH = (0, 1024)    # knob a_prefetch: bytes ahead in the packed A panel (0: none)


def register_tiles(isa, acc_lanes: int, m: int, n: int, b_regs_extra: int = 1,
                   pad_m: bool = False) -> list[tuple[int, int]]:
    """``(mr, nr)`` register tiles for ``isa``: ``nr`` 1-4 vectors of ``acc_lanes``, ``mr`` rows,
    ``mr * nr / lanes`` accumulators + ``nr / lanes`` B vectors + ``b_regs_extra`` broadcast
    registers within the register file, at least 8 accumulators (or the whole matrix), ``nr``
    dividing ``n`` and ``mr`` dividing ``m``; with ``pad_m`` (the template pads M to the tile)
    also the tiles of 2 or more vectors that do not divide ``m`` but (nearly) fill the register
    file (within 5 registers: 12-14 × 32 and 6 × 64 on AVX-512), the ones that need the fewest
    loads per FMA
    (on Emerald Rapids 12 × 32 ran fastest alone, 77% of the FMA peak against 70% for 8 × 32).

    >>> register_tiles(vector_isa("llvm -mcpu=znver3"), 8, 64, 64)[:3]
    [(8, 8), (4, 16), (2, 32)]
    >>> [t for t in register_tiles(vector_isa("llvm -mcpu=skylake-avx512"), 16, 1024, 1024, pad_m=True)
    ...  if 1024 % t[0]]
    [(12, 32), (13, 32), (14, 32), (6, 64)]
    """
    out = []
    for nv in (1, 2, 3, 4):
        nr = nv * acc_lanes
        if n % nr:
            continue
        for mr in range(1, min(m, 32) + 1 if pad_m else 33):
            regs = mr * nv + nv + b_regs_extra
            if regs > isa.registers:
                break
            if m % mr and not (pad_m and nv > 1 and regs >= isa.registers - 5):
                continue
            if mr * nv >= 8 or (mr == m and nr == n):
                out.append((mr, nr))
    return out


def padded_rows(m: int, mr: int, mc: int) -> int:
    """M rounded up to whole blocks of ``mc`` register tiles of ``mr`` rows (the rows the padded
    template computes).

    >>> padded_rows(1024, 14, 2), padded_rows(1024, 8, 32)
    (1036, 1024)
    """
    block = mr * mc
    return -(-m // block) * block


def _fallback_tile(tiles, isa, lanes: int) -> tuple[int, int]:
    """The untuned register tile: two vectors wide, with accumulators filling about half the
    registers (8 × 32 on AVX-512, 4 × 16 on AVX2), else the largest."""
    def key(t):
        accs = t[0] * t[1] // lanes
        return accs <= isa.registers // 2, t[1] == 2 * lanes, accs
    return max(tiles, key=key)


# The untuned fp32 GEMM on Intel AVX-512 cores (Golden Cove: 48 KB L1d, 2 MB L2): 8 × 32 tiles
# (16 accumulators), A packed, each 64 × 128 block of C computed in a compact block buffer over
# the whole K (up to 1024 deep: C leaves the registers once per block and slice), columns of
# blocks outermost. On Emerald Rapids (2 pinned cores, session 23's mid run, load 13-18, one
# process in turns) it ran 1024³ at 180 GFLOP/s against 152 for session 21's tuned config
# (kc 256, blocks of 32 × 4 tiles, no block buffer), the fastest of 9 named variants.
INTEL_AVX512_FALLBACK = dict(tile=(8, 32), kc=1024, mc_tiles=8, nc_tiles=4, order="nm", k_unroll=4,
                             pack_a=1, pack_b=1, c_block=1, a_prefetch=0)


def fallback_knobs(M: int, N: int, K: int, tiles, isa, vendor: str) -> dict:
    """The knob values of ``topi/matmul_tensorized.llvm``'s untuned (fallback) schedule:
    :data:`INTEL_AVX512_FALLBACK` on Intel AVX-512 CPUs where it covers the shape (its ``kc``
    the longest of 1024, 512, 256 dividing K), else a
    register tile filling about half the registers (``_fallback_tile``), ``kc`` 256, blocks
    of 4 × 4 tiles where they divide, rows of blocks outermost, A read in place.

    >>> isa = cpu_intrinsics.vector_isa("llvm -mcpu=emeraldrapids")
    >>> fallback_knobs(1024, 1024, 1024, register_tiles(isa, 16, 1024, 1024, pad_m=True), isa, "intel")["kc"]
    1024
    """
    f = INTEL_AVX512_FALLBACK
    (mr, nr) = f["tile"]
    kc = max([k for k in (f["kc"], 512, 256) if K % k == 0 and k <= f["kc"]] or [0])
    if (vendor == "intel" and isa.name == "avx512" and f["tile"] in tiles and kc
            and M % (mr * f["mc_tiles"]) == 0 and N % (nr * f["nc_tiles"]) == 0):
        return dict(f, kc=kc)
    mr, nr = _fallback_tile([t for t in tiles if M % t[0] == 0] or tiles, isa, isa.lanes)
    kc = 256 if K % 256 == 0 else max([k for k in (64, 128, 512) if K % k == 0] or [K])
    mc, nc = _blocks(M, mr)[min(2, len(_blocks(M, mr)) - 1)], _blocks(N, nr)[min(2, len(_blocks(N, nr)) - 1)]
    c_block = 0 if M % mr == 0 else 1
    return dict(tile=(mr, nr), kc=kc, mc_tiles=mc, nc_tiles=nc, order="mn", k_unroll=4 if kc % 4 == 0 else 1,
                pack_a=1 if c_block else 0, pack_b=1, c_block=c_block, a_prefetch=0)


def _blocks(total: int, unit: int) -> list[int]:
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if total % (unit * t) == 0] or [1]


@autotune.template("topi/matmul_tensorized.llvm")
def matmul_tensorized(M: int, N: int, K: int, dtype: str = "float32"):
    """C[M, N] = A[M, K] @ B[K, N], fp32, on the target's FMA micro-kernel (AVX-512 or AVX2)."""
    if dtype != "float32":
        raise ValueError(f"topi/matmul_tensorized.llvm computes float32 (got dtype {dtype!r}); "
                         f"int8 is topi/dense_int8.llvm")
    cfg = autotune.get_config()
    isa = cpu_intrinsics.vector_isa()
    tiles = register_tiles(isa, isa.lanes, M, N, pad_m=True)
    if not tiles:
        raise ValueError(f"topi/matmul_tensorized.llvm: N = {N} is not a multiple of the target's "
                         f"{isa.lanes} lanes; use topi/matmul.llvm")
    cfg.define_knob("tile", tiles)
    cfg.define_knob("kc", [k for k in (64, 128, 192, 256, 384, 512, 768, 1024) if K % k == 0] or [K])
    cfg.define_knob("mc_tiles", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("nc_tiles", [1, 2, 4, 8, 16])
    cfg.define_knob("order", ["mn", "nm"])
    cfg.define_knob("k_unroll", [1, 2, 4, 8])
    cfg.define_knob("pack_a", [0, 1])
    cfg.define_knob("pack_b", [1, 0])
    cfg.define_knob("c_block", [0, 1])
    cfg.define_knob("a_prefetch", list(A_PREFETCH))
    cfg.multi_filter(lambda e: _valid_blocks(M, N, e["tile"].val, e["mc_tiles"].val, e["nc_tiles"].val,
                                             e["pack_a"].val, e["c_block"].val)
                     and e["k_unroll"].val <= e["kc"].val
                     and (e["pack_a"].val or not e["a_prefetch"].val))
    cfg.add_flop(2.0 * M * N * K)
    if cfg.is_fallback:
        f = fallback_knobs(M, N, K, tiles, isa, cpu_intrinsics.cpu_vendor())
        (mr, nr), kc, mc, nc, order = f["tile"], f["kc"], f["mc_tiles"], f["nc_tiles"], f["order"]
        k_unroll, pack_a, pack_b, c_block, a_prefetch = (f["k_unroll"], f["pack_a"], f["pack_b"], f["c_block"],
                                                         f["a_prefetch"])
    else:
        (mr, nr), kc = cfg["tile"].val, cfg["kc"].val
        mc, nc, order = cfg["mc_tiles"].val, cfg["nc_tiles"].val, cfg["order"].val
        k_unroll, pack_a, pack_b = cfg["k_unroll"].val, cfg["pack_a"].val, cfg["pack_b"].val
        c_block, a_prefetch = cfg["c_block"].val, cfg["a_prefetch"].val
    if not _valid_blocks(M, N, (mr, nr), mc, nc, pack_a, c_block):
        cfg.raise_error(f"blocks of {mc} × {nc} tiles of {mr} × {nr} do not cover {M} × {N} "
                        f"(pack_a={pack_a}, c_block={c_block})")
        mc, nc, pack_a, c_block = 1, 1, 1, 1
    if a_prefetch and not pack_a:
        cfg.raise_error(f"a_prefetch={a_prefetch} prefetches the packed A panels: it needs pack_a=1")
        a_prefetch = 0
    Mp = padded_rows(M, mr, mc) if c_block else M     # the rows computed: M padded to whole blocks

    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    if pack_a:
        if Mp == M:
            Ap = te.compute((M // mr, K, mr), lambda x, y, z: A[x * mr + z, y], name="packedA")
        else:       # the padding rows are zeros
            Ap = te.compute((Mp // mr, K, mr), lambda x, y, z: te.if_then_else(
                x * mr + z < M, A[x * mr + z, y], te.const(0, dtype)), name="packedA")

        def a_at(i, kk):
            return Ap[i // mr, kk, i % mr]
    else:
        def a_at(i, kk):
            return A[i, kk]
    if pack_b:
        Bp = te.compute((N // nr, K, nr), lambda x, y, z: B[y, x * nr + z], name="packedB")

        def b_at(kk, j):
            return Bp[j // nr, kk, j % nr]
    else:
        def b_at(kk, j):
            return B[kk, j]
    mk = cpu_intrinsics.gemm_fp32(mr, nr, kc, isa=isa, a_layout="panel" if pack_a else "rows",
                                  unroll=min(k_unroll, kc), prefetch=a_prefetch)
    if c_block:
        CC = te.compute((Mp, N), lambda i, j: te.sum(a_at(i, k) * b_at(k, j), axis=k), name="C.block")
        C = te.compute((M, N), lambda i, j: CC[i, j], name="C")
        s = te.create_schedule(C.op)
        outer = _schedule_gemm_blocked(s, C, CC, mr, nr, mc, nc, [kc], order, mk, isa.lanes)
    else:
        C = te.compute((M, N), lambda i, j: te.sum(a_at(i, k) * b_at(k, j), axis=k), name="C")
        s = te.create_schedule(C.op)
        outer = _schedule_gemm(s, C, mr, nr, mc, nc, [kc], order, mk)
    if a_prefetch:
        s[C].pragma(outer, "import_llvm", cpu_intrinsics.PREFETCH_IR)
    if pack_b:
        x, _, z = s[Bp].op.axis
        s[Bp].vectorize(z)                  # contiguous rows of B
        s[Bp].parallel(x)
    if pack_a:
        # scalar copies: vectorizing z would gather mr rows of A (3x slower for 1024², 1 thread)
        s[Ap].parallel(s[Ap].op.axis[0])
    return s, [A, B, C]


def _valid_blocks(M: int, N: int, tile, mc: int, nc: int, pack_a: int, c_block: int) -> bool:
    """Whether ``mc × nc`` blocks of ``tile`` cover ``M × N``: ``nc`` tiles dividing N; ``mc``
    tiles dividing M, or (with ``c_block`` and ``pack_a``, which pad M with zero rows) padding M
    by at most a sixteenth or no more than single tiles (``mc = 1``) do."""
    mr, nr = tile
    if N % (nr * nc):
        return False
    if M % (mr * mc) == 0:
        return True
    waste = padded_rows(M, mr, mc) - M
    return bool(c_block and pack_a) and waste <= max(M // 16, padded_rows(M, mr, 1) - M)


def _schedule_gemm_blocked(s, C, CC, mr, nr, mc, nc, kfactors, order, mk, lanes):
    """The loop nest of :func:`_schedule_gemm` with each ``mr·mc × nr·nc`` block of C computed
    into a compact block buffer (``CC``, the padded rows included) and then copied into C, so that
    the micro-kernel's C tiles lie in a few pages and M needs no multiple of the tile."""
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=mr * mc)
    jo, ji = s[C].split(j, factor=nr * nc)
    outer = [io, jo] if order == "mn" else [jo, io]
    s[C].reorder(*outer, ii, ji)
    fused = s[C].fuse(*outer)
    s[C].parallel(fused)
    _, jv = s[C].split(ji, factor=lanes)
    s[C].vectorize(jv)
    s[CC].compute_at(s[C], fused)
    i, j = s[CC].op.axis
    iio, mi = s[CC].split(i, factor=mr)
    jio, ni = s[CC].split(j, factor=nr)
    ko, kin = s[CC].split(s[CC].op.reduce_axis[0], factor=kfactors[0])
    s[CC].reorder(ko, jio, iio, mi, ni, kin, *s[CC].op.reduce_axis[1:])
    s[CC].tensorize(mi, mk)
    return fused


def _schedule_gemm(s, C, mr, nr, mc, nc, kfactors, order, mk):
    """The blocked loop nest of the module docstring on stage ``C``, tensorized with ``mk`` at
    the register tile; ``kfactors`` split the reduction axes (one per axis, the last ones
    whole)."""
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=mr * mc)
    iio, mi = s[C].split(ii, factor=mr)
    jo, ji = s[C].split(j, factor=nr * nc)
    jio, ni = s[C].split(ji, factor=nr)
    ko, kin = s[C].split(s[C].op.reduce_axis[0], factor=kfactors[0])
    rest = list(s[C].op.reduce_axis[1:])
    outer = [io, jo] if order == "mn" else [jo, io]
    s[C].reorder(*outer, ko, jio, iio, mi, ni, kin, *rest)
    fused = s[C].fuse(*outer)
    s[C].parallel(fused)
    s[C].tensorize(mi, mk)
    return fused


def int8_fallback_knobs(M: int, N: int, K: int, tiles, isa) -> dict:
    """The knob values of ``topi/dense_int8.llvm``'s untuned vector schedule: the register tile of
    ``_fallback_tile`` (8 × 32 with VNNI on AVX-512), ``kc`` the longest slice of K (K itself
    where it can) whose ``kc × nr`` bytes of packed weights fit in 32 KB, so that the B slice
    stays in L1 beside the A rows and, with ``kc = K``, each C tile is computed in registers
    from zeros and stored once (the intrinsic's ``body``: no reset pass over C, no C loads);
    blocks of up to 16 × 4 tiles, columns of blocks outermost. On the Zen 5 (1 thread, one
    process, quiet) 1024³ ran at 1009 Gop/s this way against 912 with session 22's ``kc`` 512
    and 4 × 4 row-major blocks, and 1890 against 1550 on 2 threads.

    >>> isa = cpu_intrinsics.vector_isa("llvm -mcpu=znver5")
    >>> sorted(int8_fallback_knobs(1024, 1024, 1024, register_tiles(isa, 16, 1024, 1024, 1), isa).items())
    [('k_unroll', 4), ('kc', 1024), ('mc_tiles', 16), ('nc_tiles', 4), ('order', 'nm'), ('tile', (8, 32))]
    """
    mr, nr = _fallback_tile(tiles, isa, isa.int8_lanes)
    slices = [k for k in range(4, K + 1, 4) if K % k == 0 and k * nr <= 32 * 1024 and (k == K or k % 64 == 0)]
    kc = max(slices) if slices else min([k for k in range(4, K + 1, 4) if K % k == 0])
    mc = max(t for t in _blocks(M, mr) if t <= 16)
    nc = max(t for t in _blocks(N, nr) if t <= 4)
    return dict(tile=(mr, nr), kc=kc, mc_tiles=mc, nc_tiles=nc, order="nm", k_unroll=4 if kc % 16 == 0 else 1)


def dense_int8_weight_panel(cfg) -> int:
    """The panel width ``nr`` of the packed weights that ``topi/dense_int8.llvm`` with config
    ``cfg`` reads (its register or AMX tile's columns): pack them with
    :func:`dense_int8_pack_weight` for the template's ``weight_layout="packed"``."""
    amx = cfg["amx_tile"].val if "amx_tile" in cfg.space_map else (0, 0)
    return amx[1] if amx[0] else cfg["tile"].val[1]


def dense_int8_pack_weight(weight, nr: int):
    """int8 weights ``[N, K]`` (numpy) packed as ``topi/dense_int8.llvm`` reads them with
    ``weight_layout="packed"``: ``[N / nr, K / 4, nr, 4]``, four consecutive k of one output
    column together (the VNNI layout; for AMX, the rows of a B tile). Done once per weight, as
    PyTorch's quantized Linear packs its weights when they are set.

    >>> dense_int8_pack_weight(np.zeros((64, 128), "int8"), 32).shape
    (2, 32, 32, 4)
    """
    n, k = weight.shape
    if n % nr or k % 4:
        raise ValueError(f"dense_int8_pack_weight: weights {n} × {k} need N a multiple of nr = {nr} "
                         f"and K a multiple of 4")
    return weight.reshape(n // nr, nr, k // 4, 4).transpose(0, 2, 1, 3).copy()


@autotune.template("topi/dense_int8.llvm")
def dense_int8(M: int, N: int, K: int, weight_layout: str = "NK", amx_config: str = "kept", amx_a: str = "rows",
               amx_c: str = "zeroed", requant_scale: float = 0.0, requant_zero_point: int = 0):
    """C[M, N] = data[M, K] (uint8) @ weight[N, K].T (int8), int32, on the target's int8 dot
    product (AMX tiles or VNNI where present, exact on every ISA). ``weight_layout="NK"``: the
    weights are packed in the call; ``"packed"``: the second input is the weights packed
    beforehand by :func:`dense_int8_pack_weight` with the config's panel width
    (:func:`dense_int8_weight_panel`), as PyTorch's quantized Linear keeps them. With AMX (knob
    ``amx_tile``, the AMX micro-kernel's C block, or ``(0, 0)`` for the vector one) the tile is
    ``topi/cpu_amx.py``'s; ``amx_config``: its tile configuration kept across calls (``"kept"``,
    the default: ``amx_kernel_ir(keep_config=True)``) or loaded in every call (``"call"``, LLVM's;
    on Emerald Rapids the kept one ran the kernel alone 1.3-1.5x faster, docs/tensorize.md);
    ``amx_a``: the AMX kernel reads ``data`` in place (``"rows"``: each A tile 16 rows ``K``
    bytes apart) or packed in the call into panels of 64 K (``"panels"``: ``[M / mr, K / 64, mr,
    64]``, each A tile one contiguous KB); ``amx_c``: each C block's first K slice starts from C
    tiles zeroed in the tile registers (``"zeroed"``, the default: ``gemm_u8s8s32_amx(zero_c=True)``;
    with ``kc = K`` every call) or from zeros stored to C and loaded (``"loaded"``, session 22's).

    The untuned vector config (:func:`int8_fallback_knobs`) keeps each C tile in registers over
    the whole K where the ``K × nr`` slice of packed weights fits in 32 KB (L1).

    ``requant_scale > 0``: the output is uint8, requantized as PyTorch's quantized Linear does
    (``clip(round(float32(acc) * requant_scale) + requant_zero_point, 0, 255)``, rounding half to
    even): each ``mc·mr × nc·nr`` block of int32 accumulators is computed in a compact block
    buffer (L2) and requantized into C right after, in the same parallel iteration, so that the
    epilogue never reads the int32 matrix from memory."""
    if weight_layout not in ("NK", "packed"):
        raise ValueError(f"topi/dense_int8.llvm: weight_layout is 'NK' or 'packed', got {weight_layout!r}")
    if amx_config not in ("call", "kept"):
        raise ValueError(f"topi/dense_int8.llvm: amx_config is 'call' or 'kept', got {amx_config!r}")
    if amx_a not in ("rows", "panels"):
        raise ValueError(f"topi/dense_int8.llvm: amx_a is 'rows' or 'panels', got {amx_a!r}")
    if amx_c not in ("zeroed", "loaded"):
        raise ValueError(f"topi/dense_int8.llvm: amx_c is 'zeroed' or 'loaded', got {amx_c!r}")
    if requant_scale < 0 or not 0 <= requant_zero_point <= 255:
        raise ValueError(f"topi/dense_int8.llvm: requant_scale must be > 0 (0: int32 output) and "
                         f"requant_zero_point in [0, 255]; got {requant_scale!r}, {requant_zero_point!r}")
    keep, zero_c = amx_config == "kept", amx_c == "zeroed"
    cfg = autotune.get_config()
    isa = cpu_intrinsics.vector_isa()
    if isa.int8 is None:
        raise ValueError("topi/dense_int8.llvm needs AVX2 at least; the target has no int8 dot product")
    lanes = isa.int8_lanes
    # the exact AVX2 / AVX512-BW forms hold two broadcasts per row
    extra = 1 if isa.int8 in ("avx512vnni", "avxvnni") else 4
    tiles = register_tiles(isa, lanes, M, N, extra)
    if not tiles or K % 4:
        raise ValueError(f"topi/dense_int8.llvm: N = {N} must be a multiple of the target's {lanes} "
                         f"int32 lanes and K = {K} a multiple of 4")
    amx_tiles = [t for t in cpu_amx.AMX_TILES if M % t[0] == 0 and N % t[1] == 0] if isa.amx and K % 64 == 0 else []
    cfg.define_knob("tile", tiles)
    cfg.define_knob("kc", [k for k in (64, 128, 256, 512, 1024, 2048) if K % k == 0] or [K])
    cfg.define_knob("mc_tiles", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("nc_tiles", [1, 2, 4, 8, 16])
    cfg.define_knob("order", ["mn", "nm"])
    cfg.define_knob("k_unroll", [1, 2, 4, 8])
    if amx_tiles:       # only where the target has AMX: other targets' spaces (and logs) stay as they were
        cfg.define_knob("amx_tile", amx_tiles + [(0, 0)])
        cfg.define_knob("amx_prefetch", list(cpu_amx.AMX_PREFETCH))

    def tile_of(e):
        amx = e["amx_tile"].val if amx_tiles else (0, 0)
        return amx if amx[0] else e["tile"].val

    cfg.multi_filter(lambda e: M % (tile_of(e)[0] * e["mc_tiles"].val) == 0
                     and N % (tile_of(e)[1] * e["nc_tiles"].val) == 0
                     and e["k_unroll"].val <= e["kc"].val // 4
                     # the AMX kernel ignores tile and k_unroll: one value of each
                     and (not amx_tiles or e["amx_tile"].val[0] or e["amx_prefetch"].val == 0)
                     and (not amx_tiles or not e["amx_tile"].val[0]
                          or (e["tile"].val == tiles[0] and e["k_unroll"].val == 1 and e["kc"].val % 64 == 0)))
    cfg.add_flop(2.0 * M * N * K)
    if cfg.is_fallback:
        amx = amx_tiles[0] if amx_tiles else (0, 0)
        if amx[0]:
            mr, nr = amx
            # AMX: a long K per call (its C tiles zeroed in the tile registers and stored once
            # per call), blocks of up to 4 × 16 C blocks, the next step's A and B rows prefetched:
            # the fastest whole 1024³ dense of session 23's mid run on Emerald Rapids (1389
            # Gop/s on 2 cores against 1152 without the prefetch, load 7-13)
            kc = max([k for k in (256, 512, 1024, 2048) if K % k == 0] or [K])
            mc = _blocks(M, mr)[min(2, len(_blocks(M, mr)) - 1)]
            nc = max(t for t in _blocks(N, nr) if t <= 16)
            order, k_unroll, prefetch = "mn", 4 if kc % 16 == 0 else 1, 2
        else:
            f = int8_fallback_knobs(M, N, K, tiles, isa)
            (mr, nr), kc, mc, nc, order, k_unroll = (f["tile"], f["kc"], f["mc_tiles"], f["nc_tiles"], f["order"],
                                                     f["k_unroll"])
            prefetch = 0
    else:
        amx = cfg["amx_tile"].val if amx_tiles else (0, 0)
        prefetch = cfg["amx_prefetch"].val if amx_tiles else 0
        (mr, nr), kc = amx if amx[0] else cfg["tile"].val, cfg["kc"].val
        mc, nc, order, k_unroll = cfg["mc_tiles"].val, cfg["nc_tiles"].val, cfg["order"].val, cfg["k_unroll"].val
    if M % (mr * mc) or N % (nr * nc):
        cfg.raise_error(f"blocks of {mc} × {nc} tiles of {mr} × {nr} do not divide {M} × {N}")
        mc, nc = 1, 1

    data = te.placeholder((M, K), name="data", dtype="uint8")
    if weight_layout == "packed":
        weight = Wp = te.placeholder((N // nr, K // 4, nr, 4), name="weight", dtype="int8")
    else:
        weight = te.placeholder((N, K), name="weight", dtype="int8")
        Wp = te.compute((N // nr, K // 4, nr, 4), lambda x, y, z, w: weight[x * nr + z, y * 4 + w], name="packedW")
    k4 = te.reduce_axis((0, K // 4), name="k4")
    kb = te.reduce_axis((0, 4), name="kb")
    a_panels = bool(amx[0]) and amx_a == "panels"
    if a_panels:
        Ap = te.compute((M // mr, K // 64, mr, 64), lambda x, y, z, w: data[x * mr + z, y * 64 + w], name="packedA")

        def a_at(i):
            return Ap[i // mr, k4 // 16, i % mr, k4 % 16 * 4 + kb]
    else:
        def a_at(i):
            return data[i, k4 * 4 + kb]
    acc = te.compute((M, N), lambda i, j: te.sum(a_at(i).astype("int32")
                                                 * Wp[j // nr, k4, j % nr, kb].astype("int32"), axis=[k4, kb]),
                     name="C.block" if requant_scale else "C")
    if requant_scale:
        scale, zp = te.const(requant_scale, "float32"), te.const(float(requant_zero_point), "float32")
        C = te.compute((M, N), lambda i, j: te.max(te.min(te.round(acc[i, j].astype("float32") * scale) + zp,
                                                          te.const(255.0, "float32")),
                                                   te.const(0.0, "float32")).astype("uint8"), name="C")
    else:
        C = acc
    s = te.create_schedule(C.op)
    if amx[0]:
        mk = cpu_amx.gemm_u8s8s32_amx(mr, nr, kc, prefetch=prefetch, keep_config=keep, a_panels=a_panels,
                                      zero_c=zero_c)
    else:
        mk = cpu_intrinsics.gemm_u8s8s32(mr, nr, kc, isa=isa, unroll=min(k_unroll, kc // 4))
    if requant_scale:
        outer = _schedule_gemm_blocked(s, C, acc, mr, nr, mc, nc, [kc // 4], order, mk, 4 * lanes)
    else:
        outer = _schedule_gemm(s, C, mr, nr, mc, nc, [kc // 4], order, mk)
    if amx[0]:
        s[C].pragma(outer, "import_llvm", cpu_amx.amx_kernel_ir(mr, nr, prefetch, keep, a_panels, zero_c))
    if a_panels:
        x, _, _, w = s[Ap].op.axis
        s[Ap].parallel(x)
        s[Ap].vectorize(w)              # 64 contiguous bytes of a row of data
    if weight_layout == "NK":
        x, y, z, w = s[Wp].op.axis
        s[Wp].parallel(x)
        # 4-byte copies: vectorizing z too gathers from nr rows of the weights (12x slower packing)
        s[Wp].vectorize(w)
    return s, [data, weight, C]
