"""CUDA C for the warp-collective tensor-core calls (``ir/builtin.py``'s ``WARP_BUILTINS``) and
the fragments they work on.

A fragment is a buffer in a scope of ``FRAGMENT_SCOPES`` holding 16 x 16 tiles; it is one
array of the kernel per warp, spread over the warp's registers, which only these calls touch:

* ``wmma.matrix_a`` / ``wmma.matrix_b`` / ``wmma.accumulator`` (TVM's wmma path): an array of
  ``nvcuda::wmma::fragment<...>``, one per tile (the operands' layout is the one their
  ``tvm_load_matrix_sync`` calls name); the calls are ``nvcuda::wmma`` functions.
* ``mma.matrix_a`` / ``mma.matrix_b`` / ``mma.accumulator`` (the PTX path): plain registers,
  4 ``unsigned`` (8 halves) per tile and lane for the operands, 8 ``float`` per tile and lane
  for the accumulator, in the layout of ``mma.sync.aligned.m16n8k16.row.col``: ``tc_ldmatrix``
  is one ``ldmatrix.x4`` (``.trans`` where the tile is stored the other way), ``tc_mma_sync``
  two ``mma.sync`` (the two 8-column halves of the 16 x 16 result), ``tc_mma_store`` four
  8-byte stores per lane. The helpers are in :data:`MMA_PRELUDE` (added when a kernel uses them).

Lane layouts (``g = lane / 4``, ``t = lane % 4``; PTX ISA, "Matrix fragments for mma.m16n8k16"):
an A tile's register ``r`` holds rows ``g + 8 * (r % 2)``, columns ``2t, 2t + 1`` plus
``8 * (r / 2)``; a B tile's register ``r`` holds rows (k) ``2t, 2t + 1`` plus ``8 * (r % 2)`` of
column ``g + 8 * (r / 2)``; the accumulator's ``4h + 2i + j`` is row ``g + 8i``, column
``8h + 2t + j``. ``ldmatrix`` gives each lane those elements when lane ``l`` supplies the address
of row ``l % 16``, column ``8 * (l / 16)`` of a tile stored as it is used (A row-major, B
stored k-major with ``.trans``) and of row ``8 * (l / 16) + l % 8``, column ``8 * (l / 8 % 2)``
of a tile stored the other way.
"""
from __future__ import annotations

from ..ir import dtype as dt
from ..ir.builtin import FRAGMENT_SCOPES, warp_operands

MMA_PRELUDE = r"""
// ---- tensor cores through PTX: 16 x 16 x 16 tiles as two mma.sync.m16n8k16 ----------------
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

// d = a @ b + c on 16 x 16 tiles: a 16 x 16 (f16), b 16 x 16 (f16, two n8 halves), fp32 accumulation
__device__ __forceinline__ void tc_mma_16x16x16(float* d, const unsigned* a, const unsigned* b, const float* c) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[4 * h]), "=f"(d[4 * h + 1]), "=f"(d[4 * h + 2]), "=f"(d[4 * h + 3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * h]), "r"(b[2 * h + 1]),
                   "f"(c[4 * h]), "f"(c[4 * h + 1]), "f"(c[4 * h + 2]), "f"(c[4 * h + 3]));
  }
}

__device__ __forceinline__ void tc_mma_fill(float* d, float v) {
#pragma unroll
  for (int i = 0; i < 8; ++i) d[i] = v;
}

// the accumulator tile to memory, row-major with rows `stride` apart: each lane its 8 elements
__device__ __forceinline__ void tc_mma_store(float* out, const float* d, int stride) {
  const int lane = tc_lane(), g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    *(float2*)(out + g * stride + 8 * h + 2 * t) = make_float2(d[4 * h], d[4 * h + 1]);
    *(float2*)(out + (g + 8) * stride + 8 * h + 2 * t) = make_float2(d[4 * h + 2], d[4 * h + 3]);
  }
}
"""

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
#define tc_cp_async_commit() asm volatile("cp.async.commit_group;\n" ::: "memory")
#define tc_cp_async_wait(N) asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory")
"""


def async_copy_call(r, e) -> str:
    """The C statement (without ``;``) of an asynchronous-copy call (``ASYNC_COPY_BUILTINS``)."""
    if e.name == "tc_cp_async":
        dst, src, nbytes = e.args
        return f"tc_cp_async<{int(nbytes.value)}>({r.expr(dst)}, {r.expr(src)})"
    if e.name == "tc_cp_async_commit":
        return "tc_cp_async_commit()"
    return f"tc_cp_async_wait({int(e.args[0].value)})"


# registers per lane and 16 x 16 tile, and their C type, for the mma.* scopes
MMA_REGS = {"mma.matrix_a": (4, "unsigned"), "mma.matrix_b": (4, "unsigned"), "mma.accumulator": (8, "float")}
WMMA_ROLE = {"wmma.matrix_a": "matrix_a", "wmma.matrix_b": "matrix_b", "wmma.accumulator": "accumulator"}
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


def fragment_decl(buf, name: str, ctype: str, layouts: dict) -> str:
    """The declaration of a fragment buffer (one array per lane of each warp)."""
    size = int(buf.shape[0].value)
    if size % TILE:
        raise FragmentError(f"the fragment '{buf.name}' in scope {buf.scope} holds {size} elements, not a "
                            f"whole number of 16 x 16 tiles")
    tiles = size // TILE
    if buf.scope in MMA_REGS:
        regs, ty = MMA_REGS[buf.scope]
        want = "float32" if buf.scope == "mma.accumulator" else "float16"
        if dt.element_of(buf.dtype) != want:
            raise FragmentError(f"the fragment '{buf.name}' in scope {buf.scope} is {buf.dtype}; the mma.sync "
                                f"path takes float16 operands and a float32 accumulator")
        return f"{ty} {name}[{tiles * regs}];"
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
        scope = r.fragments[f][0]
        if ptr.buffer.scope != "shared":
            raise FragmentError(f"tc_ldmatrix into '{f}' reads '{ptr.buffer.name}', which is in {ptr.buffer.scope} "
                                f"memory; ldmatrix reads shared memory only (cache_read it into 'shared')")
        if scope == "mma.accumulator":
            raise FragmentError(f"tc_ldmatrix into the accumulator '{f}': ldmatrix loads operands (mma.matrix_a/b)")
        row = ops["layout"] == "row_major"
        trans = row == (scope == "mma.matrix_b")        # A row-major and B stored [n][k] need no .trans
        split = not row
        return (f"tc_ldmatrix_x4<{str(trans).lower()}, {str(split).lower()}>({f} + 4 * ({i}), "
                f"{r.expr(ptr)}, {r.expr(ops['stride'])})")
    if name == "tc_mma_sync":
        (d, di), (a, ai), (b, bi), (c, ci) = frags
        return f"tc_mma_16x16x16({d} + 8 * ({di}), {a} + 4 * ({ai}), {b} + 4 * ({bi}), {c} + 8 * ({ci}))"
    if name == "tc_mma_fill":
        (f, i), = frags
        return f"tc_mma_fill({f} + 8 * ({i}), {_value(r, ops['value'], 'float')})"
    if name == "tc_mma_store":
        (f, i), = frags
        if dt.element_of(ptr.buffer.dtype) != "float32":
            raise FragmentError(f"tc_mma_store of '{f}' into '{ptr.buffer.name}' ({ptr.buffer.dtype}): the "
                                f"accumulator is stored as float32")
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
