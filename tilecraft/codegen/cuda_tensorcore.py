"""CUDA C for the warp-collective tensor-core calls (``ir/builtin.py``'s ``WARP_BUILTINS``) and
the fragments they work on.

A fragment is a buffer in a scope of ``FRAGMENT_SCOPES`` holding 16 x 16 tiles; it is one
array of the kernel per warp, spread over the warp's registers, which only these calls touch:

* ``wmma.matrix_a`` / ``wmma.matrix_b`` / ``wmma.accumulator`` (TVM's wmma path): an array of
  ``nvcuda::wmma::fragment<...>``, one per tile (the operands' layout is the one their
  ``tvm_load_matrix_sync`` calls name); the calls are ``nvcuda::wmma`` functions.
* ``mma.matrix_a`` / ``mma.matrix_b`` / ``mma.accumulator`` (the PTX path): plain registers,
  4 ``unsigned`` (32 bytes of a tile row-pair) per tile and lane for the operands, 8 ``float``
  (``int`` for int8) per tile and lane for the accumulator, in the layout of
  ``mma.sync.aligned.m16n8kK.row.col``: ``tc_ldmatrix`` is one ``ldmatrix.x4`` (``.trans`` where
  a 16-bit tile is stored the other way), ``tc_mma_sync`` two ``mma.sync`` (the two 8-column
  halves of the 16 x 16 result), ``tc_mma_store`` four 8-byte (or 4-byte, for a float16 C)
  stores per lane. The helpers are in :data:`MMA_PRELUDE` (added when a kernel uses them).

The operand dtype picks the instruction (:data:`MMA_KINDS`); an operand tile is always 16 rows
of 32 bytes, so its depth K is 16 for float16, 8 for float32 (tf32) and 32 for int8, and the
same ``ldmatrix.x4`` addressing gives every lane its registers (for 32-bit and 8-bit elements
only untransposed: a B tile must be stored n-major, ``col_major``).

Lane layouts (``g = lane / 4``, ``t = lane % 4``; PTX ISA, "Matrix fragments for mma.m16n8k16"):
an A tile's register ``r`` holds rows ``g + 8 * (r % 2)``, bytes ``4t .. 4t + 3`` plus
``16 * (r / 2)`` (fp16: columns ``2t, 2t + 1`` plus ``8 * (r / 2)``; tf32: column ``t + 4 * (r / 2)``;
int8: columns ``4t .. 4t + 3`` plus ``16 * (r / 2)``); a B tile's register ``r`` holds
k-bytes ``4t .. 4t + 3`` plus ``16 * (r % 2)`` of column ``g + 8 * (r / 2)`` (fp16: rows (k)
``2t, 2t + 1`` plus ``8 * (r % 2)``); the accumulator's ``4h + 2i + j`` is row ``g + 8i``, column
``8h + 2t + j``. ``ldmatrix`` gives each lane those elements when lane ``l`` supplies the address
of row ``l % 16``, column ``8 * (l / 16)`` of a tile stored as it is used (A row-major, B
stored k-major with ``.trans``) and of row ``8 * (l / 16) + l % 8``, column ``8 * (l / 8 % 2)``
of a tile stored the other way.
"""
from __future__ import annotations

from ..ir import dtype as dt
from ..ir.builtin import FRAGMENT_SCOPES, warp_operands

# registers per lane and tile for the mma.* scopes (an operand tile is 16 rows of 32 bytes, an
# accumulator tile 16 x 16 of 4-byte elements)
MMA_REGS = {"mma.matrix_a": 4, "mma.matrix_b": 4, "mma.accumulator": 8}
# the mma.sync kinds: operand dtype -> (tile depth K, accumulator dtype, helper, its C type)
MMA_KINDS = {"float16": (16, "float32", "tc_mma_16x16x16", "float"),
             "float32": (8, "float32", "tc_mma_16x16x8_tf32", "float"),
             "int8": (32, "int32", "tc_mma_16x16x32_s8", "int"),
             "bfloat16": (16, "float32", "tc_mma_16x16x16_bf16", "float")}
ACC_CTYPE = {"float32": "float", "int32": "int"}
# the PTX shape and types of each kind's instruction, and the asm constraint of its accumulator
MMA_PTX = {"float16": ("m16n8k16", "f32.f16.f16.f32", "f"), "float32": ("m16n8k8", "f32.tf32.tf32.f32", "f"),
           "int8": ("m16n8k32", "s32.s8.s8.s32", "r"), "bfloat16": ("m16n8k16", "f32.bf16.bf16.f32", "f")}


WMMA_ROLE = {"wmma.matrix_a": "matrix_a", "wmma.matrix_b": "matrix_b", "wmma.accumulator": "accumulator"}

_MMA_FUNCTION = r"""
// d = a @ b + c on a 16 x 16 accumulator tile as two @SHAPE@ (one per 8-column half):
// a is 16 rows of 32 bytes (4 registers), b 32 bytes by 16 columns (2 registers per half)
__device__ __forceinline__ void @NAME@(@T@* d, const unsigned* a, const unsigned* b, const @T@* c) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    asm("mma.sync.aligned.@SHAPE@.row.col.@TYPES@ "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=@C@"(d[4 * h]), "=@C@"(d[4 * h + 1]), "=@C@"(d[4 * h + 2]), "=@C@"(d[4 * h + 3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * h]), "r"(b[2 * h + 1]),
          "@C@"(c[4 * h]), "@C@"(c[4 * h + 1]), "@C@"(c[4 * h + 2]), "@C@"(c[4 * h + 3]));
  }
}
"""


def _mma_function(dtype: str) -> str:
    """The C helper of one mma.sync kind (written out per kind, so the PTX strings stay greppable)."""
    name, ctype = MMA_KINDS[dtype][2:]
    shape, types, con = MMA_PTX[dtype]
    text = _MMA_FUNCTION
    for k, v in (("@NAME@", name), ("@T@", ctype), ("@SHAPE@", shape), ("@TYPES@", types), ("@C@", con)):
        text = text.replace(k, v)
    return text


_MMA_PRELUDE = r"""
// ---- tensor cores through PTX: 16 x 16 x K tiles as two mma.sync.m16n8kK ------------------
// the thread's lane in its warp (whatever the block's shape: threadIdx.x & 31 is that only when
// blockDim.x is a multiple of 32)
__device__ __forceinline__ int tc_lane() {
  unsigned l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return (int)l;
}
// ldmatrix.x4 of a 16 x 16 tile of 16-bit elements at `tile` (rows `stride` elements apart);
// SPLIT: the tile is stored the other way round (see cuda_tensorcore.py for the lane layouts)
template <bool TRANS, bool SPLIT>
__device__ __forceinline__ void tc_ldmatrix_x4(unsigned* r, const void* tile, int stride) {
  const int lane = tc_lane();
  const int row = SPLIT ? ((lane >> 4) << 3) + (lane & 7) : (lane & 15);
  const int col = SPLIT ? ((lane >> 3) & 1) << 3 : (lane >> 4) << 3;
  const unsigned addr = (unsigned)__cvta_generic_to_shared((const unsigned short*)tile + row * stride + col);
  if (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  }
}

// ldmatrix of a float32 tile (16 rows of 8), its four registers rounded to tf32 (to nearest, ties
// away from zero; mma.sync would otherwise ignore the low 13 bits of the mantissa)
template <bool SPLIT>
__device__ __forceinline__ void tc_ldmatrix_tf32_x4(unsigned* r, const void* tile, int stride) {
  tc_ldmatrix_x4<false, SPLIT>(r, tile, 2 * stride);
#pragma unroll
  for (int i = 0; i < 4; ++i) asm("cvt.rna.tf32.f32 %0, %0;\n" : "+r"(r[i]));
}

@MMA_FUNCTIONS@
template <typename T>
__device__ __forceinline__ void tc_mma_fill(T* d, T v) {
#pragma unroll
  for (int i = 0; i < 8; ++i) d[i] = v;
}

// the accumulator tile to memory, row-major with rows `stride` apart: each lane its 8 elements,
// two at a time (float2 / int2), or rounded to nearest as float16 / bfloat16 (the half-size epilogue,
// 16 bytes a lane after a transpose across each quad of lanes, below)
__device__ __forceinline__ void tc_mma_store(float* out, const float* d, int stride) {
  const int lane = tc_lane(), g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    *(float2*)(out + g * stride + 8 * h + 2 * t) = make_float2(d[4 * h], d[4 * h + 1]);
    *(float2*)(out + (g + 8) * stride + 8 * h + 2 * t) = make_float2(d[4 * h + 2], d[4 * h + 3]);
  }
}
__device__ __forceinline__ void tc_mma_store(int* out, const int* d, int stride) {
  const int lane = tc_lane(), g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    *(int2*)(out + g * stride + 8 * h + 2 * t) = make_int2(d[4 * h], d[4 * h + 1]);
    *(int2*)(out + (g + 8) * stride + 8 * h + 2 * t) = make_int2(d[4 * h + 2], d[4 * h + 3]);
  }
}
// a 16-bit C 16 bytes a lane: the quad of lanes 4g .. 4g + 3 holds rows g and g + 8 of both 8-column
// groups as pairs, p[2i + h] (row g + 8i, group h, columns 2t, 2t + 1); a 4 x 4 transpose across the
// quad (two butterfly stages, __shfl_xor_sync 2 then 1) gives lane t the 8 columns of row g + 8 (t / 2),
// group t % 2, stored as one uint4 (a warp's store: 16 rows of 32 bytes, whole sectors). Where the
// tile or its rows are not 16-byte aligned, the pairs are stored as held.
__device__ __forceinline__ bool tc_store16_transpose(unsigned* p, const void* out, int stride, int elem_bytes) {
  if (((size_t)out & 15) != 0 || ((stride * elem_bytes) & 15) != 0) return false;
  const int t = tc_lane() & 3;
#pragma unroll
  for (int m = 2; m >= 1; m >>= 1) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (r & m) continue;                       // the slot pair (r, r | m)
      const bool hi = (t & m) != 0;
      const unsigned got = __shfl_xor_sync(0xffffffffu, hi ? p[r] : p[r | m], m);
      if (hi) p[r] = got; else p[r | m] = got;
    }
  }
  return true;
}
__device__ __forceinline__ void tc_mma_store(half* out, const float* d, int stride) {
  const int lane = tc_lane(), g = lane >> 2, t = lane & 3;
  unsigned p[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    half2 v = __floats2half2_rn(d[4 * (r & 1) + 2 * (r >> 1)], d[4 * (r & 1) + 2 * (r >> 1) + 1]);
    p[r] = *(unsigned*)&v;
  }
  if (tc_store16_transpose(p, out, stride, 2)) {
    *(uint4*)(out + (g + 8 * (t >> 1)) * stride + 8 * (t & 1)) = make_uint4(p[0], p[1], p[2], p[3]);
    return;
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) *(unsigned*)(out + (g + 8 * (r >> 1)) * stride + 8 * (r & 1) + 2 * t) = p[r];
}
#ifdef __CUDA_BF16_TYPES_EXIST__
__device__ __forceinline__ void tc_mma_store(__nv_bfloat16* out, const float* d, int stride) {
  const int lane = tc_lane(), g = lane >> 2, t = lane & 3;
  unsigned p[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    __nv_bfloat162 v = __floats2bfloat162_rn(d[4 * (r & 1) + 2 * (r >> 1)], d[4 * (r & 1) + 2 * (r >> 1) + 1]);
    p[r] = *(unsigned*)&v;
  }
  if (tc_store16_transpose(p, out, stride, 2)) {
    *(uint4*)(out + (g + 8 * (t >> 1)) * stride + 8 * (t & 1)) = make_uint4(p[0], p[1], p[2], p[3]);
    return;
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) *(unsigned*)(out + (g + 8 * (r >> 1)) * stride + 8 * (r & 1) + 2 * t) = p[r];
}
#endif
"""

MMA_PRELUDE = _MMA_PRELUDE.replace("@MMA_FUNCTIONS@", "".join(_mma_function(d) for d in MMA_KINDS))

ASYNC_COPY_PRELUDE = r"""
// ---- asynchronous copies global -> shared (cp.async, sm_80+), waited for by groups ------------
template <int BYTES>
__device__ __forceinline__ void tc_cp_async(void* dst, const void* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  if (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" :: "r"(s), "l"(src), "n"(BYTES) : "memory");
  }
}
// the same where `pred` holds, else BYTES zeros into dst and nothing read (src-size 0)
template <int BYTES>
__device__ __forceinline__ void tc_cp_async_zfill(void* dst, const void* src, bool pred) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  const int n = pred ? BYTES : 0;
  if (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(src), "r"(n) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(s), "l"(src), "n"(BYTES), "r"(n) : "memory");
  }
}
#define tc_cp_async_commit() asm volatile("cp.async.commit_group;\n" ::: "memory")
#define tc_cp_async_wait(N) asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory")
"""


def async_copy_call(r, e) -> str:
    """The C statement (without ``;``) of an asynchronous-copy call (``ASYNC_COPY_BUILTINS``)."""
    if e.name == "tc_cp_async":
        dst, src, nbytes = e.args
        return f"tc_cp_async<{int(nbytes.value)}>({r.expr(dst)}, {r.expr(src)})"
    if e.name == "tc_cp_async_zfill":
        # where pred fails the source address may lie outside its buffer (a padded border): pass
        # the buffer's start instead, never read
        dst, src, nbytes, pred = e.args
        p = r.expr(pred)
        return (f"tc_cp_async_zfill<{int(nbytes.value)}>({r.expr(dst)}, ({p}) ? (const void*)({r.expr(src)}) : "
                f"(const void*)({r.buf(src.buffer)}), {p})")
    if e.name == "tc_cp_async_commit":
        return "tc_cp_async_commit()"
    return f"tc_cp_async_wait({int(e.args[0].value)})"


TILE = 256                     # elements of one 16 x 16 tile
LAYOUT_CALLS = ("tvm_load_matrix_sync", "tvm_store_matrix_sync", "tc_ldmatrix")


class FragmentError(ValueError):
    """A fragment or a tensor-core call the CUDA C cannot express; the message names them."""


def fragment_layouts(body) -> dict:
    """``{fragment data var: layout}`` of a kernel: the layout its loads (operands) or stores
    (accumulators) name. A wmma operand fragment's type carries it, and a ``col_major`` tile is
    the transpose of the matrix the hardware uses; one layout per fragment."""
    from ..ir.expr import Call
    from ..ir.functor import post_order_visit
    out: dict = {}

    def f(n):
        if isinstance(n, Call) and n.name in LAYOUT_CALLS:
            ops = warp_operands(n)
            var = ops["frag"][0][0]
            old = out.setdefault(var, ops["layout"])
            if old != ops["layout"]:
                raise FragmentError(f"the fragment '{var.name}' is loaded or stored as {old} and as "
                                    f"{ops['layout']}; a fragment has one layout")
    post_order_visit(body, f)
    return out


def tile_elements(scope: str, dtype: str) -> int:
    """Elements of one tile of a fragment: 16 x 16, except an mma operand tile, 16 rows of 32 bytes
    (16 x 16 float16, 16 x 8 float32 for tf32, 16 x 32 int8)."""
    if scope in ("mma.matrix_a", "mma.matrix_b"):
        return 16 * (256 // dt.bits(dtype))
    return TILE


def fragment_decl(buf, name: str, ctype: str, layouts: dict) -> str:
    """The declaration of a fragment buffer (one array per lane of each warp)."""
    size = int(buf.shape[0].value)
    elem = dt.element_of(buf.dtype)
    if buf.scope in MMA_REGS:
        ok = elem in ACC_CTYPE if buf.scope == "mma.accumulator" else elem in MMA_KINDS
        if not ok:
            raise FragmentError(f"the fragment '{buf.name}' in scope {buf.scope} is {buf.dtype}; the mma.sync "
                                f"path takes float16, bfloat16, float32 (tf32) or int8 operands and a float32 or int32 "
                                f"accumulator")
    per = tile_elements(buf.scope, elem)
    if size % per:
        shape = "16 x 16" if per == TILE else f"16 x {per // 16}"
        raise FragmentError(f"the fragment '{buf.name}' in scope {buf.scope} holds {size} elements, not a "
                            f"whole number of {shape} tiles")
    tiles = size // per
    if buf.scope in MMA_REGS:
        ty = ACC_CTYPE[elem] if buf.scope == "mma.accumulator" else "unsigned"
        return f"{ty} {name}[{tiles * MMA_REGS[buf.scope]}];"
    role = WMMA_ROLE[buf.scope]
    layout = ""
    if role != "accumulator":
        layout = f", nvcuda::wmma::{layouts.get(buf.data, 'row_major')}"
    return f"nvcuda::wmma::fragment<nvcuda::wmma::{role}, 16, 16, 16, {ctype}{layout}> {name}[{tiles}];"


def warp_call(r, e) -> str:
    """The C statement (without ``;``) of a warp-collective call ``e`` for the renderer ``r``
    (which renders the operands and knows the fragments' scopes)."""
    ops = warp_operands(e)
    frags = [(r.fragment(v, e), r.expr(i)) for v, i in ops["frag"]]
    ptr = ops["ptr"]
    name = e.name
    if name == "tvm_fill_fragment":
        (f, i), = frags
        return f"nvcuda::wmma::fill_fragment({f}[{i}], {_value(r, ops['value'], r.fragments[f][1])})"
    if name == "tvm_mma_sync":
        (d, di), (a, ai), (b, bi), (c, ci) = frags
        return f"nvcuda::wmma::mma_sync({d}[{di}], {a}[{ai}], {b}[{bi}], {c}[{ci}])"
    if name in ("tvm_load_matrix_sync", "tvm_store_matrix_sync"):
        (f, i), = frags
        p, stride = r.expr(ptr), r.expr(ops["stride"])
        acc = r.fragments[f][0] == "wmma.accumulator"
        mem = f", nvcuda::wmma::mem_{ops['layout']}"
        if name == "tvm_load_matrix_sync":
            return f"nvcuda::wmma::load_matrix_sync({f}[{i}], {p}, {stride}{mem if acc else ''})"
        if not acc:
            raise FragmentError(f"tvm_store_matrix_sync of '{f}' ({r.fragments[f][0]}): only an accumulator "
                                f"fragment can be stored")
        return f"nvcuda::wmma::store_matrix_sync({p}, {f}[{i}], {stride}{mem})"
    if name == "tc_ldmatrix":
        (f, i), = frags
        scope, _, dtype = r.fragments[f]
        if ptr.buffer.scope != "shared":
            raise FragmentError(f"tc_ldmatrix into '{f}' reads '{ptr.buffer.name}', which is in {ptr.buffer.scope} "
                                f"memory; ldmatrix reads shared memory only (cache_read it into 'shared')")
        if scope == "mma.accumulator":
            raise FragmentError(f"tc_ldmatrix into the accumulator '{f}': ldmatrix loads operands (mma.matrix_a/b)")
        row = ops["layout"] == "row_major"
        trans = row == (scope == "mma.matrix_b")        # A row-major and B stored [n][k] need no .trans
        split = not row
        stride = r.expr(ops["stride"])
        if dt.bits(dtype) != 16 and trans:
            raise FragmentError(f"tc_ldmatrix into '{f}' ({scope}, {dtype}) of a tile stored {ops['layout']}: "
                                f"ldmatrix transposes 16-bit elements only; store "
                                f"{'A as M x K (row_major)' if scope == 'mma.matrix_a' else 'B as N x K (col_major)'}")
        if dtype == "float32":
            return f"tc_ldmatrix_tf32_x4<{str(split).lower()}>({f} + 4 * ({i}), {r.expr(ptr)}, {stride})"
        if dtype == "int8":
            stride = f"({stride}) / 2"                 # the helper counts 16-bit elements
        return f"tc_ldmatrix_x4<{str(trans).lower()}, {str(split).lower()}>({f} + 4 * ({i}), {r.expr(ptr)}, {stride})"
    if name == "tc_mma_sync":
        (d, di), (a, ai), (b, bi), (c, ci) = frags
        kinds = [r.fragments[x][2] for x in (d, a, b, c)]
        kind = MMA_KINDS.get(kinds[1])
        if kind is None or kinds[2] != kinds[1] or kinds[0] != kind[1] or kinds[3] != kind[1]:
            raise FragmentError(f"tc_mma_sync {d} = {a} @ {b} + {c} on {kinds[1]} x {kinds[2]} -> {kinds[0]}: "
                                f"mma.sync multiplies " + ", ".join(f"{k} x {k} -> {v[1]}" for k, v in MMA_KINDS.items()))
        return f"{kind[2]}({d} + 8 * ({di}), {a} + 4 * ({ai}), {b} + 4 * ({bi}), {c} + 8 * ({ci}))"
    if name == "tc_mma_fill":
        (f, i), = frags
        ctype = ACC_CTYPE[r.fragments[f][2]]
        return f"tc_mma_fill<{ctype}>({f} + 8 * ({i}), {_value(r, ops['value'], ctype)})"
    if name == "tc_mma_store":
        (f, i), = frags
        acc, out = r.fragments[f][2], dt.element_of(ptr.buffer.dtype)
        if out != acc and not (acc == "float32" and out in ("float16", "bfloat16")):
            raise FragmentError(f"tc_mma_store of '{f}' ({acc}) into '{ptr.buffer.name}' ({ptr.buffer.dtype}): "
                                f"an accumulator is stored as its own dtype "
                                f"(or float32 as float16 or bfloat16)")
        return f"tc_mma_store({r.expr(ptr)}, {f} + 8 * ({i}), {r.expr(ops['stride'])})"
    raise FragmentError(f"no CUDA C for the call {name}")


def _value(r, v, ctype: str) -> str:
    return f"({ctype})({r.expr(v)})"


def check_fragment_use(buf, what: str):
    """Refuse an element access of a fragment (only the tensor-core calls may touch one)."""
    if buf.scope in FRAGMENT_SCOPES:
        raise FragmentError(
            f"'{buf.name}' is a fragment (scope {buf.scope}) but is {what} element by element; its "
            f"elements live in the registers of a whole warp, so only tensor-core calls may touch it: "
            f"tensorize the stages that read and write it (load, mma, store)")
