"""The int8 GEMM micro-kernel on Intel AMX tiles (Sapphire / Emerald Rapids): ``uint8 × int8 →
int32`` with ``tdpbusd``, chosen by ``topi/dense_int8.llvm`` where the target has ``amx-int8``.

An AMX tile register holds 16 rows of 64 bytes; ``tdpbusd`` adds, into a 16 × 16 int32 tile C,
the products of a 16 × 64 uint8 tile A (rows of K) and a 16 × 64 int8 tile B holding 64 K × 16
columns in the VNNI layout (row ``k4`` holds ``b[4*k4 + kb, n]`` at byte ``4*n + kb``): the same
``[K / 4, nr, 4]`` packing as the AVX-512 VNNI micro-kernel's weights. The micro-kernel keeps an
``mr × nr`` block of C (``mr / 16 × nr / 16`` tiles, at most 4, so with their A and B tiles at
most 8 registers) in tile registers over ``kc`` (a multiple of 64)::

    for k in 0, 64, ..., kc - 64:
        A_i = tileload(a + 16*i*lda + k, lda)            # i < mr / 16
        B_j = tileload(b + (k/4)*ldb + 64*j, ldb)       # j < nr / 16
        C_ij = tdpbusd(C_ij, A_i, B_j)

It is LLVM IR (:func:`amx_kernel_ir`, linked with ``pragma import_llvm``) called through
``call_extern`` by the intrinsic :func:`gemm_u8s8s32_amx`, because AMX values (``x86_amx``) are
no tilecraft dtype; LLVM configures the tiles (``ldtilecfg``) from the shapes in the calls.
Linux lets a process use the tile data only after asking (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``); the kernel asks once per process, on its first call.

The interpreters run the intrinsic by its TE definition, so schedules using it are checked
against numpy anywhere; the machine code *runs* only on a CPU with AMX.

>>> mk = gemm_u8s8s32_amx(32, 32, 256)      # C[32, 32] += A[32, 256] · B, 4 tiles of C
"""
from __future__ import annotations

from tilecraft import te, tir
from tilecraft.ir.expr import Broadcast

AMX_TILES = ((32, 32), (16, 32), (32, 16), (16, 16))     # (mr, nr): the C tiles of one micro-kernel


AMX_PREFETCH = (0, 1, 2)     # the kernel's software prefetch: none, the next A tiles, A and B tiles


def amx_kernel_name(mr: int, nr: int, prefetch: int = 0, keep_config: bool = False, a_panels: bool = False,
                    zeroed: bool = False) -> str:
    """The symbol of :func:`amx_kernel_ir`'s kernel (``zeroed``: of its C-zeroing twin, ``_z``)."""
    return (f"tilecraft_amx_u8s8s32_{mr}x{nr}" + (f"_pf{prefetch}" if prefetch else "")
            + ("_kc" if keep_config else "") + ("_pa" if a_panels else "") + ("_z" if zeroed else ""))


def amx_kernel_ir(mr: int, nr: int, prefetch: int = 0, keep_config: bool = False, a_panels: bool = False,
                  zero_c: bool = False) -> str:
    """LLVM IR of ``void tilecraft_amx_u8s8s32_{mr}x{nr}(int32 *c, int ldc, uint8 *a, int lda,
    int8 *b, int ldb, int k)``: ``c[mr, nr] += a[mr, k] · b`` (strides in elements; ``b`` packed
    ``[k / 4, nr, 4]`` with row stride ``ldb`` bytes; ``k`` a positive multiple of 64).
    ``prefetch`` (the name gains ``_pf1`` / ``_pf2``): each step also asks for the next step's
    rows of the A tiles (1), and of the B tiles (2), in the L1 cache (``prefetcht0``, one per
    64-byte row): a ``tileloadd`` waits for all its 16 rows, so rows that come from L2 stall
    the ``tdpbusd`` that need them.

    ``keep_config`` (the name gains ``_kc``): the tiles are named registers (C ``tmm0-3``, A
    ``tmm4-5``, B ``tmm6-7``, LLVM's ``llvm.x86.tileloadd64`` with an immediate) and the call
    loads the tile configuration only where the thread's current one (``sttilecfg``) differs
    from the kernel's (8 tiles of 16 × 64 bytes), and leaves it loaded: a thread pays
    ``ldtilecfg`` once, not per call. Otherwise LLVM allocates the tiles (``x86_amx`` values)
    and brackets every call with ``ldtilecfg`` and ``tilerelease``.

    ``a_panels`` (the name gains ``_pa``): ``a`` is packed in panels of 64 K, ``[k / 64, mr,
    64]`` with ``lda`` the bytes from one panel to the next, so that each A tile is one contiguous
    KB (rows 64 bytes apart) instead of 16 rows ``lda`` apart.

    ``zero_c``: the text also defines the kernel's twin ``..._z`` (:func:`amx_kernel_name` with
    ``zeroed``; same arguments) that computes ``c[mr, nr] = a · b``: its C tiles start as zeros
    in the tile registers (``tilezero``) instead of being loaded from ``c`` (which the caller
    would first have filled with zeros): the intrinsic's ``body``, the first K slice of a block.

    >>> "tdpbusd.internal" in amx_kernel_ir(32, 32)
    True
    >>> amx_kernel_ir(32, 32, prefetch=2).count("llvm.prefetch") > 64
    True
    >>> "@llvm.x86.ldtilecfg" in amx_kernel_ir(32, 32, keep_config=True)
    True
    """
    if (mr, nr) not in AMX_TILES:
        raise ValueError(f"the AMX micro-kernel's C block is one of {AMX_TILES}, got {mr} × {nr}")
    if prefetch not in AMX_PREFETCH:
        raise ValueError(f"the AMX micro-kernel's prefetch is one of {AMX_PREFETCH}, got {prefetch!r}")
    text = _amx_gemm_function(mr, nr, prefetch, keep_config, a_panels, False)
    if zero_c:
        text += _amx_gemm_function(mr, nr, prefetch, keep_config, a_panels, True)
    return (text + _PERMIT + (_configure_ir(16) if keep_config else _DECLS)
            + (_PREFETCH_DECL if prefetch else ""))


def _amx_gemm_function(mr: int, nr: int, prefetch: int, keep_config: bool, a_panels: bool, zeroed: bool) -> str:
    """One kernel of :func:`amx_kernel_ir` (``zeroed``: C tiles start as zeros, ``c`` not read)."""
    tm, tn = mr // 16, nr // 16
    name = amx_kernel_name(mr, nr, prefetch, keep_config, a_panels, zeroed)
    L = [f"define void @{name}(ptr %c, i32 %ldc, ptr %a, i32 %lda, ptr %b, i32 %ldb, i32 %k) #0 {{",
         "entry:",
         "  call void @tilecraft_amx_permit()"]
    if keep_config:
        L.append("  call void @tilecraft_amx_configure()")
    L += ["  %ldc64 = sext i32 %ldc to i64", "  %ldcb = shl i64 %ldc64, 2",
          "  %ldab = sext i32 %lda to i64", "  %ldbb = sext i32 %ldb to i64", "  %kend = sext i32 %k to i64"]

    def load(value, tile, ptr, stride):
        if keep_config:
            L.append(f"  call void @llvm.x86.tileloadd64(i8 {tile}, ptr {ptr}, i64 {stride})")
        else:
            L.append(f"  {value} = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, "
                     f"ptr {ptr}, i64 {stride})")

    def c_ptr(i, j):
        L.append(f"  %crow{i}{j} = mul i64 %ldcb, {16 * i}")
        L.append(f"  %coff{i}{j} = add i64 %crow{i}{j}, {64 * j}")
        L.append(f"  %cp{i}{j} = getelementptr i8, ptr %c, i64 %coff{i}{j}")
    for i in range(tm):
        for j in range(tn):
            c_ptr(i, j)
            if not zeroed:
                load(f"%c{i}{j}.0", 2 * i + j, f"%cp{i}{j}", "%ldcb")
            elif keep_config:
                L.append(f"  call void @llvm.x86.tilezero(i8 {2 * i + j})")
            else:
                L.append(f"  %c{i}{j}.0 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)")
    L += ["  br label %loop", "loop:", "  %kk = phi i64 [ 0, %entry ], [ %kk.next, %loop ]"]
    if not keep_config:
        for i in range(tm):
            for j in range(tn):
                L.append(f"  %c{i}{j} = phi x86_amx [ %c{i}{j}.0, %entry ], [ %c{i}{j}.next, %loop ]")
    if a_panels:            # the step's panel: kk / 64 panels on; its tile i 16 rows of 64 bytes in
        L.append("  %apanel = lshr i64 %kk, 6")
        L.append("  %abase = mul i64 %apanel, %ldab")
    for i in range(tm):
        if a_panels:
            L.append(f"  %aoff{i} = add i64 %abase, {16 * 64 * i}")
        else:
            L.append(f"  %arow{i} = mul i64 %ldab, {16 * i}")
            L.append(f"  %aoff{i} = add i64 %arow{i}, %kk")
        L.append(f"  %ap{i} = getelementptr i8, ptr %a, i64 %aoff{i}")
        load(f"%ta{i}", 4 + i, f"%ap{i}", "64" if a_panels else "%ldab")
    L.append("  %k4 = lshr i64 %kk, 2")
    L.append("  %brow = mul i64 %k4, %ldbb")
    for j in range(tn):
        L.append(f"  %boff{j} = add i64 %brow, {64 * j}")
        L.append(f"  %bp{j} = getelementptr i8, ptr %b, i64 %boff{j}")
        load(f"%tb{j}", 6 + j, f"%bp{j}", "%ldbb")
    if prefetch:            # the next step's rows: A 64 bytes further along K, B 16 rows further down
        for i in range(tm):     # (row by row, one add each: precomputed offsets would take 16 registers)
            L.append(f"  %pa{i}_0 = getelementptr i8, ptr %ap{i}, i64 " + ("%ldab" if a_panels else "64"))
            _prefetch_rows(L, f"pa{i}", "64" if a_panels else "%ldab")
    if prefetch == 2:
        L.append("  %b16 = shl i64 %ldbb, 4")
        for j in range(tn):
            L.append(f"  %pb{j}_0 = getelementptr i8, ptr %bp{j}, i64 %b16")
            _prefetch_rows(L, f"pb{j}", "%ldbb")
    for i in range(tm):
        for j in range(tn):
            if keep_config:
                L.append(f"  call void @llvm.x86.tdpbusd(i8 {2 * i + j}, i8 {4 + i}, i8 {6 + j})")
            else:
                L.append(f"  %c{i}{j}.next = call x86_amx @llvm.x86.tdpbusd.internal(i16 16, i16 64, i16 64, "
                         f"x86_amx %c{i}{j}, x86_amx %ta{i}, x86_amx %tb{j})")
    L += ["  %kk.next = add i64 %kk, 64", "  %more = icmp slt i64 %kk.next, %kend",
          "  br i1 %more, label %loop, label %done", "done:"]
    for i in range(tm):
        for j in range(tn):
            if keep_config:
                L.append(f"  call void @llvm.x86.tilestored64(i8 {2 * i + j}, ptr %cp{i}{j}, i64 %ldcb)")
            else:
                L.append(f"  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %cp{i}{j}, i64 %ldcb, "
                         f"x86_amx %c{i}{j}.next)")
    L += ["  ret void", "}", ""]
    return "\n".join(L)


def _prefetch_rows(L: list, p: str, stride: str) -> None:
    """``prefetcht0`` of 16 rows from ``%{p}_0`` on, ``stride`` bytes apart."""
    for r in range(16):
        if r:
            L.append(f"  %{p}_{r} = getelementptr i8, ptr %{p}_{r - 1}, i64 {stride}")
        L.append(f"  call void @llvm.prefetch.p0(ptr %{p}_{r}, i32 0, i32 3, i32 1)")


# arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18), once per process (the
# permission is the process's; asking twice is harmless, so the unsynchronized flag is enough)
_PERMIT = """
@tilecraft_amx_permitted = internal global i32 0
declare i64 @syscall(i64, ...)
define internal void @tilecraft_amx_permit() {
entry:
  %done = load i32, ptr @tilecraft_amx_permitted
  %yes = icmp ne i32 %done, 0
  br i1 %yes, label %out, label %ask
ask:
  %r = call i64 (i64, ...) @syscall(i64 158, i64 4131, i64 18)
  store i32 1, ptr @tilecraft_amx_permitted
  br label %out
out:
  ret void
}
"""

_DECLS = """
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbusd.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
attributes #0 = { "target-features"="+amx-int8,+amx-tile,+avx512f" }
"""
_PREFETCH_DECL = "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)\n"

# the kept configuration: palette 1, tiles 0-7 of 64 bytes a row (colsb at bytes 16-31), C (0-3)
# and A (4-5) tiles of ``rows`` rows, B (6-7) of 16 (rows at bytes 48-55); loaded only where the
# thread's current one differs (onednn or another kernel may have loaded its own; a thread whose
# tiles were released stores zeros)
def config_bytes(rows: int = 16) -> bytes:
    """The 64-byte tile configuration of the kept-configuration kernels (``ldtilecfg``'s format).

    >>> config_bytes(14)[48:56]
    b'\\x0e\\x0e\\x0e\\x0e\\x0e\\x0e\\x10\\x10'
    """
    return bytes([1] + [0] * 15 + [64, 0] * 8 + [0] * 16 + [rows] * 6 + [16] * 2 + [0] * 8)


_CONFIG_BYTES = config_bytes(16)


def _configure_ir(rows: int = 16) -> str:
    """``tilecraft_amx_configure()`` and the declarations of the named-tile intrinsics."""
    return ("""
@tilecraft_amx_config = internal constant [64 x i8] c\"""" + "".join(f"\\{b:02X}" for b in config_bytes(rows))
            + """\", align 64
define internal void @tilecraft_amx_configure() #0 {
entry:
  %cur = alloca [64 x i8], align 64
  call void @llvm.x86.sttilecfg(ptr %cur)
  %now = load <64 x i8>, ptr %cur, align 64
  %want = load <64 x i8>, ptr @tilecraft_amx_config, align 64
  %ne = icmp ne <64 x i8> %now, %want
  %bits = bitcast <64 x i1> %ne to i64
  %differs = icmp ne i64 %bits, 0
  br i1 %differs, label %load, label %out
load:
  call void @llvm.x86.ldtilecfg(ptr @tilecraft_amx_config)
  br label %out
out:
  ret void
}
declare void @llvm.x86.sttilecfg(ptr)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tdpbusd(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilezero(i8 immarg)
attributes #0 = { "target-features"="+amx-int8,+amx-tile,+avx512f,+avx512bw" }
""")


def gemm_u8s8s32_amx(mr: int, nr: int, kc: int, *, prefetch: int = 0, keep_config: bool = False,
                     a_panels: bool = False, zero_c: bool = False, name: str | None = None):
    """``c[mr, nr] += a · b`` in int32 over ``kc`` (a multiple of 64) ``uint8 × int8`` products on
    AMX tiles, with the TE definition and buffers of ``cpu_intrinsics.gemm_u8s8s32``: ``a``
    ``[mr, kc]`` uint8, ``b`` ``[kc / 4, nr, 4]`` int8, ``c`` ``[mr, nr]`` int32, any row
    strides. ``(mr, nr)`` is one of :data:`AMX_TILES`; ``prefetch``, ``keep_config`` and
    ``a_panels`` are :func:`amx_kernel_ir`'s (with ``a_panels``, ``a`` is ``[kc / 64, mr, 64]``,
    read as ``a[k4 // 16, i, k4 % 16 * 4 + kb]``). The schedule must link :func:`amx_kernel_ir`
    (``s[C].pragma(axis, "import_llvm", amx_kernel_ir(mr, nr, prefetch, keep_config, a_panels))``).

    ``zero_c`` (the name gains ``_z``): the intrinsic has no ``reset``; its ``body`` calls the
    kernel's C-zeroing twin, so tensorize runs it where every reduction loop outside the region
    is at its first iteration (the whole K in one call: every call) and ``update`` elsewhere: C
    is never filled with zeros in memory and loaded back. Link ``amx_kernel_ir(...,
    zero_c=True)``.

    >>> mk = gemm_u8s8s32_amx(32, 32, 128)
    >>> s[C].tensorize(mi, mk); s[C].pragma(outer, "import_llvm", amx_kernel_ir(32, 32))
    """
    what = f"gemm_u8s8s32_amx({mr}, {nr}, {kc})"
    if (mr, nr) not in AMX_TILES:
        raise ValueError(f"{what}: the C block is one of {', '.join(f'{m} × {n}' for m, n in AMX_TILES)} "
                         f"(16 × 16 int32 tiles, at most 4)")
    if kc < 64 or kc % 64:
        raise ValueError(f"{what}: kc must be a positive multiple of 64 (one tile holds 64 bytes of K)")
    if a_panels:
        a = te.placeholder((kc // 64, mr, 64), "uint8", name="a")

        def a_at(i, k4, kb):
            return a[k4 // 16, i, k4 % 16 * 4 + kb]
    else:
        a = te.placeholder((mr, kc), "uint8", name="a")

        def a_at(i, k4, kb):
            return a[i, k4 * 4 + kb]
    b = te.placeholder((kc // 4, nr, 4), "int8", name="b")
    k4 = te.reduce_axis((0, kc // 4), name="k4")
    kb = te.reduce_axis((0, 4), name="kb")
    c = te.compute((mr, nr), lambda i, j: te.sum(a_at(i, k4, kb).astype("int32") * b[k4, j, kb].astype("int32"),
                                                 axis=[k4, kb]), name="c")
    lda, ldb, ldc = te.var("lda"), te.var("ldb"), te.var("ldc")
    binds = {a: tir.decl_buffer(a.shape, "uint8", name="A", offset_factor=1,
                                strides=[lda, 64, 1] if a_panels else [lda, 1]),
             b: tir.decl_buffer(b.shape, "int8", name="B", offset_factor=1, strides=[ldb, 4, 1]),
             c: tir.decl_buffer(c.shape, "int32", name="C", offset_factor=1, strides=[ldc, 1])}
    if prefetch not in AMX_PREFETCH:
        raise ValueError(f"{what}: prefetch is one of {AMX_PREFETCH}, got {prefetch!r}")
    kernel = amx_kernel_name(mr, nr, prefetch, keep_config, a_panels)

    def fcompute(ins, outs):
        A, B = ins
        C = outs[0]
        zero = Broadcast(tir.const(0, "int32"), 16)

        def reset():
            ib = tir.ir_builder.create()
            for i in range(mr):
                for j in range(0, nr, 16):
                    ib.emit(C.vstore([i, j], zero))
            return ib.get()

        def call(symbol, c_access):
            return tir.Evaluate(tir.call_extern("int32", symbol, C.access_ptr(c_access), C.strides[0],
                                                A.access_ptr("r"), A.strides[0], B.access_ptr("r"),
                                                B.strides[0], tir.const(kc, "int32")))

        if zero_c:      # TVM's form without reset: body at the first K slice, update after
            return call(kernel + "_z", "w"), None, call(kernel, "rw")
        ib = tir.ir_builder.create()
        ib.emit(reset())
        ib.emit(call(kernel, "rw"))
        return ib.get(), reset(), call(kernel, "rw")

    return te.decl_tensor_intrin(c.op, fcompute, name=name or f"gemm_u8s8s32_amx_{mr}x{nr}x{kc}"
                                 + (f"_pf{prefetch}" if prefetch else "") + ("_kc" if keep_config else "")
                                 + ("_pa" if a_panels else "") + ("_z" if zero_c else ""), binds=binds)


# ------------------------------------------------------------------------------------------------
# conv2d NCHW[x]c: one output row tile over the kernel window

def amx_conv_tiles(reg_n: int, oc_bn: int) -> tuple[int, int, int] | None:
    """``(rows, tm, tn)``: the AMX layout of a ``reg_n × oc_bn`` conv output tile (``tm`` A
    tiles of ``rows`` output columns, ``tn`` B tiles of 16 channels), or None when it has none:
    ``oc_bn`` 16 or 32, ``reg_n`` up to 16 (one A tile) or even up to 32 (two).

    >>> amx_conv_tiles(28, 16), amx_conv_tiles(7, 32), amx_conv_tiles(17, 16)
    ((14, 2, 1), (7, 1, 2), None)
    """
    if oc_bn not in (16, 32) or reg_n < 1:
        return None
    tm = 1 if reg_n <= 16 else 2
    if reg_n % tm or reg_n // tm > 16:
        return None
    return reg_n // tm, tm, oc_bn // 16


def amx_conv_kernel_name(reg_n: int, oc_bn: int, kh: int, kw: int, ic_bn: int, stride: int,
                         keep_config: bool = False) -> str:
    return f"tilecraft_amx_conv_u8s8s32_{reg_n}x{oc_bn}_{kh}x{kw}x{ic_bn}_s{stride}" + ("_kc" if keep_config else "")


def amx_conv_kernel_ir(reg_n: int, oc_bn: int, kh: int, kw: int, ic_bn: int, stride: int = 1,
                       keep_config: bool = False) -> str:
    """LLVM IR of ``void tilecraft_amx_conv_u8s8s32_...(int32 *c, int ldc, uint8 *a, int sa0,
    int sa1, int8 *b, int sb0, int sb1, int sb2)``: ``c[x, co] += sum a[r, x*stride + q, ci] ·
    b[r, q, ci / 4, co, ci % 4]`` over the ``kh × kw`` window and ``ic_bn`` (a multiple of 64)
    input channels: ``cpu_intrinsics.conv_u8s8s32``'s tile (strides in elements). Each step
    (one ``(r, q)`` of the window and 64 channels) loads ``tm`` A tiles (``rows`` output columns
    of 64 channels, ``stride * sa1`` bytes apart), ``tn`` B tiles (16 rows of 4 channels × 16
    output channels, ``sb2`` bytes apart) and adds ``tm × tn`` ``tdpbusd`` into the C tiles,
    kept in tile registers over the window. ``keep_config``: named tiles and the configuration
    kept across calls, as :func:`amx_kernel_ir`'s (C and A tiles of ``rows`` rows).

    >>> "tdpbusd.internal(i16 14" in amx_conv_kernel_ir(28, 16, 3, 3, 64)
    True
    """
    tiles = amx_conv_tiles(reg_n, oc_bn)
    if tiles is None or ic_bn < 64 or ic_bn % 64 or min(kh, kw, stride) < 1:
        raise ValueError(f"the AMX conv micro-kernel needs oc_bn 16 or 32, reg_n up to 16 or even up to 32 "
                         f"and ic_bn a multiple of 64; got reg_n={reg_n}, oc_bn={oc_bn}, ic_bn={ic_bn}")
    rows, tm, tn = tiles
    ncc = ic_bn // 64
    steps = kh * kw * ncc
    name = amx_conv_kernel_name(reg_n, oc_bn, kh, kw, ic_bn, stride, keep_config)
    L = [f"define void @{name}(ptr %c, i32 %ldc, ptr %a, i32 %sa0, i32 %sa1, ptr %b, i32 %sb0, i32 %sb1, "
         f"i32 %sb2) #0 {{",
         "entry:",
         "  call void @tilecraft_amx_permit()"] + (["  call void @tilecraft_amx_configure()"] if keep_config else []) + [
         "  %ldc64 = sext i32 %ldc to i64", "  %ldcb = shl i64 %ldc64, 2"]

    def load(value, tile, rows_, ptr, stride_):
        if keep_config:
            L.append(f"  call void @llvm.x86.tileloadd64(i8 {tile}, ptr {ptr}, i64 {stride_})")
        else:
            L.append(f"  {value} = call x86_amx @llvm.x86.tileloadd64.internal(i16 {rows_}, i16 64, "
                     f"ptr {ptr}, i64 {stride_})")
    L += [f"  %{v}x = sext i32 %{v} to i64" for v in ("sa0", "sa1", "sb0", "sb1", "sb2")]
    L.append(f"  %astride = mul i64 %sa1x, {stride}")          # from one output column to the next
    for i in range(tm):
        for j in range(tn):
            L.append(f"  %crow{i}{j} = mul i64 %ldcb, {rows * i}")
            L.append(f"  %coff{i}{j} = add i64 %crow{i}{j}, {64 * j}")
            L.append(f"  %cp{i}{j} = getelementptr i8, ptr %c, i64 %coff{i}{j}")
            load(f"%c{i}{j}.0", 2 * i + j, rows, f"%cp{i}{j}", "%ldcb")
    L += ["  br label %loop", "loop:", "  %t = phi i64 [ 0, %entry ], [ %t.next, %loop ]"]
    if not keep_config:
        for i in range(tm):
            for j in range(tn):
                L.append(f"  %c{i}{j} = phi x86_amx [ %c{i}{j}.0, %entry ], [ %c{i}{j}.next, %loop ]")
    # the step's window position (r, q) and channel chunk cc (constant divisors: multiplies)
    L += [f"  %r = udiv i64 %t, {kw * ncc}", f"  %rq = urem i64 %t, {kw * ncc}",
          f"  %q = udiv i64 %rq, {ncc}", f"  %cc = urem i64 %rq, {ncc}",
          "  %ar = mul i64 %r, %sa0x", "  %aq = mul i64 %q, %sa1x", "  %ac = shl i64 %cc, 6",
          "  %a0 = add i64 %ar, %aq", "  %abase = add i64 %a0, %ac",
          "  %br = mul i64 %r, %sb0x", "  %bq = mul i64 %q, %sb1x", "  %bc16 = shl i64 %cc, 4",
          "  %bc = mul i64 %bc16, %sb2x", "  %b0 = add i64 %br, %bq", "  %bbase = add i64 %b0, %bc"]
    for i in range(tm):
        L.append(f"  %aoffi{i} = mul i64 %astride, {rows * i}")
        L.append(f"  %aoff{i} = add i64 %abase, %aoffi{i}")
        L.append(f"  %ap{i} = getelementptr i8, ptr %a, i64 %aoff{i}")
        load(f"%ta{i}", 4 + i, rows, f"%ap{i}", "%astride")
    for j in range(tn):
        L.append(f"  %boff{j} = add i64 %bbase, {64 * j}")
        L.append(f"  %bp{j} = getelementptr i8, ptr %b, i64 %boff{j}")
        load(f"%tb{j}", 6 + j, 16, f"%bp{j}", "%sb2x")
    for i in range(tm):
        for j in range(tn):
            if keep_config:
                L.append(f"  call void @llvm.x86.tdpbusd(i8 {2 * i + j}, i8 {4 + i}, i8 {6 + j})")
            else:
                L.append(f"  %c{i}{j}.next = call x86_amx @llvm.x86.tdpbusd.internal(i16 {rows}, i16 64, i16 64, "
                         f"x86_amx %c{i}{j}, x86_amx %ta{i}, x86_amx %tb{j})")
    L += ["  %t.next = add i64 %t, 1", f"  %more = icmp slt i64 %t.next, {steps}",
          "  br i1 %more, label %loop, label %done", "done:"]
    for i in range(tm):
        for j in range(tn):
            if keep_config:
                L.append(f"  call void @llvm.x86.tilestored64(i8 {2 * i + j}, ptr %cp{i}{j}, i64 %ldcb)")
            else:
                L.append(f"  call void @llvm.x86.tilestored64.internal(i16 {rows}, i16 64, ptr %cp{i}{j}, "
                         f"i64 %ldcb, x86_amx %c{i}{j}.next)")
    L += ["  ret void", "}", ""]
    return "\n".join(L) + _PERMIT + (_configure_ir(rows) if keep_config else _DECLS)


def conv_u8s8s32_amx(reg_n: int, oc_bn: int, kh: int, kw: int, ic_bn: int, stride: int = 1, *,
                     keep_config: bool = False, name: str | None = None):
    """``cpu_intrinsics.conv_u8s8s32``'s NCHW[x]c output row tile (same TE definition and
    buffers) on AMX tiles: :func:`amx_conv_kernel_ir`, which the schedule must link
    (``s[out].pragma(axis, "import_llvm", amx_conv_kernel_ir(...))``). ``oc_bn`` is 16 or 32,
    ``reg_n`` up to 16 or even up to 32 (:func:`amx_conv_tiles`), ``ic_bn`` a multiple of 64.

    >>> mk = conv_u8s8s32_amx(28, 16, 3, 3, 64)     # 2 A tiles of 14 columns, 1 B tile
    """
    from tilecraft.topi.cpu_intrinsics import conv_u8s8s32_definition

    what = f"conv_u8s8s32_amx({reg_n}, {oc_bn}, {kh}, {kw}, {ic_bn}, {stride})"
    if amx_conv_tiles(reg_n, oc_bn) is None:
        raise ValueError(f"{what}: the tile is {reg_n} columns × {oc_bn} channels; AMX takes 16 or 32 channels "
                         f"and up to 16 columns, or an even number up to 32")
    if ic_bn < 64 or ic_bn % 64:
        raise ValueError(f"{what}: ic_bn must be a positive multiple of 64 (one tile row holds 64 channels)")
    c, binds = conv_u8s8s32_definition(reg_n, oc_bn, kh, kw, ic_bn, stride)
    kernel = amx_conv_kernel_name(reg_n, oc_bn, kh, kw, ic_bn, stride, keep_config)

    def fcompute(ins, outs):
        A, B = ins
        C = outs[0]
        zero = Broadcast(tir.const(0, "int32"), 16)

        def reset():
            ib = tir.ir_builder.create()
            for x in range(reg_n):
                for j in range(0, oc_bn, 16):
                    ib.emit(C.vstore([x, j], zero))
            return ib.get()

        def update():
            return tir.Evaluate(tir.call_extern("int32", kernel, C.access_ptr("rw"), C.strides[0],
                                                A.access_ptr("r"), A.strides[0], A.strides[1],
                                                B.access_ptr("r"), B.strides[0], B.strides[1], B.strides[2]))

        ib = tir.ir_builder.create()
        ib.emit(reset())
        ib.emit(update())
        return ib.get(), reset(), update()

    return te.decl_tensor_intrin(c.op, fcompute, name=name or f"conv_u8s8s32_amx_{reg_n}x{oc_bn}_{kh}x{kw}x{ic_bn}"
                                 f"_s{stride}" + ("_kc" if keep_config else ""), binds=binds)
