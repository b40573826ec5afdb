"""The CUDA backend: CUDA C from a function lowered for ``target="cuda"``, compiled by nvcc.

>>> # mod = tilecraft.build(s, [A, B, C], target="cuda")      # lower → CUDA C → nvcc → module
>>> # print(mod.get_source())                                  # the CUDA C
>>> # src = generate_cuda(tilecraft.lower(s, [A, B, C], target="cuda"))   # no nvcc, no GPU needed

The renderer is :class:`~tilecraft.codegen.cuda_cstyle.CStyleRenderer` plus the overrides below:
launch indices, ``__shared__`` declarations, ``__syncthreads()``, ``__launch_bounds__``,
``#pragma unroll``, fp16 through ``cuda_fp16.h``, the math functions (the ``cuda=`` names of the
intrinsic table, ``ir/intrinsics.py``) and the block all-reduce.
"""
from __future__ import annotations

import time

from ..ir import dtype as dt
from ..ir import intrinsics
from ..ir.builtin import (ASYNC_COPY_BUILTINS, BLOCK_BUILTINS, EXTERN_CALLS, FRAGMENT_SCOPES, WARP_BUILTINS, call_args,
                          symbol_of)
from ..ir.expr import AccessPtr, BinOp, Const
from ..ir.functor import post_order_visit
from ..ir.stmt import BufferStore, ForKind, PrimFunc
from ..schedule.passes.gpu_barriers import SYNC
from ..schedule.passes.gpu_lower import kernels_of
from ..schedule.passes.gpu_kernels import MAX_STATIC_SHARED_BYTES, dynamic_shared_layout
from ..schedule.passes.gpu_thread_reduce import ALLREDUCE_PREFIX
from ..schedule.passes.legalize import legalize_func
from .cuda_cstyle import RESERVED_NAMES, CStyleRenderer
from ..runtime.cuda_tensor_map import tensor_maps_of
from .cuda_wgmma import block_call, kernel_decls, wgmma_fragment_decl, wgmma_prelude
from .cuda_tensorcore import (ASYNC_COPY_PRELUDE, MMA_PRELUDE, FragmentError, async_copy_call, check_fragment_use,
                              fragment_decl, fragment_layouts, warp_call)

PRELUDE = r"""
#define TC_INF_F __int_as_float(0x7f800000)
#define TC_NAN_F __int_as_float(0x7fffffff)
#define TC_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define TC_NAN_D __longlong_as_double(0x7ff8000000000000LL)

__device__ __forceinline__ int tc_floordiv(int a, int b) {
  int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ int tc_floormod(int a, int b) {
  int r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ long long tc_floordiv(long long a, long long b) {
  long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long tc_floormod(long long a, long long b) {
  long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

struct tc_op_sum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct tc_op_prod { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; } };
struct tc_op_max { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; } };
struct tc_op_min { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a < b ? a : b; } };

// Reduce v over the BDX threads of each threadIdx.x row of the block; every thread gets the
// result. Starts with a block barrier (orders everything before the call), then warp shuffles,
// then (BDX > 32) one partial per warp through shared memory.
template <class T, int BDX, class Op>
__device__ __forceinline__ T tc_allreduce(T v, Op op) {
  const int tid = threadIdx.x + BDX * (threadIdx.y + blockDim.y * threadIdx.z);
  const int total = BDX * blockDim.y * blockDim.z;
  const int n = min(32, total - (tid & ~31));
  const unsigned mask = n == 32 ? 0xffffffffu : ((1u << n) - 1u);
  constexpr int W = BDX < 32 ? BDX : 32;
  __syncthreads();
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(mask, v, o, W));
  if constexpr (BDX <= 32) {
    return v;
  } else {
    __shared__ T tc_red_buf[32];
    if ((tid & 31) == 0) tc_red_buf[tid >> 5] = v;
    __syncthreads();
    const int first = (tid / BDX) * (BDX / 32);
    T r = tc_red_buf[first];
#pragma unroll
    for (int w = 1; w < BDX / 32; ++w) r = op(r, tc_red_buf[first + w]);
    return r;
  }
}
"""

# the all-reduce for a number of threads per row that is not a power of two; added to the
# source only when a kernel uses it (the power-of-two code above stays as it is)
ALLREDUCE_ANY = r"""
__host__ __device__ constexpr int tc_ceil_pow2(int n) { return n <= 1 ? 1 : 2 * tc_ceil_pow2((n + 1) / 2); }

// Reduce v over the BDX threads of each threadIdx.x row of a block of NT threads, for any BDX: a
// row may start and end anywhere in a warp. Starts with a block barrier; every thread gets its
// row's result. Warp shuffles fold each row's piece of a warp into the piece's first lane (a lane
// combines only lanes of its row that exist), the pieces' partials go through shared memory (one
// per warp for the pieces that start a warp, one per row for those that start a row inside a
// warp), and each thread combines its row's partials.
template <class T, int BDX, int NT, class Op>
__device__ __forceinline__ T tc_allreduce_any(T v, Op op) {
  constexpr int R = NT / BDX;
  const int x = threadIdx.x;
  const int row = threadIdx.y + blockDim.y * threadIdx.z;
  const int tid = x + BDX * row;
  const int lane = tid & 31;
  const int n = min(32, NT - (tid & ~31));
  const unsigned mask = n == 32 ? 0xffffffffu : ((1u << n) - 1u);
  __syncthreads();
#pragma unroll
  for (int o = tc_ceil_pow2(BDX < 32 ? BDX : 32) / 2; o > 0; o >>= 1) {
    const T w = __shfl_down_sync(mask, v, o);
    if (x + o < BDX && lane + o < n) v = op(v, w);
  }
  if constexpr (R == 1 && BDX <= 32) {
    return __shfl_sync(mask, v, 0);
  } else {
    __shared__ T tc_red_warp[(NT + 31) / 32];
    const int start = tid - x;                          // the row's first thread
    const int last = (start + BDX - 1) >> 5;            // the warp of its last thread
    if (lane == 0) tc_red_warp[tid >> 5] = v;
    if constexpr (R > 1 && BDX % 32 != 0) {
      __shared__ T tc_red_row[R];
      if (x == 0 && lane != 0) tc_red_row[row] = v;
      __syncthreads();
      T r = (start & 31) ? tc_red_row[row] : tc_red_warp[start >> 5];
      for (int w = (start >> 5) + 1; w <= last; ++w) r = op(r, tc_red_warp[w]);
      return r;
    } else {
      __syncthreads();
      T r = tc_red_warp[start >> 5];
      for (int w = (start >> 5) + 1; w <= last; ++w) r = op(r, tc_red_warp[w]);
      return r;
    }
  }
}
"""

class CUDARenderer(CStyleRenderer):
    """CUDA C for the kernels of one lowered function."""

    def __init__(self):
        super().__init__()
        self.uses_half = False
        self.uses_bf16 = False
        self.uses_allreduce_any = False
        self.bdx = 1
        self.nthreads = 1
        self.uses_wmma = False
        self.uses_mma = False
        self.uses_async_copy = False
        self.wgmma_kinds = set()             # (dtype, n) of the wgmma helpers used (cuda_wgmma.py)
        self.uses_tma = False                # a kernel takes CUtensorMap parameters (needs cuda.h)
        self.tensor_maps = []                # this kernel's (buffer, box) of its tensor-map parameters
        self.fragments: dict = {}      # C name -> (scope, C element type, dtype) of the kernel's fragments
        self.layouts: dict = {}        # fragment data var -> layout of its wmma loads

    # --- overrides of the C-style base ----------------------------------------------------------
    def ctype(self, dtype: str) -> str:
        e = dt.element_of(dtype)
        if e == "float16":
            self.uses_half = True
        elif e == "bfloat16":
            self.uses_bf16 = True
        return super().ctype(dtype)

    def alloc_qualifier(self, b) -> str:
        return "__align__(16) "          # register arrays are also accessed 16 bytes at a time

    # --- tensor cores: fragments and the warp-collective calls (cuda_tensorcore.py) ---------------
    def s_Allocate(self, s, d):
        b = s.buffer
        if b.scope not in FRAGMENT_SCOPES:
            return super().s_Allocate(s, d)
        scoped = b.data in self.names          # allocated again (an unrolled loop's copies): new scope
        if scoped:
            self.emit(d, "{")
            d += 1
        name = self.buf(b)
        ctype = self.ctype(b.dtype)
        self.fragments[name] = (b.scope, ctype, dt.element_of(b.dtype))
        if b.scope == "wgmma.accumulator":
            self.emit(d, wgmma_fragment_decl(b, name, self.kernel_body))
            self.stmt(s.body, d)
            if scoped:
                self.emit(d - 1, "}")
            return
        if b.scope.startswith("wmma."):
            self.uses_wmma = True
        else:
            self.uses_mma = True
        self.emit(d, fragment_decl(b, name, ctype, self.layouts))
        self.stmt(s.body, d)
        if scoped:
            self.emit(d - 1, "}")

    def fragment(self, var, call) -> str:
        name = self.names.get(var)
        if name not in self.fragments:
            raise FragmentError(f"{call.name}: '{var.name}' is not a fragment allocated in this kernel (a "
                                f"buffer in scope {', '.join(sorted(FRAGMENT_SCOPES))})")
        return name

    def e_Call(self, e):
        if e.name in WARP_BUILTINS:
            return warp_call(self, e)
        if e.name in ASYNC_COPY_BUILTINS:
            self.uses_async_copy = True
            return async_copy_call(self, e)
        if e.name in BLOCK_BUILTINS:
            return block_call(self, e)
        if e.name in EXTERN_CALLS and intrinsics.intrinsic_of_cuda_function(symbol_of(e)) is not None:
            # CUDA's math library by name (TVM's intrin_math tutorial: call_pure_extern of __expf),
            # which the emulator runs too; other C functions are refused by the base renderer
            return f"{symbol_of(e)}({', '.join(self.expr(a) for a in call_args(e))})"
        return super().e_Call(e)

    def e_BufferLoad(self, e):
        check_fragment_use(e.buffer, "read")
        return super().e_BufferLoad(e)

    def s_BufferStore(self, s, d):
        check_fragment_use(s.buffer, "written")
        return super().s_BufferStore(s, d)

    def loop_pragma(self, s) -> str:
        if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED):
            return "#pragma unroll"
        return ""

    def s_Evaluate(self, s, d):
        v = s.value
        if hasattr(v, "name") and getattr(v, "name", None) == SYNC:
            self.emit(d, self.barrier())
            return
        super().s_Evaluate(s, d)

    def float_const(self, v: float, dtype: str) -> str:
        base = dt.element_of(dtype)
        if v != v or v in (float("inf"), float("-inf")):
            suffix = "F" if base != "float64" else "D"
            text = f"TC_NAN_{suffix}" if v != v else (f"TC_INF_{suffix}" if v > 0 else f"(-TC_INF_{suffix})")
        else:
            text = repr(v) + ("" if base == "float64" else "f")
            if v < 0:
                text = f"({text})"
        if base == "float16":
            self.uses_half = True
            return f"__float2half({text})"
        if base == "bfloat16":
            self.uses_bf16 = True
            return f"__float2bfloat16_rn({text})"
        return text

    def floordiv(self, a, b, dtype, b_node) -> str:
        c = _pow2(b_node)
        if c is not None and dt.is_int(dtype):
            return f"({a} >> {c})"
        return super().floordiv(a, b, dtype, b_node)

    def floormod(self, a, b, dtype, b_node) -> str:
        c = _pow2(b_node)
        if c is not None and dt.is_int(dtype):
            return f"({a} & {(1 << c) - 1})"
        return super().floormod(a, b, dtype, b_node)

    def minmax(self, op, a, b, dtype) -> str:
        if dt.element_of(dtype) == "float16":
            return f"{'__hmin' if op is BinOp.MIN else '__hmax'}({a}, {b})"
        return super().minmax(op, a, b, dtype)

    def cast(self, dst: str, src: str, v: str) -> str:
        dst, src = dt.element_of(dst), dt.element_of(src)
        if dst == "float16":
            self.uses_half = True
            if src == "float64":        # one rounding: through float would round twice
                return f"__double2half({v})"
            if src == "float32":          # float16 math legalized to float32 comes back here
                return f"__float2half({v})"
            return f"__float2half((float)({v}))" if src != "float16" else v
        if src == "float16":
            return f"__half2float({v})" if dst == "float32" else f"(({self.ctype(dst)})__half2float({v}))"
        if dst == "bfloat16":            # rounded to nearest even, as dtype.round_bfloat16
            self.uses_bf16 = True
            return v if src == "bfloat16" else f"__float2bfloat16_rn((float)({v}))"
        if src == "bfloat16":
            return f"__bfloat162float({v})" if dst == "float32" else f"(({self.ctype(dst)})__bfloat162float({v}))"
        return super().cast(dst, src, v)

    def call(self, name: str, args: list, dtype: str, nodes=()) -> str:
        if name.startswith(ALLREDUCE_PREFIX):
            op = name[len(ALLREDUCE_PREFIX):]
            if self.bdx & (self.bdx - 1):
                self.uses_allreduce_any = True
                return f"tc_allreduce_any<{self.ctype(dtype)}, {self.bdx}, {self.nthreads}>({args[0]}, tc_op_{op}())"
            return f"tc_allreduce<{self.ctype(dtype)}, {self.bdx}>({args[0]}, tc_op_{op}())"
        row = intrinsics.lookup(name)
        if row is None or row.cuda is None:
            raise NotImplementedError(f"the intrinsic {name!r} has no CUDA translation")
        # legalize left float32 and float64 calls only (float16 computes in float32)
        el = dt.element_of(nodes[0].dtype) if nodes else dt.element_of(dtype)
        return f"{row.cuda.function(el)}({', '.join(args)})"

    # --- kernels ----------------------------------------------------------------------------
    def kernel(self, info, body) -> str:
        self.lines = []
        self.names, self.taken, self.vec_vars = {}, set(RESERVED_NAMES), {}
        self.taken |= self.extra_reserved
        for tag, v in info.index_vars.items():
            self.names[v] = f"((int){self.index_spelling(tag)})"
        self.bdx = info.block[0]
        self.nthreads = info.threads
        written = set()

        def note(n):
            if isinstance(n, BufferStore) or (isinstance(n, AccessPtr) and n.access_mask & 2):
                written.add(n.buffer)
        post_order_visit(body, note)
        self.fragments = {}
        self.kernel_body = body
        self.layouts = fragment_layouts(body)
        # TMA tensor maps first (runtime/cuda_tensor_map.py: the launcher packs them at offsets 0, 128, ...)
        self.tensor_maps = tensor_maps_of(body)
        params = [f"const __grid_constant__ CUtensorMap tc_tmap_{j}" for j in range(len(self.tensor_maps))]
        self.uses_tma = self.uses_tma or bool(self.tensor_maps)
        for p in info.params:
            if hasattr(p, "scope"):
                const = "" if p in written else "const "
                params.append(f"{self.pointer_param}{const}{self.ctype(p.dtype)}* {self.restrict} {self.buf(p)}")
            else:
                params.append(f"{self.ctype(p.dtype)} {self.name_of(p, p.name)}")
        self.shared_decls(info)
        for line in kernel_decls(body):
            self.emit(1, line)
        self.stmt(body, 1)
        return "\n".join([self.kernel_head(info, params)] + self.lines + ["}"])

    # --- the dialect's spellings (the OpenCL renderer, opencl.py, overrides these) ----------------
    extra_reserved = frozenset()       # names beyond RESERVED_NAMES the dialect means something by
    pointer_param = ""                 # address-space qualifier of a buffer parameter
    restrict = "__restrict__"

    def index_spelling(self, tag: str) -> str:
        """The launch index ``tag`` (``"threadIdx.x"``) as the dialect reads it."""
        return tag

    def barrier(self) -> str:
        return "__syncthreads();"

    def shared_decls(self, info) -> None:
        """Declare the kernel's shared-memory buffers at the top of its body."""
        if info.shared_bytes() > MAX_STATIC_SHARED_BYTES:
            # more than a static __shared__ array may have: one dynamic block, carved 16-byte aligned
            # (the launch passes its size and raises the kernel's limit, see runtime/cuda_runtime.py)
            self.emit(1, "extern __shared__ __align__(16) unsigned char tc_dyn_smem[];")
            for b, off in dynamic_shared_layout(info.shared):
                ct = self.ctype(b.dtype)
                self.emit(1, f"{ct}* __restrict__ {self.buf(b)} = ({ct}*)(tc_dyn_smem + {off});")
        else:
            for b in info.shared:
                self.emit(1, f"__shared__ __align__(16) {self.ctype(b.dtype)} {self.buf(b)}[{int(b.shape[0].value)}];")

    def kernel_head(self, info, params) -> str:
        """The kernel's signature line, ending in ``{``."""
        # min_blocks (pragma min_blocks_per_sm): ptxas may then give each thread up to
        # 65536 / (threads * min_blocks) registers, and schedules loads further ahead of their use
        bounds = f"{info.threads}, {info.min_blocks}" if info.min_blocks else f"{info.threads}"
        return (f'extern "C" __global__ void __launch_bounds__({bounds}) '
                f"{info.name}({', '.join(params)}) {{")


def _pow2(node):
    if isinstance(node, Const) and dt.is_int(node.dtype) and node.value > 0 and node.value & (node.value - 1) == 0:
        return int(node.value).bit_length() - 1
    return None


def for_gpu(func: PrimFunc) -> PrimFunc:
    """``func`` itself if it was lowered with ``target="cuda"``, else with the GPU passes run now
    (TVM's ``tvm.build(tvm.lower(s, args), target="cuda")`` flow; ``double_buffer`` is kept: it is
    an attribute of the lowered function). Either way its intrinsics are legalized for CUDA."""
    from ..ir.stmt import Allocate, AttrStmt, For, ForKind, SeqStmt
    from ..schedule.passes.gpu_lower import lower_for_gpu
    func = legalize_func(func, "cuda")
    body = func.body
    while isinstance(body, Allocate):
        body = body.body
    first = body.seq[0] if isinstance(body, SeqStmt) else body
    while isinstance(first, For) and first.kind is not ForKind.THREAD_BINDING:     # a host loop (te.scan)
        first = first.body.seq[0] if isinstance(first.body, SeqStmt) else first.body
    if isinstance(first, AttrStmt) and first.key == "cuda_kernel":
        return func
    return func.with_body(lower_for_gpu(func.body, func.params, func.name))


def generate_cuda(funcs) -> str:
    """CUDA C for functions lowered with ``target="cuda"`` (needs neither nvcc nor a GPU)."""
    if isinstance(funcs, PrimFunc):
        funcs = [funcs]
    funcs = [for_gpu(f) for f in funcs]
    r = CUDARenderer()
    kernels = []
    for f in funcs:
        _, ks = kernels_of(f.body)
        for info, body in ks:
            kernels.append(r.kernel(info, body))
    head = ["// generated by tilecraft"]
    if r.uses_half or r.uses_wmma or r.uses_mma or r.wgmma_kinds:
        head.append("#include <cuda_fp16.h>")
    if r.uses_bf16:
        head.append("#include <cuda_bf16.h>")
    if r.uses_wmma:
        head.append("#include <mma.h>")
    if r.uses_tma:
        head.append("#include <cuda.h>")
    prelude = PRELUDE + ALLREDUCE_ANY if r.uses_allreduce_any else PRELUDE
    if r.uses_mma:
        prelude += MMA_PRELUDE
    if r.uses_async_copy:
        prelude += ASYNC_COPY_PRELUDE
    if r.wgmma_kinds:
        prelude += wgmma_prelude(r.wgmma_kinds, r.uses_tma)
    return "\n".join(head) + "\n" + prelude + "\n" + "\n\n".join(kernels) + "\n"


def build_cuda(funcs, target):
    """CUDA C → cubin (nvcc, cached on disk) → a lazily loaded :class:`CUDAModule`."""
    from ..runtime.cuda_runtime import CUDAModule
    from .cuda_compile import compile_cuda, default_arch, target_arch
    t0 = time.perf_counter()
    funcs = [for_gpu(f) for f in funcs]
    src = generate_cuda(funcs)
    t1 = time.perf_counter()
    arch = (target.attrs.get("arch") if hasattr(target, "attrs") else None) or default_arch()
    arch = target_arch(src, arch)       # sm_90a where the code uses wgmma (compile_cuda does the same)
    cubin = compile_cuda(src, arch)
    t2 = time.perf_counter()
    mod = CUDAModule(list(funcs), src, cubin, arch, str(target))
    mod.build_times = {"codegen": t1 - t0, "nvcc": t2 - t1}
    mod.compile_ptx = lambda: compile_cuda(src, arch, fmt="ptx")      # for save("x.ptx"), on demand
    return mod
