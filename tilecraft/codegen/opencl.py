"""The OpenCL target: OpenCL C source from a function lowered for the GPU; no runtime.

>>> # f = tilecraft.build(s, [A, B], target="opencl", name="myexp")
>>> # print(f.imported_modules[0].get_source())       # __kernel void myexp(__global float* restrict B, ...)

``build(..., target="opencl")`` lowers exactly as for CUDA (kernels, launch indices, shared
memory, barriers; the intrinsics legalized by CUDA's rules) and prints the kernels with the CUDA
renderer in an OpenCL dialect: :class:`OpenCLRenderer` overrides only the spellings (the tables
below and a few methods). The module can show its source but not run: tilecraft has no OpenCL
runtime and no OpenCL device to test one against (``docs/tvm_compat.md``), so calling it raises a
``TargetError``. What CUDA has and OpenCL C does not (tensor cores, async copies, the warp-shuffle
all-reduce, dynamic shared memory, bfloat16) is refused with an error naming the kernel.
"""
from __future__ import annotations

from ..ir import dtype as dt
from ..ir import intrinsics
from ..ir.builtin import ASYNC_COPY_BUILTINS, BLOCK_BUILTINS, EXTERN_CALLS, FRAGMENT_SCOPES, WARP_BUILTINS, \
    call_args, symbol_of
from ..ir.expr import BinOp
from ..ir.stmt import PrimFunc
from ..schedule.passes.gpu_kernels import MAX_STATIC_SHARED_BYTES
from ..schedule.passes.gpu_lower import kernels_of
from ..schedule.passes.gpu_thread_reduce import ALLREDUCE_PREFIX
from ..target import TargetError
from .cuda import CUDARenderer, for_gpu
from .cuda_cstyle import C_TYPES

# OpenCL C's scalar types (OpenCL C 1.2 §6.1.1): long is 64 bits, no bfloat16
OPENCL_TYPES = dict(C_TYPES, int8="char", uint8="uchar", uint16="ushort", uint32="uint", int64="long",
                    uint64="ulong")
del OPENCL_TYPES["bfloat16"]

# CUDA launch index -> OpenCL work-item function
OPENCL_INDEX = {"blockIdx": "get_group_id", "threadIdx": "get_local_id"}

# intrinsic table row -> OpenCL C built-in (overloaded: one name for float, double and half)
OPENCL_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10", "sqrt": "sqrt",
               "rsqrt": "rsqrt", "tanh": "tanh", "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "rint",
               "trunc": "trunc", "sin": "sin", "cos": "cos", "fabs": "fabs", "pow": "pow", "fma": "fma",
               "isnan": "isnan", "popcount": "popcount"}

# integer literal suffixes (long is 64 bits in OpenCL C)
OPENCL_SUFFIX = {"int64": "L", "uint32": "U", "uint64": "UL"}

OPENCL_RESERVED = frozenset("""kernel __kernel global __global local __local constant __constant private
    __private read_only write_only read_write image2d_t image3d_t sampler_t event_t char uchar ushort uint
    ulong size_t ptrdiff_t barrier mem_fence get_group_id get_local_id get_global_id get_local_size
    get_num_groups get_global_size get_work_dim rint popcount clamp mix sign select""".split()) | \
    frozenset(OPENCL_MATH.values())

PRELUDE = r"""
#define TC_INF_F INFINITY
#define TC_NAN_F NAN
#define TC_INF_D ((double)INFINITY)
#define TC_NAN_D ((double)NAN)

inline int tc_floordiv_i32(int a, int b) {
  int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int tc_floormod_i32(int a, int b) {
  int r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline long tc_floordiv_i64(long a, long b) {
  long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline long tc_floormod_i64(long a, long b) {
  long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


class OpenCLRenderer(CUDARenderer):
    """OpenCL C for the kernels of one lowered function: the CUDA renderer with OpenCL spellings."""

    types = OPENCL_TYPES
    extra_reserved = OPENCL_RESERVED
    pointer_param = "__global "
    restrict = "restrict"

    def __init__(self):
        super().__init__()
        self.uses_double = False
        self.kernel_name = ""

    def unsupported(self, what: str) -> TargetError:
        return TargetError(f"kernel '{self.kernel_name}': {what} has no OpenCL translation in tilecraft "
                           f"(build for target='cuda' instead)")

    # --- spellings ------------------------------------------------------------------------------
    def ctype(self, dtype: str) -> str:
        e = dt.element_of(dtype)
        if e == "bfloat16":
            raise self.unsupported("bfloat16")
        if e == "float64":
            self.uses_double = True
        elif e == "float16":
            self.uses_half = True
        return self.types[e]

    def index_spelling(self, tag: str) -> str:
        kind, _, axis = tag.partition(".")
        return f"{OPENCL_INDEX[kind]}({'xyz'.index(axis)})"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def alloc_qualifier(self, b) -> str:
        if b.scope in FRAGMENT_SCOPES:
            raise self.unsupported(f"the tensor-core fragment '{b.name}'")
        return ""

    def vector_access(self, buf, idx, lanes: int) -> int:
        return 0                       # lane by lane: no CUDA-style raw wide accesses

    def shared_decls(self, info) -> None:
        if info.shared_bytes() > MAX_STATIC_SHARED_BYTES:
            raise self.unsupported(f"{info.shared_bytes()} bytes of shared memory (more than a static "
                                   f"array's {MAX_STATIC_SHARED_BYTES})")
        for b in info.shared:
            self.emit(1, f"__local {self.ctype(b.dtype)} {self.buf(b)}[{int(b.shape[0].value)}];")

    def kernel_head(self, info, params) -> str:
        return f"__kernel void {info.name}({', '.join(params)}) {{"

    def const(self, v, dtype: str) -> str:
        if dtype == "int64" and v == -2**63:
            return "(-9223372036854775807L - 1)"
        if dtype in OPENCL_SUFFIX:
            text = f"{v}{OPENCL_SUFFIX[dtype]}"
            return f"({text})" if v < 0 else text
        return super().const(v, dtype)

    def float_const(self, v: float, dtype: str) -> str:
        base = dt.element_of(dtype)
        if base == "float16":
            self.uses_half = True
            return f"((half){super().float_const(v, 'float32')})"
        if base == "float64":
            self.uses_double = True
        return super().float_const(v, dtype)

    def floordiv(self, a, b, dtype, b_node) -> str:
        text = super().floordiv(a, b, dtype, b_node)
        return text.replace("tc_floordiv(", f"tc_floordiv_{self.width(dtype)}(", 1)

    def floormod(self, a, b, dtype, b_node) -> str:
        text = super().floormod(a, b, dtype, b_node)
        return text.replace("tc_floormod(", f"tc_floormod_{self.width(dtype)}(", 1)

    @staticmethod
    def width(dtype: str) -> str:
        return "i64" if dt.element_of(dtype) in ("int64", "uint64") else "i32"

    def minmax(self, op, a, b, dtype) -> str:
        return f"{'min' if op is BinOp.MIN else 'max'}({a}, {b})"

    def cast(self, dst: str, src: str, v: str) -> str:
        return f"(({self.ctype(dst)}){v})"

    # --- calls ----------------------------------------------------------------------------------
    def e_Call(self, e):
        if e.name in WARP_BUILTINS or e.name in ASYNC_COPY_BUILTINS or e.name in BLOCK_BUILTINS:
            raise self.unsupported(f"the CUDA builtin '{e.name}'")
        if e.name in EXTERN_CALLS:
            row = intrinsics.intrinsic_of_cuda_function(symbol_of(e))
            if row is not None:
                # a CUDA math function called by name (__expf, logf): OpenCL's built-in for it
                return f"{OPENCL_MATH[row]}({', '.join(self.expr(a) for a in call_args(e))})"
        return super().e_Call(e)

    def call(self, name: str, args: list, dtype: str, nodes=()) -> str:
        if name.startswith(ALLREDUCE_PREFIX):
            raise self.unsupported("a cross-thread reduction (rfactor bound to threadIdx: CUDA warp shuffles)")
        fn = OPENCL_MATH.get(name)
        if fn is None:
            raise self.unsupported(f"the intrinsic {name!r}")
        return f"{fn}({', '.join(args)})"

    def kernel(self, info, body) -> str:
        self.kernel_name = info.name
        return super().kernel(info, body)


def generate_opencl(funcs) -> str:
    """OpenCL C for functions lowered for the GPU (``target="cuda"`` or ``"opencl"``, or not yet).

    >>> src = generate_opencl(tilecraft.lower(s, [A, B], target="cuda"))
    """
    if isinstance(funcs, PrimFunc):
        funcs = [funcs]
    r = OpenCLRenderer()
    kernels = []
    for f in funcs:
        _, ks = kernels_of(for_gpu(f).body)
        for info, body in ks:
            kernels.append(r.kernel(info, body))
    head = ["// generated by tilecraft"]
    if r.uses_double:
        head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if r.uses_half:
        head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    return "\n".join(head) + "\n" + PRELUDE + "\n" + "\n\n".join(kernels) + "\n"


class OpenCLModule:
    """The OpenCL C of built functions: ``get_source()`` (also through ``imported_modules[0]``,
    TVM's spelling); calling it raises ``TargetError`` (no OpenCL runtime in tilecraft).

    >>> print(tilecraft.build(s, [A, B], "opencl").imported_modules[0].get_source())
    """

    type_key = "opencl"

    def __init__(self, funcs, source: str, target: str):
        self.funcs = {f.name: f for f in funcs}
        self.entry_name = funcs[0].name
        self.source, self.target = source, target

    @property
    def imported_modules(self):
        return [self]

    def get_source(self, fmt: str = "cl") -> str:
        """The OpenCL C source (``fmt`` ``"cl"``, ``"opencl"`` or ``""``)."""
        if fmt not in ("cl", "opencl", ""):
            raise ValueError(f"an OpenCL module has one source, 'cl' (OpenCL C); got {fmt!r}")
        return self.source

    def __getitem__(self, name: str):
        if name not in self.funcs:
            raise KeyError(f"no function {name!r} in this module; it has {', '.join(self.funcs)}")
        return self

    def __call__(self, *args):
        raise TargetError(f"cannot run '{self.entry_name}': no OpenCL runtime in tilecraft: the source is "
                          f"available via imported_modules[0].get_source()")

    def time_evaluator(self, *args, **kwargs):
        return self.__call__()


def build_opencl(funcs, target) -> OpenCLModule:
    """OpenCL C of the functions, in a module that shows it (no compiler, no runtime)."""
    funcs = [for_gpu(f) for f in funcs]
    return OpenCLModule(funcs, generate_opencl(funcs), str(target))
