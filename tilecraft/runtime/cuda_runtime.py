"""The CUDA runtime: load cubins, check kernels against the device's limits, launch, time.

pycuda is imported on first use (``driver()``), never at import time, so building CUDA code
works on machines without a GPU. Kernels run in the device's primary context, the one PyTorch and
CuPy use, so their tensors can be passed directly (anything with ``__cuda_array_interface__``).

>>> # mod = tilecraft.build(s, [A, B, C], target="cuda")
>>> # a = tilecraft.runtime.cuda_ndarray.array(np_a, tilecraft.cuda(0)); mod(a, b, c)
>>> # mod.time_evaluator(mod.entry_name, tilecraft.cuda(0), number=100)(a, b, c).median
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.expr import BinOp, Binary, Cast, Const, Var
from ..ir.stmt import Buffer
from .timing import ProfileResult

_driver = None
_contexts: dict = {}


def driver():
    """``pycuda.driver``, initialised (imported on first use)."""
    global _driver
    if _driver is None:
        try:
            import pycuda.driver as drv
        except ImportError as e:
            raise RuntimeError("running CUDA kernels needs pycuda: pip install 'tilecraft[cuda]' "
                               f"(building CUDA C does not) [{e}]") from None
        drv.init()
        _driver = drv
    return _driver


def context(index: int = 0):
    """Make the primary context of GPU ``index`` current (once) and return it."""
    ctx = _contexts.get(index)
    if ctx is None:
        drv = driver()
        if index >= drv.Device.count():
            raise RuntimeError(f"there is no CUDA device {index}: {drv.Device.count()} found")
        ctx = drv.Device(index).retain_primary_context()
        ctx.push()
        import atexit
        atexit.register(_pop, ctx)
        _contexts[index] = ctx
    return ctx


def _pop(ctx):
    try:
        ctx.pop()
    except Exception:
        pass


def synchronize(index: int = 0) -> None:
    """Wait until the GPU has finished everything queued (what ``tilecraft.cuda(0).sync()`` should do)."""
    context(index)
    driver().Context.synchronize()


def device_arch(index: int = 0) -> str | None:
    """``"sm_90"`` for the GPU ``index`` if pycuda and a GPU are present, else None."""
    try:
        drv = driver()
        if drv.Device.count() <= index:
            return None
        major, minor = drv.Device(index).compute_capability()
        return f"sm_{major}{minor}"
    except Exception:
        return None


# ------------------------------------------------------------------------------------------------
# integer expressions of the scalar parameters (grid sizes, workspace sizes, shapes)

_OPS = {BinOp.ADD: lambda a, b: a + b, BinOp.SUB: lambda a, b: a - b, BinOp.MUL: lambda a, b: a * b,
        BinOp.FLOORDIV: lambda a, b: a // b, BinOp.FLOORMOD: lambda a, b: a % b,
        BinOp.TRUNCDIV: lambda a, b: int(a / b), BinOp.TRUNCMOD: lambda a, b: a - int(a / b) * b,
        BinOp.MIN: min, BinOp.MAX: max}


def eval_int(e, env: dict) -> int:
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return int(env[e])
    if isinstance(e, Cast):
        return eval_int(e.value, env)
    if isinstance(e, Binary) and e.op in _OPS:
        return _OPS[e.op](eval_int(e.a, env), eval_int(e.b, env))
    raise ValueError(f"cannot evaluate `{e}` on the host")


# ------------------------------------------------------------------------------------------------

class _Kernel:
    """One loaded kernel and how to call it."""

    def __init__(self, info, fn, arg_types: str):
        self.info = info
        self.fn = fn
        self.fn.prepare(arg_types)
        self.block = info.block
        self.static_grid = None
        if all(isinstance(g, Const) for g in info.grid):
            self.static_grid = tuple(int(g.value) for g in info.grid)


_NP_CHARS = {"int32": "i", "int64": "q", "uint32": "I", "uint64": "Q", "float32": "f", "float64": "d",
             "int16": "h", "int8": "b", "uint8": "B", "bool": "?"}


def _array_of(a):
    """(device pointer, shape, dtype, C-contiguous) of a device array, or None."""
    from .cuda_ndarray import CUDANDArray
    if type(a) is CUDANDArray:
        return a.data_ptr, a.shape, a._dtype, True
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is None:
        return None
    shape = tuple(iface["shape"])
    dtype = np.dtype(iface["typestr"])
    strides = iface.get("strides")
    contiguous = strides is None or tuple(strides) == _c_strides(shape, dtype.itemsize)
    return iface["data"][0], shape, dtype, contiguous


def _c_strides(shape, item):
    out, acc = [], item
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


class CUDAFunction:
    """One lowered function: its kernels launched in order. ``f(a, b, c)``."""

    def __init__(self, module, func, kernels: list, workspace: list):
        self.module, self.func, self.name = module, func, func.name
        self.kernels = kernels
        self.workspace = workspace
        self.buffers = [p for p in func.params if isinstance(p, Buffer)]
        self.scalars = [p for p in func.params if isinstance(p, Var)]
        dims = {d for b in self.buffers for d in b.shape if isinstance(d, Var)}
        self.derived = [v for v in self.scalars if v in dims]
        self.user_scalars = [v for v in self.scalars if v not in dims]
        self._ws_cache: dict = {}

    def __call__(self, *args):
        self.launch(self.prepare(args))

    def prepare(self, args):
        """Check the arguments; return the per-kernel launch arguments."""
        n_user = len(self.buffers) + len(self.user_scalars)
        if len(args) != n_user:
            names = ", ".join([b.name for b in self.buffers] + [v.name for v in self.user_scalars])
            raise TypeError(f"{self.name} expects {n_user} arguments ({names}), got {len(args)}")
        env: dict = {}
        values: dict = {}
        for pos, (b, a) in enumerate(zip(self.buffers, args)):
            got = _array_of(a)
            if got is None:
                raise TypeError(
                    f"argument {pos} '{b.name}': expected a GPU array (tilecraft.runtime.cuda_ndarray.array("
                    f"x, tilecraft.cuda(0)), a torch/CuPy tensor on the GPU), got {type(a).__name__}")
            ptr, shape, dtype, contiguous = got
            if dtype != np.dtype(b.dtype):
                raise TypeError(f"argument {pos} '{b.name}': expected dtype {b.dtype}, got {dtype.name}")
            if len(shape) != len(b.shape):
                raise ValueError(f"argument {pos} '{b.name}': expected {len(b.shape)} dimensions, got shape {shape}")
            for d, s in zip(b.shape, shape):
                if isinstance(d, Var) and d not in env:
                    env[d] = s
            if not contiguous:
                raise ValueError(f"argument {pos} '{b.name}': expected a C-contiguous array")
            values[b] = ptr
        for v, a in zip(self.user_scalars, args[len(self.buffers):]):
            env[v] = a
        for pos, (b, a) in enumerate(zip(self.buffers, args)):
            want = tuple(eval_int(d, env) for d in b.shape)
            got = _array_of(a)[1]
            if want != got:
                raise ValueError(f"argument {pos} '{b.name}': expected shape {want}, got {got}")
        for w in self.workspace:
            values[w] = self._workspace(w, env)
        calls = []
        for k in self.kernels:
            grid = k.static_grid or tuple(eval_int(g, env) for g in k.info.grid)
            if grid[0] >= 2**31 or grid[1] > 65535 or grid[2] > 65535:
                raise ValueError(f"kernel {k.info.name}: grid {grid} exceeds CUDA's limits "
                                 f"(x < 2^31, y and z <= 65535); bind the larger extent to blockIdx.x")
            if min(grid) <= 0:
                grid = None          # nothing to do
            kargs = [values[p] if isinstance(p, Buffer) else _scalar(p, env) for p in k.info.params]
            calls.append((k.fn, grid, k.block, kargs))
        return calls

    def _workspace(self, buf, env):
        size = eval_int(buf.shape[0], env) * np.dtype(buf.dtype).itemsize
        hit = self._ws_cache.get((buf, size))
        if hit is None:
            hit = self._ws_cache[(buf, size)] = driver().mem_alloc(max(size, 1))
        return int(hit)

    @staticmethod
    def launch(calls):
        for fn, grid, block, kargs in calls:
            if grid is not None:
                fn.prepared_call(grid, block, *kargs)

    def time_evaluator(self, dev=None, number=10, repeat=1, min_repeat_ms=0):
        return _time_evaluator(self, number, repeat, min_repeat_ms)


def _scalar(v, env):
    return np.dtype(v.dtype).type(env[v])


def _time_evaluator(f: CUDAFunction, number, repeat, min_repeat_ms, cooldown_interval_ms=0):
    """Times with CUDA events around ``number`` back-to-back launches (after one warm-up)."""
    if not isinstance(number, int) or number < 1:
        raise ValueError(f"time_evaluator: number must be a positive int, got {number!r}")

    def evaluate(*args) -> ProfileResult:
        drv = driver()
        calls = f.prepare(args)
        f.launch(calls)
        drv.Context.synchronize()
        start, end = drv.Event(), drv.Event()
        n, results = number, []
        for r in range(repeat):
            while True:
                start.record()
                for _ in range(n):
                    f.launch(calls)
                end.record()
                end.synchronize()
                ms = start.time_till(end)
                if ms >= min_repeat_ms:
                    break
                n = max(math.ceil(min_repeat_ms / max(ms / n, 1e-6)), math.ceil(n * 1.618))
            results.append(ms / 1e3 / n)
        return ProfileResult(sum(results) / len(results), tuple(results))

    return evaluate


class CUDAModule:
    """Compiled CUDA kernels of one or more functions; loaded onto the GPU on first use.

    ``mod(a, b, c)`` runs the entry function; ``mod.get_source()`` is the CUDA C;
    ``mod.time_evaluator(mod.entry_name, dev, number=..)`` times with CUDA events.
    """

    type_key = "cuda"

    def __init__(self, funcs, source: str, cubin: bytes, arch: str, target: str):
        self.funcs = {f.name: f for f in funcs}
        self.entry_name = funcs[0].name
        self.source, self.cubin, self.arch, self.target = source, cubin, arch, target
        self._loaded = None
        self.build_times: dict = {}

    @property
    def imported_modules(self):
        return [self]

    def get_source(self, fmt: str = "cuda") -> str:
        if fmt in ("cuda", "cu", ""):
            return self.source
        raise ValueError(f"a CUDA module has sources 'cuda' (CUDA C); got {fmt!r}")

    def load(self, index: int = 0) -> dict:
        """Load the cubin into the GPU, check every kernel against the device's limits."""
        if self._loaded is not None:
            return self._loaded
        from ..schedule.passes.gpu_lower import kernels_of
        drv = driver()
        context(index)
        dev = drv.Device(index)
        arch = device_arch(index)
        if arch is not None and arch != self.arch:
            raise RuntimeError(f"the kernels were compiled for {self.arch} but GPU {index} is {arch}: "
                               f"build with target='cuda -arch={arch}'")
        mod = drv.module_from_buffer(self.cubin)
        A = drv.device_attribute
        limits = {"threads": dev.get_attribute(A.MAX_THREADS_PER_BLOCK),
                  "shared": dev.get_attribute(A.MAX_SHARED_MEMORY_PER_BLOCK),
                  "regs": dev.get_attribute(A.MAX_REGISTERS_PER_BLOCK)}
        loaded = {}
        for name, func in self.funcs.items():
            workspace, ks = kernels_of(func.body)
            kernels = []
            for info, _ in ks:
                fn = mod.get_function(info.name)
                check_limits(info, fn, limits)
                types = "".join("P" if isinstance(p, Buffer) else _NP_CHARS[p.dtype] for p in info.params)
                kernels.append(_Kernel(info, fn, types))
            loaded[name] = CUDAFunction(self, func, kernels, workspace)
        self._module = mod
        self._loaded = loaded
        return loaded

    def get_function(self, name: str) -> CUDAFunction:
        fns = self.load()
        if name not in fns:
            raise KeyError(f"the module has no function {name!r}; it has: {', '.join(fns)}")
        return fns[name]

    __getitem__ = get_function

    def __call__(self, *args):
        return self.get_function(self.entry_name)(*args)

    def time_evaluator(self, func_name: str, dev=None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, cooldown_interval_ms: float = 0):
        """``mod.time_evaluator(mod.entry_name, tilecraft.cuda(0), number=100)(a, b, c).median``."""
        return _time_evaluator(self.get_function(func_name), number, repeat, min_repeat_ms)

    def export_library(self, path) -> str:
        raise NotImplementedError("export_library of CUDA modules is not supported yet; "
                                  "mod.cubin holds the compiled kernels and mod.get_source() the CUDA C")

    def __repr__(self) -> str:
        return f"<tilecraft.CUDAModule [{', '.join(self.funcs)}] {self.arch}>"


def check_limits(info, fn, limits: dict) -> None:
    """Raise, in words naming the schedule choice, when a kernel cannot launch on the device."""
    threads = info.threads
    dims = " × ".join(f"{t}={info.extents[t]}" for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z")
                      if t in info.extents) or "1"
    where = "; ".join(f"{t} ← {info.describe(t)}" for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z")
                      if t in info.extents)
    if threads > limits["threads"]:
        raise RuntimeError(f"kernel {info.name}: {threads} threads per block ({dims}) but the device allows "
                           f"{limits['threads']}. Bound loops: {where}. Use smaller thread splits")
    shared = fn.shared_size_bytes
    if shared > limits["shared"]:
        parts = ", ".join(f"'{b.name}' ({int(b.shape[0].value)} × {b.dtype})" for b in info.shared)
        raise RuntimeError(f"kernel {info.name}: {shared} bytes of shared memory per block but the device "
                           f"allows {limits['shared']}; the shared tiles are {parts}: shrink the tiles "
                           f"cached with cache_read(..., 'shared')")
    regs = fn.num_regs
    if regs * threads > limits["regs"] or threads > fn.max_threads_per_block:
        raise RuntimeError(
            f"kernel {info.name}: {regs} registers per thread × {threads} threads per block ({dims}) = "
            f"{regs * threads} registers, more than the {limits['regs']} a block may use (at most "
            f"{fn.max_threads_per_block} threads of this kernel fit). The register tile comes from the "
            f"local cache (cache_write 'local') and vthread splits; shrink those or the thread splits ({where})")
