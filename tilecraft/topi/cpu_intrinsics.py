"""CPU micro-kernels as tensor intrinsics: an ``MR × NR`` register tile of fp32 FMAs, and int8
dot products (``uint8 × int8 → int32``), for GEMM and NCHW[x]c conv2d templates.

Each intrinsic is a TE definition (what it computes) plus a lowering written with
``tir.ir_builder`` (how): the ``MR × NR`` accumulators are a local buffer that LLVM keeps in
vector registers (``MR × NR / lanes`` of them), and every reduction step loads ``NR / lanes``
vectors of B, broadcasts one element (or one 4-byte group) of A per row, and updates every
accumulator with one instruction:

=================  ======================  ===============================================
ISA (``int8=``)    lanes (fp32 / int32)    the update
=================  ======================  ===============================================
AVX-512            16                      ``llvm.fma.v16f32`` (``vfmadd231ps zmm``)
AVX2 + FMA         8                       ``llvm.fma.v8f32`` (``vfmadd231ps ymm``)
``avx512vnni``     16                      ``llvm.x86.avx512.vpdpbusd.512``: 4 products per lane
``avxvnni``        8                       ``llvm.x86.avx512.vpdpbusd.256`` (AVX-VNNI / AVX512VL)
``avx512bw``       16                      ``vpmaddubsw`` + ``vpmaddwd`` + ``vpaddd`` (512-bit)
``avx2``           8                       ``vpmaddubsw`` + ``vpmaddwd`` + ``vpaddd`` (256-bit)
=================  ======================  ===============================================

The ISA is chosen from the *target's* features (:func:`vector_isa`: ``llvm -mcpu=skylake-avx512``
gives AVX-512 without VNNI on any host), so code can be built for a CPU other than the host.

**int8 exactness.** ``vpdpbusd`` adds four ``uint8 × int8`` products into each int32 lane
exactly (wrapping like int32 arithmetic). ``vpmaddubsw`` adds *pairs* of products into int16
and saturates: ``a0*b0 + a1*b1`` outside ``[-32768, 32767]`` is clipped. That cannot happen when
the uint8 data is at most 127 (PyTorch's ``reduce_range`` quantization on x86) or the int8
weights lie in ``[-64, 64]``. ``exact=True`` (the default of :func:`gemm_u8s8s32` and
:func:`conv_u8s8s32`) avoids it for any input: the data is split into its low 7 bits and its top
bit, two ``vpmaddubsw`` that cannot saturate, each widened by ``vpmaddwd`` (twice the
instructions). ``exact=False`` is TVM's and FBGEMM's single ``vpmaddubsw`` (valid in the ranges
above). VNNI targets are exact either way.

The interpreters run a tensorized region by the TE definition, so every intrinsic is checked
against numpy on any machine; the LLVM build needs the instructions only to *run*.

>>> isa = vector_isa("llvm -mcpu=skylake-avx512")
>>> isa.lanes, isa.int8
(16, 'avx512bw')
>>> mk = gemm_fp32(8, 32, 128, isa=isa)          # C[8, 32] += A[8, 128] @ B[128, 32]
>>> s[C].tensorize(mi, mk)
"""
from __future__ import annotations

from dataclasses import dataclass

from tilecraft import te, tir
from tilecraft.ir.expr import Broadcast, BufferLoad, Ramp
from tilecraft.ir.stmt import BufferStore

INT8_KINDS = ("avx512vnni", "avxvnni", "avx512bw", "avx2")


@dataclass(frozen=True)
class VectorISA:
    """The vector instructions micro-kernels use on a target: ``lanes`` fp32 lanes per register
    (16 with AVX-512, 8 with AVX2, 4 otherwise), ``registers`` vector registers, ``int8`` the
    int8 dot product (one of :data:`INT8_KINDS`, or None) and ``int8_lanes`` its int32 lanes;
    ``amx``: the target has AMX int8 tiles (``topi/cpu_amx.py``)."""
    name: str
    lanes: int
    registers: int
    int8: str | None
    int8_lanes: int
    amx: bool = False

    def __str__(self) -> str:
        return (f"{self.name}" + (f"+{self.int8}" if self.int8 and self.int8 not in (self.name, "avx2") else "")
                + ("+amx" if self.amx else ""))


def vector_isa(target=None) -> VectorISA:
    """The :class:`VectorISA` of ``target`` (a target string, a ``Target``, or None: the current
    target, else the host), from its features (``codegen.llvm_features.cpu_features``).

    >>> vector_isa("llvm -mcpu=znver3")
    VectorISA(name='avx2', lanes=8, registers=16, int8='avx2', int8_lanes=8, amx=False)
    """
    from tilecraft.codegen.llvm_features import cpu_features
    from tilecraft.target import Target

    if target is None:
        target = Target.current() or "llvm"
    f = cpu_features(target)
    if "avx512f" in f:
        name, lanes, regs = "avx512", 16, 32
    elif "avx2" in f and "fma" in f:
        name, lanes, regs = "avx2", 8, 16
    else:
        name, lanes, regs = "sse", 4, 16      # llvm.fma.v4f32 without FMA: correct, not fast
    if "avx512vnni" in f:
        int8 = "avx512vnni"
    elif "avxvnni" in f:
        int8 = "avxvnni"
    elif "avx512bw" in f:
        int8 = "avx512bw"
    elif "avx2" in f:
        int8 = "avx2"
    else:
        int8 = None
    return VectorISA(name, lanes, regs, int8, 16 if int8 in ("avx512vnni", "avx512bw") else 8, "amx-int8" in f)


# LLVM's -mcpu names by vendor (prefixes): the untuned templates pick per-vendor defaults, since
# Golden Cove and Zen cores reach their FMA peak with different register tiles and blockings
_AMD_CPUS = ("znver", "bdver", "btver", "amdfam10", "athlon", "opteron", "barcelona", "k8")
_INTEL_CPUS = ("skylake", "cascadelake", "cooperlake", "cannonlake", "icelake", "tigerlake", "rocketlake",
               "sapphirerapids", "emeraldrapids", "graniterapids", "diamondrapids", "alderlake", "raptorlake",
               "meteorlake", "arrowlake", "lunarlake", "pantherlake", "gracemont", "sierraforest", "grandridge",
               "clearwaterforest", "knl", "knm", "haswell", "broadwell", "sandybridge", "ivybridge", "nehalem",
               "westmere", "goldmont", "tremont", "silvermont", "core2", "penryn")


def cpu_vendor(target=None) -> str:
    """``"intel"``, ``"amd"`` or ``""`` (a generic CPU such as ``x86-64-v4``): whose cores the
    CPU of ``target`` (its ``-mcpu``, else the host's; None: the current target, else the host)
    names.

    >>> cpu_vendor("llvm -mcpu=emeraldrapids"), cpu_vendor("llvm -mcpu=znver5"), cpu_vendor("llvm -mcpu=x86-64-v4")
    ('intel', 'amd', '')
    """
    from tilecraft.codegen.llvm_target import parse_target
    from tilecraft.target import Target

    cpu = parse_target(Target(target if target is not None else (Target.current() or "llvm"))).cpu
    if cpu.startswith(_AMD_CPUS):
        return "amd"
    return "intel" if cpu.startswith(_INTEL_CPUS) else ""


# ------------------------------------------------------------------------------------------------
# one update step per ISA: the A operand (a broadcast, shared by a row's vectors), the B operand
# (one vector), and acc <- acc + a * b

class _FP32:
    def __init__(self, lanes: int):
        self.lanes, self.acc_dtype = lanes, "float32"
        self.vt = f"float32x{lanes}"

    def a_operand(self, a, index):
        return [Broadcast(a.vload(index), self.lanes)]

    def b_operand(self, b, index):
        return b.vload(index, self.vt)

    def step(self, acc, a_ops, b):
        return tir.call_llvm_pure_intrin(self.vt, f"llvm.fma.v{self.lanes}f32", a_ops[0], b, acc)


class _U8S8:
    """int8: A is 4 consecutive uint8 (one int32 broadcast), B 4 int8 per int32 lane."""

    def __init__(self, kind: str, exact: bool):
        self.kind, self.exact = kind, exact
        self.lanes = 16 if kind in ("avx512vnni", "avx512bw") else 8
        self.acc_dtype = "int32"
        self.vt = f"int32x{self.lanes}"
        self.bytes = f"int8x{4 * self.lanes}"
        self.words = f"int16x{2 * self.lanes}"
        wide = self.lanes == 16
        self.pmaddubsw = "llvm.x86.avx512.pmaddubs.w.512" if wide else "llvm.x86.avx2.pmadd.ub.sw"
        self.pmaddwd = "llvm.x86.avx512.pmaddw.d.512" if wide else "llvm.x86.avx2.pmadd.wd"
        self.vpdpbusd = "llvm.x86.avx512.vpdpbusd.512" if wide else "llvm.x86.avx512.vpdpbusd.256"

    def _splat(self, value: int, dtype: str):
        return Broadcast(tir.const(value, dtype), self.lanes * (2 if dtype == "int16" else 1))

    def a_operand(self, a, index):
        x = Broadcast(tir.reinterpret("int32", a.vload(index, "uint8x4")), self.lanes)
        if self.kind in ("avx512vnni", "avxvnni"):
            return [x]
        if not self.exact:
            return [tir.reinterpret(self.bytes, x)]
        low = tir.reinterpret(self.bytes, x & self._splat(0x7F7F7F7F, "int32"))
        top = tir.reinterpret(self.bytes, (x >> self._splat(7, "int32")) & self._splat(0x01010101, "int32"))
        return [low, top]

    def b_operand(self, b, index):
        v = b.vload(index, self.bytes)
        return tir.reinterpret(self.vt, v) if self.kind in ("avx512vnni", "avxvnni") else v

    def step(self, acc, a_ops, b):
        if self.kind in ("avx512vnni", "avxvnni"):
            return tir.call_llvm_pure_intrin(self.vt, self.vpdpbusd, acc, a_ops[0], b)
        out = acc
        for a_op, weight in zip(a_ops, (1, 128)):
            pairs = tir.call_llvm_pure_intrin(self.words, self.pmaddubsw, a_op, b)
            out = out + tir.call_llvm_pure_intrin(self.vt, self.pmaddwd, pairs, self._splat(weight, "int16"))
        return out


def _tile_lowering(ops, mr: int, nr: int, loops, a_index, b_index, unroll: int, extra=None):
    """``fcompute`` for an ``mr × nr`` register tile: ``loops`` are the reduction loops
    ``[(name, extent)]`` (the last one unrolled ``unroll`` times); ``a_index(i, vars)`` is the
    index of row ``i``'s A operand and ``b_index(j, vars)`` that of the B vector at column ``j``;
    ``extra(a, b, vars)``, where given, returns expressions evaluated at each step (prefetches).
    Returns body (zeros, then the steps), reset (zeros into C) and update (C, then the steps)."""
    nv = nr // ops.lanes

    def acc_index(i, v):
        return (Ramp(tir.const(i * nr + v * ops.lanes), tir.const(1), ops.lanes),)

    def fcompute(ins, outs):
        a, b = ins
        c = outs[0]
        zero = Broadcast(tir.const(0, ops.acc_dtype), ops.lanes)

        def tile(load_c: bool):
            ib = tir.ir_builder.create()
            acc = ib.allocate(ops.acc_dtype, (mr * nr,), name="acc", scope="local").buffer
            for i in range(mr):
                for v in range(nv):
                    ib.emit(BufferStore(acc, c.vload([i, v * ops.lanes], ops.vt) if load_c else zero,
                                        acc_index(i, v)))

            def step(vars):
                bs = [ops.b_operand(b, b_index(v * ops.lanes, vars)) for v in range(nv)]
                for i in range(mr):
                    a_ops = ops.a_operand(a, a_index(i, vars))
                    for v in range(nv):
                        old = BufferLoad(acc, acc_index(i, v), ops.vt)
                        ib.emit(BufferStore(acc, ops.step(old, a_ops, bs[v]), acc_index(i, v)))
                for e in extra(a, b, vars) if extra else ():
                    ib.emit(tir.Evaluate(e))

            _steps(ib, loops, unroll, [], step)
            for i in range(mr):
                for v in range(nv):
                    ib.emit(c.vstore([i, v * ops.lanes], BufferLoad(acc, acc_index(i, v), ops.vt)))
            return ib.get()

        def reset():
            ib = tir.ir_builder.create()
            for i in range(mr):
                for v in range(nv):
                    ib.emit(c.vstore([i, v * ops.lanes], zero))
            return ib.get()

        return tile(False), reset(), tile(True)

    return fcompute


def _steps(ib, loops, unroll, vars, emit):
    """Nested ``ir_builder`` loops over ``loops``, the innermost one split by ``unroll`` with the
    inner copies written out; ``emit(vars)`` writes one reduction step."""
    name, extent = loops[0]
    if len(loops) > 1:
        with ib.for_range(0, extent, name=name) as x:
            _steps(ib, loops[1:], unroll, vars + [x], emit)
        return
    if unroll >= extent:
        for u in range(extent):
            emit(vars + [tir.const(u)])
        return
    with ib.for_range(0, extent // unroll, name=name + "o") as xo:
        for u in range(unroll):
            emit(vars + [xo * unroll + u])


# ------------------------------------------------------------------------------------------------
# the intrinsics

def _stride_vars(*names):
    return [te.var(n) for n in names] + [1]


def _check(what: str, mr: int, nr: int, lanes: int, unroll: int, inner: int) -> None:
    if mr < 1 or nr < lanes or nr % lanes:
        raise ValueError(f"{what}: the tile is {mr} × {nr}; its columns must be a multiple of the "
                         f"target's {lanes} lanes")
    if unroll < 1 or (unroll < inner and inner % unroll):
        raise ValueError(f"{what}: unroll={unroll} must divide the innermost reduction extent {inner}")


def _int8_ops(what: str, isa: VectorISA, exact: bool):
    if isa.int8 is None:
        raise ValueError(f"{what}: the target has no int8 dot product (AVX2 at least); its ISA is {isa.name}")
    return _U8S8(isa.int8, exact)


PREFETCH_SYMBOL = "tilecraft_prefetch_l1"
#: LLVM IR of ``tilecraft_prefetch_l1(ptr) -> 0``: one ``prefetcht0``, inlined where it is called.
#: The intrinsics call it through ``call_extern`` (a tilecraft call has a value; LLVM's prefetch
#: has none), so a schedule using ``gemm_fp32(..., prefetch=)`` links it: ``s[C].pragma(axis,
#: "import_llvm", PREFETCH_IR)``.
PREFETCH_IR = f"""define i32 @{PREFETCH_SYMBOL}(ptr %p) alwaysinline {{
  call void @llvm.prefetch.p0(ptr %p, i32 0, i32 3, i32 1)
  ret i32 0
}}
declare void @llvm.prefetch.p0(ptr, i32, i32, i32)
"""


def gemm_fp32(mr: int, nr: int, kc: int, *, isa: VectorISA | None = None, a_layout: str = "rows",
              unroll: int = 1, prefetch: int = 0, name: str | None = None):
    """``c[mr, nr] += a · b`` over ``kc`` steps, fp32: with ``a_layout="rows"`` ``a`` is
    ``[mr, kc]`` (``c[i, j] = sum_k a[i, k] * b[k, j]``), with ``"panel"`` it is ``[kc, mr]`` (A
    packed so that one step's ``mr`` elements are contiguous: ``a[k, i]``); ``b`` is ``[kc, nr]``.
    Every buffer may have any row stride. ``nr`` is a multiple of the ISA's lanes; the
    ``mr × nr / lanes`` accumulators, ``nr / lanes`` B vectors and a broadcast should fit its
    registers. ``unroll`` copies of the step per loop iteration. ``prefetch`` (bytes, panel
    layout only): each step asks for the A panel about that far ahead into L1 (the row
    ``ceil(prefetch / (4 mr))`` steps on, the last row at the end of the slice), one
    ``prefetcht0`` per step; the schedule must link :data:`PREFETCH_IR`.

    >>> mk = gemm_fp32(8, 32, 256, isa=vector_isa("llvm -mcpu=skylake-avx512"))   # 16 zmm accumulators
    """
    isa = isa or vector_isa()
    what = f"gemm_fp32({mr}, {nr}, {kc})"
    _check(what, mr, nr, isa.lanes, unroll, kc)
    if a_layout not in ("rows", "panel"):
        raise ValueError(f"{what}: a_layout must be 'rows' or 'panel', got {a_layout!r}")
    if prefetch < 0 or (prefetch and a_layout != "panel"):
        raise ValueError(f"{what}: prefetch={prefetch} needs a_layout='panel' (A packed in panels) and "
                         f"a distance of 0 or more bytes")
    rows = a_layout == "rows"
    a = te.placeholder((mr, kc) if rows else (kc, mr), name="a")
    b = te.placeholder((kc, nr), name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute((mr, nr), lambda i, j: te.sum((a[i, k] if rows else a[k, i]) * b[k, j], axis=k), name="c")
    binds = {a: tir.decl_buffer(a.shape, "float32", name="A", offset_factor=1, strides=_stride_vars("lda")),
             b: tir.decl_buffer(b.shape, "float32", name="B", offset_factor=1, strides=_stride_vars("ldb")),
             c: tir.decl_buffer(c.shape, "float32", name="C", offset_factor=1, strides=_stride_vars("ldc"))}
    a_index = (lambda i, v: [i, v[0]]) if rows else (lambda i, v: [v[0], i])
    extra = None
    if prefetch:
        ahead = -(-prefetch // (4 * mr))

        def extra(a_buf, b_buf, v):
            row = te.min(v[0] + ahead, kc - 1)
            return [tir.call_extern("int32", PREFETCH_SYMBOL,
                                    a_buf.access_ptr("r", offset=row * a_buf.strides[0], extent=1))]
    lower = _tile_lowering(_FP32(isa.lanes), mr, nr, [("k", kc)], a_index, lambda j, v: [v[0], j], unroll,
                           extra)
    name = name or (f"gemm_fp32_{mr}x{nr}x{kc}{'' if rows else '_panel'}_{isa.name}_u{unroll}"
                    + (f"_pf{prefetch}" if prefetch else ""))
    return te.decl_tensor_intrin(c.op, lower, name=name, binds=binds)


def conv_fp32(reg_n: int, oc_bn: int, kh: int, kw: int, ic_bn: int, stride: int = 1, *,
              isa: VectorISA | None = None, unroll: int = 1, name: str | None = None):
    """One NCHW[x]c output row tile, fp32: ``c[x, co] = sum_{r, s, ci} a[r, x*stride + s, ci] *
    b[r, s, ci, co]`` for ``reg_n`` output columns × ``oc_bn`` output channels, over the kernel
    window (``kh × kw``) and one block of ``ic_bn`` input channels. ``a`` is the packed input's
    window ``[kh, (reg_n - 1)*stride + kw, ic_bn]``, ``b`` the packed kernel's block
    ``[kh, kw, ic_bn, oc_bn]``, ``c`` the output tile ``[reg_n, oc_bn]`` (any strides).

    >>> mk = conv_fp32(7, 32, 3, 3, 16)     # 7 columns × 2 vectors of channels, 3×3, 16 channels
    """
    isa = isa or vector_isa()
    what = f"conv_fp32({reg_n}, {oc_bn}, {kh}, {kw}, {ic_bn}, {stride})"
    _check(what, reg_n, oc_bn, isa.lanes, unroll, ic_bn)
    a = te.placeholder((kh, (reg_n - 1) * stride + kw, ic_bn), name="a")
    b = te.placeholder((kh, kw, ic_bn, oc_bn), name="b")
    r = te.reduce_axis((0, kh), name="r")
    q = te.reduce_axis((0, kw), name="q")
    ci = te.reduce_axis((0, ic_bn), name="ci")
    c = te.compute((reg_n, oc_bn), lambda x, co: te.sum(a[r, x * stride + q, ci] * b[r, q, ci, co],
                                                        axis=[r, q, ci]), name="c")
    binds = {a: tir.decl_buffer(a.shape, "float32", name="A", offset_factor=1, strides=_stride_vars("sa0", "sa1")),
             b: tir.decl_buffer(b.shape, "float32", name="B", offset_factor=1,
                                strides=_stride_vars("sb0", "sb1", "sb2")),
             c: tir.decl_buffer(c.shape, "float32", name="C", offset_factor=1, strides=_stride_vars("ldc"))}
    lower = _tile_lowering(_FP32(isa.lanes), reg_n, oc_bn, [("r", kh), ("q", kw), ("ci", ic_bn)],
                           lambda x, v: [v[0], x * stride + v[1], v[2]], lambda j, v: [v[0], v[1], v[2], j],
                           unroll)
    name = name or f"conv_fp32_{reg_n}x{oc_bn}_{kh}x{kw}x{ic_bn}_s{stride}_{isa.name}_u{unroll}"
    return te.decl_tensor_intrin(c.op, lower, name=name, binds=binds)


def gemm_u8s8s32(mr: int, nr: int, kc: int, *, isa: VectorISA | None = None, unroll: int = 1,
                 exact: bool = True, name: str | None = None):
    """``c[mr, nr] += a · b`` in int32 over ``kc`` steps (a multiple of 4) of ``uint8 × int8``:
    ``c[i, j] = sum_{k4, kb} int32(a[i, 4*k4 + kb]) * int32(b[k4, j, kb])``. ``a`` is ``[mr, kc]``
    uint8 (any row stride), ``b`` the int8 weights packed as ``[kc / 4, nr, 4]`` (four
    consecutive k of one column together: the layout ``vpdpbusd`` reads), ``c`` ``[mr, nr]``
    int32. ``exact``: see the module docstring (matters without VNNI only).

    >>> mk = gemm_u8s8s32(8, 32, 64, isa=vector_isa("llvm -mcpu=cascadelake"))   # vpdpbusd zmm
    """
    isa = isa or vector_isa()
    what = f"gemm_u8s8s32({mr}, {nr}, {kc})"
    ops = _int8_ops(what, isa, exact)
    if kc % 4:
        raise ValueError(f"{what}: kc must be a multiple of 4 (one dot product adds 4 products)")
    _check(what, mr, nr, ops.lanes, unroll, kc // 4)
    a = te.placeholder((mr, kc), "uint8", name="a")
    b = te.placeholder((kc // 4, nr, 4), "int8", name="b")
    k4 = te.reduce_axis((0, kc // 4), name="k4")
    kb = te.reduce_axis((0, 4), name="kb")
    c = te.compute((mr, nr), lambda i, j: te.sum(a[i, k4 * 4 + kb].astype("int32") * b[k4, j, kb].astype("int32"),
                                                 axis=[k4, kb]), name="c")
    binds = {a: tir.decl_buffer(a.shape, "uint8", name="A", offset_factor=1, strides=_stride_vars("lda")),
             b: tir.decl_buffer(b.shape, "int8", name="B", offset_factor=1, strides=[te.var("ldb"), 4, 1]),
             c: tir.decl_buffer(c.shape, "int32", name="C", offset_factor=1, strides=_stride_vars("ldc"))}
    lower = _tile_lowering(ops, mr, nr, [("k", kc // 4)], lambda i, v: [i, v[0] * 4], lambda j, v: [v[0], j, 0],
                           unroll)
    name = name or f"gemm_u8s8s32_{mr}x{nr}x{kc}_{isa.int8}{'' if exact else '_sat'}_u{unroll}"
    return te.decl_tensor_intrin(c.op, lower, name=name, binds=binds)


def conv_u8s8s32(reg_n: int, oc_bn: int, kh: int, kw: int, ic_bn: int, stride: int = 1, *,
                 isa: VectorISA | None = None, unroll: int = 1, exact: bool = True, name: str | None = None):
    """One NCHW[x]c int8 output row tile: ``c[x, co] = sum_{r, s, c4, kb} int32(a[r, x*stride + s,
    4*c4 + kb]) * int32(b[r, s, c4, co, kb])`` (uint8 input window ``[kh, (reg_n - 1)*stride +
    kw, ic_bn]``, int8 kernel block ``[kh, kw, ic_bn / 4, oc_bn, 4]``, int32 output tile
    ``[reg_n, oc_bn]``), as :func:`conv_fp32` with :func:`gemm_u8s8s32`'s dot products.

    >>> mk = conv_u8s8s32(7, 16, 3, 3, 16)
    """
    isa = isa or vector_isa()
    what = f"conv_u8s8s32({reg_n}, {oc_bn}, {kh}, {kw}, {ic_bn}, {stride})"
    ops = _int8_ops(what, isa, exact)
    if ic_bn % 4:
        raise ValueError(f"{what}: ic_bn must be a multiple of 4 (one dot product adds 4 products)")
    _check(what, reg_n, oc_bn, ops.lanes, unroll, ic_bn // 4)
    c, binds = conv_u8s8s32_definition(reg_n, oc_bn, kh, kw, ic_bn, stride)
    lower = _tile_lowering(ops, reg_n, oc_bn, [("r", kh), ("q", kw), ("c", ic_bn // 4)],
                           lambda x, v: [v[0], x * stride + v[1], v[2] * 4], lambda j, v: [v[0], v[1], v[2], j, 0],
                           unroll)
    name = name or (f"conv_u8s8s32_{reg_n}x{oc_bn}_{kh}x{kw}x{ic_bn}_s{stride}_{isa.int8}"
                    f"{'' if exact else '_sat'}_u{unroll}")
    return te.decl_tensor_intrin(c.op, lower, name=name, binds=binds)


def conv_u8s8s32_definition(reg_n: int, oc_bn: int, kh: int, kw: int, ic_bn: int, stride: int):
    """The TE definition and buffers of :func:`conv_u8s8s32` (``c`` and its ``binds``), shared
    with the AMX form (``cpu_amx.conv_u8s8s32_amx``)."""
    a = te.placeholder((kh, (reg_n - 1) * stride + kw, ic_bn), "uint8", name="a")
    b = te.placeholder((kh, kw, ic_bn // 4, oc_bn, 4), "int8", name="b")
    r = te.reduce_axis((0, kh), name="r")
    q = te.reduce_axis((0, kw), name="q")
    c4 = te.reduce_axis((0, ic_bn // 4), name="c4")
    kb = te.reduce_axis((0, 4), name="kb")
    c = te.compute((reg_n, oc_bn), lambda x, co: te.sum(
        a[r, x * stride + q, c4 * 4 + kb].astype("int32") * b[r, q, c4, co, kb].astype("int32"),
        axis=[r, q, c4, kb]), name="c")
    binds = {a: tir.decl_buffer(a.shape, "uint8", name="A", offset_factor=1, strides=_stride_vars("sa0", "sa1")),
             b: tir.decl_buffer(b.shape, "int8", name="B", offset_factor=1,
                                strides=[te.var("sb0"), te.var("sb1"), te.var("sb2"), 4, 1]),
             c: tir.decl_buffer(c.shape, "int32", name="C", offset_factor=1, strides=_stride_vars("ldc"))}
    return c, binds


def dot_16x1x16_uint8_int8_int32(target=None, exact: bool = False):
    """TVM's x86 int8 intrinsic (``topi/x86/tensor_intrin.py``), same TE definition and buffers:
    ``C[i] = sum_k int32(data[k]) * int32(kernel[i, k])`` for 16 int32 lanes and 4 ``k``, with
    ``data`` 4 uint8 and ``kernel`` ``[16, 4]`` int8 (one 64-byte vector). ``vpdpbusd`` where the
    target has AVX512-VNNI, else ``vpmaddubsw`` + ``vpmaddwd`` (AVX512-BW; like TVM, saturating
    unless ``exact``). Needs 512-bit vectors; TVM scripts use it as ``s[C].tensorize(ax, pc)``.

    >>> pc = dot_16x1x16_uint8_int8_int32("llvm -mcpu=cascadelake")
    """
    isa = vector_isa(target)
    if isa.int8 not in ("avx512vnni", "avx512bw"):
        raise ValueError(f"dot_16x1x16_uint8_int8_int32 needs AVX512-BW or AVX512-VNNI; the target "
                         f"{target or 'llvm'} has {isa.int8 or 'no int8 dot product'} (use gemm_u8s8s32)")
    ops = _U8S8(isa.int8, exact)
    data = te.placeholder((4,), "uint8", name="data")
    kernel = te.placeholder((16, 4), "int8", name="kernel")
    k = te.reduce_axis((0, 4), name="k")
    C = te.compute((16,), lambda i: te.sum(data[k].astype("int32") * kernel[i, k].astype("int32"), axis=k),
                   name="C")
    binds = {data: tir.decl_buffer((4,), "uint8", name="a_buffer", offset_factor=1, strides=[1]),
             kernel: tir.decl_buffer((16, 4), "int8", name="b_buffer", offset_factor=1, strides=[4, 1])}

    def fcompute(ins, outs):
        a_ops = ops.a_operand(ins[0], [0])
        b = ops.b_operand(ins[1], [0, 0])
        zero = Broadcast(tir.const(0, "int32"), 16)
        body = outs[0].vstore([0], ops.step(zero, a_ops, b))
        update = outs[0].vstore([0], ops.step(outs[0].vload([0], "int32x16"), a_ops, b))
        return body, outs[0].vstore([0], zero), update

    return te.decl_tensor_intrin(C.op, fcompute, name=f"dot_16x1x16_uint8_int8_int32_{isa.int8}",
                                 binds=binds, default_buffer_params={"offset_factor": 1})
