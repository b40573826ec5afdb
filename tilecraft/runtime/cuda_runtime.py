"""The CUDA runtime: load cubins, check kernels against the device's limits, launch, time.

pycuda is imported on first use (``driver()``), never at import time, so building CUDA code
works on machines without a GPU. Kernels run in the device's primary context, the one PyTorch and
CuPy use, so their tensors can be passed directly (anything with ``__cuda_array_interface__``).

>>> # mod = tilecraft.build(s, [A, B, C], target="cuda")
>>> # a = tilecraft.runtime.cuda_ndarray.array(np_a, tilecraft.cuda(0)); mod(a, b, c)
>>> # mod.time_evaluator(mod.entry_name, tilecraft.cuda(0), number=100)(a, b, c).median
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import Var
from ..ir.stmt import Buffer
from .cuda_tensor_map import TENSOR_MAP_WORDS, encode_tensor_map
from .signature import dim_of_expr, eval_dim
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

def eval_int(e, env: dict) -> int:
    """The value of an IR integer expression given its variables' values (``env``: Var -> int)."""
    return eval_dim(dim_of_expr(e, lambda v: v, lambda bad: ValueError(f"cannot evaluate `{bad}` on the host")),
                    env)


# ------------------------------------------------------------------------------------------------
# Launch plans: everything needed to call a function's kernels, without the IR. A module built
# from a schedule derives them from the lowered functions; an exported module stores them as
# JSON beside the cubin, so loading one needs neither the compiler nor the schedule.
#
# A dimension (grid size, workspace size, buffer dimension) is an int, the name of a scalar
# parameter, or ``(op, a, b)`` with ``op`` one of ``+ - * // % truncdiv truncmod min max``
# (the encoding of ``tilecraft.runtime.signature``).

EXPORT_FORMAT = "tilecraft-cuda"
EXPORT_VERSION = 1


def _dim_of(e, names: dict, what: str):
    def var_name(v):
        if v not in names:
            raise ValueError(f"{what} uses `{v.name}`, which is not a scalar parameter of the function")
        return names[v]
    return dim_of_expr(e, var_name, lambda bad: ValueError(
        f"{what} `{e}` is not an integer expression of the scalar parameters"))


def _dim_json(d):
    return [_dim_json(x) for x in d] if isinstance(d, tuple) else d


def _dim_unjson(d):
    return tuple(_dim_unjson(x) for x in d) if isinstance(d, list) else d


@dataclass(frozen=True)
class KernelPlan:
    """One kernel: its name in the cubin, grid and block, and where each argument comes from
    (``("arg", i)``: the function's parameter ``i``; ``("ws", j)``: workspace buffer ``j``)."""
    name: str
    grid: tuple
    block: tuple
    params: tuple
    types: str                      # pycuda's prepare() string: "P" per pointer, a numpy char per scalar
    bindings: tuple = ()            # (("threadIdx.x", "loop 'x' of stage 'C'"), ...), for messages
    shared: tuple = ()              # (("AS", elements, "float32"), ...): the __shared__ tiles
    # TensorMapSpecs (cuda_tensor_map.py) of the kernel's first parameters (params ("tmap", j),
    # 16 "Q" words each in types), encoded from their buffer arguments at launch
    tensor_maps: tuple = ()

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def describe(self, tag: str) -> str:
        return dict(self.bindings).get(tag, "nothing")

    @property
    def dynamic_shared_bytes(self) -> int:
        """Bytes of dynamic shared memory the launch passes: 0, or the whole tile set where it
        is more than a static ``__shared__`` declaration may hold (the renderer then carves the
        tiles out of one dynamic block, 16-byte aligned)."""
        from ..schedule.passes.gpu_kernels import MAX_STATIC_SHARED_BYTES
        sizes = [-(-e * dt.nbytes(t) // 16) * 16 for _, e, t in self.shared]
        raw = sum(e * dt.nbytes(t) for _, e, t in self.shared)
        return sum(sizes) if raw > MAX_STATIC_SHARED_BYTES else 0

    def to_json(self) -> dict:
        return {"name": self.name, "grid": [_dim_json(g) for g in self.grid], "block": list(self.block),
                "params": [list(p) for p in self.params], "types": self.types,
                "bindings": [list(b) for b in self.bindings], "shared": [list(x) for x in self.shared],
                **({"tensor_maps": [m.to_json() for m in self.tensor_maps]} if self.tensor_maps else {})}

    @staticmethod
    def from_json(d: dict) -> "KernelPlan":
        from .cuda_tensor_map import TensorMapSpec
        return KernelPlan(d["name"], tuple(_dim_unjson(g) for g in d["grid"]), tuple(int(b) for b in d["block"]),
                          tuple((str(k), int(i)) for k, i in d["params"]), d["types"],
                          tuple((str(t), str(w)) for t, w in d.get("bindings", ())),
                          tuple((str(n), int(e), str(t)) for n, e, t in d.get("shared", ())),
                          tuple(TensorMapSpec.from_json(m) for m in d.get("tensor_maps", ())))


@dataclass(frozen=True)
class FunctionPlan:
    """One function: its signature (what callers pass), global workspace, kernels in launch order.
    ``program`` is that order when the host loops (a ``te.scan``'s steps): ``("k", index)`` and
    ``("loop", j, name, dtype, min, extent, program)`` items, the loop's value passed to its
    kernels as parameter ``("loop", j)`` and known to the dimensions as ``name``; empty means
    every kernel once, in order."""
    signature: object               # tilecraft.runtime.signature.FuncSignature
    workspace: tuple                # (("T", "float32", size), ...)
    kernels: tuple
    program: tuple = ()

    @property
    def name(self) -> str:
        return self.signature.name

    def to_json(self) -> dict:
        return {"signature": self.signature.to_json(),
                "workspace": [[n, t, _dim_json(size)] for n, t, size in self.workspace],
                "kernels": [k.to_json() for k in self.kernels],
                **({"program": _dim_json(self.program)} if self.program else {})}

    @staticmethod
    def from_json(d: dict) -> "FunctionPlan":
        from .signature import FuncSignature
        return FunctionPlan(FuncSignature.from_json(d["signature"]),
                            tuple((str(n), str(t), _dim_unjson(size)) for n, t, size in d["workspace"]),
                            tuple(KernelPlan.from_json(k) for k in d["kernels"]),
                            _dim_unjson(d.get("program", [])))


def _kernel_view(info, names=None, positions=None, body=None) -> KernelPlan:
    """A :class:`KernelPlan` of a ``KernelInfo`` (``names``/``positions`` map Vars and Buffers to
    the function's parameters; without them only what messages need is filled in; ``body``, the
    kernel's, gives its tensor-map parameters)."""
    tags = [t for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z") if t in info.extents]
    bindings = tuple((t, info.describe(t)) for t in tags)
    shared = tuple((b.name, int(b.shape[0].value), b.dtype) for b in info.shared)
    if names is None:
        return KernelPlan(info.name, (), tuple(info.block), (), "", bindings, shared)
    grid = tuple(_dim_of(g, names, f"kernel {info.name}: the grid size") for g in info.grid)
    params = tuple(positions[p] for p in info.params)
    types = "".join("P" if isinstance(p, Buffer) else _NP_CHARS[p.dtype] for p in info.params)
    maps = _tensor_map_specs(info, body, positions) if body is not None else ()
    params = tuple(("tmap", j) for j in range(len(maps))) + params
    types = "Q" * (TENSOR_MAP_WORDS * len(maps)) + types
    return KernelPlan(info.name, grid, tuple(info.block), params, types, bindings, shared, maps)


def _tensor_map_specs(info, body, positions) -> tuple:
    """The kernel's tensor-map parameters (``cuda_tensor_map.tensor_maps_of``) as specs of the
    function arguments they map."""
    from .cuda_tensor_map import TensorMapSpec, tensor_maps_of
    out = []
    for buf, box in tensor_maps_of(body):
        where = positions.get(buf)
        if where is None or where[0] != "arg":
            raise ValueError(f"kernel {info.name}: a TMA copy reads '{buf.name}', which is not an argument of the "
                             f"function (a tensor map is built from an argument's pointer and shape)")
        out.append(TensorMapSpec(where[1], buf.dtype, box))
    return tuple(out)


def plan_of(func) -> FunctionPlan:
    """The launch plan of a function lowered for CUDA."""
    from .signature import signature_of
    from ..schedule.passes.gpu_lower import kernels_of
    sig = signature_of(func)
    names, positions = {}, {}
    for i, (p, spec) in enumerate(zip(func.params, sig.params)):
        if isinstance(p, Var):
            names[p] = spec.name
        positions[p] = ("arg", i)
    workspace, ks = kernels_of(func.body)
    program = _host_program(func.body, names, positions, [info for info, _ in ks])
    ws = []
    for j, w in enumerate(workspace):
        positions[w] = ("ws", j)
        ws.append((w.name, w.dtype, _dim_of(w.shape[0], names, f"the size of workspace '{w.name}'")))
    kernels = []
    for info, body in ks:
        missing = [p for p in info.params if p not in positions]
        if missing:
            raise ValueError(f"kernel {info.name} takes {', '.join(getattr(p, 'name', str(p)) for p in missing)}, "
                             f"which {'is' if len(missing) == 1 else 'are'} not a parameter of {func.name}")
        kernels.append(_kernel_view(info, names, positions, body))
    return FunctionPlan(sig, tuple(ws), tuple(kernels), program)


def _host_program(body, names: dict, positions: dict, infos: list) -> tuple:
    """The launch order of a function with host loops (``FunctionPlan.program``), or ``()``;
    registers each loop variable as a kernel argument ``("loop", name)``."""
    from ..schedule.passes.gpu_lower import launch_program
    _, items = launch_program(body)
    if all(kind == "kernel" for kind, _, _ in items):
        return ()

    loops: list = []

    def walk(items):
        out = []
        for kind, a, b in items:
            if kind == "kernel":
                out.append(("k", next(k for k, info in enumerate(infos) if info is a)))
                continue
            j = len(loops)
            loops.append(a)
            name = f"{a.loop_var.name}#{j}"
            what = f"the host loop '{a.loop_var.name}'"
            lo, extent = _dim_of(a.min, names, what), _dim_of(a.extent, names, what)
            names[a.loop_var], positions[a.loop_var] = name, ("loop", j)
            out.append(("loop", j, name, a.loop_var.dtype, lo, extent, tuple(walk(b))))
        return out
    return tuple(walk(items))


# ------------------------------------------------------------------------------------------------

class _Kernel:
    """One loaded kernel and how to call it."""

    def __init__(self, plan: KernelPlan, fn, image: bytes = None):
        self.plan = plan
        self.fn = fn
        types = plan.types
        if plan.tensor_maps:             # maps sit where the driver says (cuda_tensor_map.param_layout)
            from .cuda_tensor_map import padded_format, param_layout
            types = padded_format(types, len(plan.tensor_maps), param_layout(image, plan.name))
        self.fn.prepare(types.replace("e", "H"))         # pycuda packs no half: its bits, as uint16
        self.smem = plan.dynamic_shared_bytes
        if self.smem:                                    # above 48 KiB a kernel must opt in
            self.fn.set_attribute(driver().function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem)
        self.block = plan.block
        self.static_grid = tuple(plan.grid) if all(isinstance(g, int) for g in plan.grid) else None


# struct/pycuda format characters of scalar kernel parameters (native alignment, as CUDA lays
# out parameters)
_NP_CHARS = {"int32": "i", "int64": "q", "uint32": "I", "uint64": "Q", "float32": "f", "float64": "d",
             "float16": "e", "int16": "h", "uint16": "H", "int8": "b", "uint8": "B", "bool": "?"}


def _scalar_arg(value, dtype: str):
    """A scalar kernel argument as pycuda packs it (a float16 as its 16 bits)."""
    v = np.dtype(dtype).type(value)
    return int(v.view(np.uint16)) if v.dtype == np.float16 else v


def _array_of(a):
    """(device pointer, shape, dtype, C-contiguous) of a device array, or None."""
    from .cuda_ndarray import CUDANDArray
    if type(a) is CUDANDArray:
        return a.data_ptr, a.shape, a._dtype, True
    if str(getattr(a, "dtype", "")) == "torch.bfloat16":
        # torch has no __cuda_array_interface__ for bfloat16 (numpy has no such dtype): its own API
        if not a.is_cuda:
            return None
        return a.data_ptr(), tuple(a.shape), "bfloat16", a.is_contiguous()
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
    """One function: its kernels launched in order. ``f(a, b, c)``; ``f.signature`` says what it takes."""

    def __init__(self, module, plan: FunctionPlan, kernels: list):
        self.module, self.plan, self.name = module, plan, plan.name
        self.signature = plan.signature
        self.kernels = kernels
        sig = plan.signature
        self.buffers = [(i, p) for i, p in enumerate(sig.params) if p.kind == "buffer"]
        derived = sig.derived_scalars()
        self.user_scalars = [(i, p) for i, p in enumerate(sig.params) if p.kind == "scalar" and p.name not in derived]
        self.scalars = [(i, p) for i, p in enumerate(sig.params) if p.kind == "scalar"]
        self._ws_cache: dict = {}

    def __call__(self, *args):
        self.launch(self.prepare(args))

    def prepare(self, args):
        """Check the arguments; return the per-kernel launch arguments."""
        from .signature import shape_str
        n_user = len(self.buffers) + len(self.user_scalars)
        if len(args) != n_user:
            names = ", ".join([b.name for _, b in self.buffers] + [v.name for _, v in self.user_scalars])
            raise TypeError(f"{self.name} expects {n_user} arguments ({names}), got {len(args)}")
        env: dict = {}
        values: dict = {}
        got_all = []
        shapes: dict = {}
        for pos, ((i, b), a) in enumerate(zip(self.buffers, args)):
            got = _array_of(a)
            if got is None:
                raise TypeError(
                    f"argument {pos} '{b.name}': expected a GPU array (tilecraft.runtime.cuda_ndarray.array("
                    f"x, tilecraft.cuda(0)), a torch/CuPy tensor on the GPU), got {type(a).__name__}")
            ptr, shape, dtype, contiguous = got
            name = dtype if isinstance(dtype, str) else dtype.name          # "bfloat16": a torch tensor
            if name != b.dtype:
                raise TypeError(f"argument {pos} '{b.name}': expected dtype {b.dtype}, got {name}")
            if len(shape) != len(b.shape):
                raise ValueError(f"argument {pos} '{b.name}': expected {len(b.shape)} dimensions "
                                 f"{shape_str(b.shape)}, got shape {shape}")
            for d, s in zip(b.shape, shape):
                if isinstance(d, str) and d not in env:
                    env[d] = s
            if not contiguous:
                raise ValueError(f"argument {pos} '{b.name}': expected a C-contiguous array")
            values[("arg", i)] = ptr
            got_all.append(shape)
            shapes[("arg", i)] = shape
        for (i, v), a in zip(self.user_scalars, args[len(self.buffers):]):
            env[v.name] = a
        for pos, ((i, b), shape) in enumerate(zip(self.buffers, got_all)):
            want = tuple(eval_dim(d, env) for d in b.shape)
            if want != tuple(shape):
                raise ValueError(f"argument {pos} '{b.name}': expected shape {want}, got {tuple(shape)}")
        for i, v in self.scalars:
            values[("arg", i)] = _scalar_arg(env[v.name], v.dtype)
        for j, (wname, wdtype, size) in enumerate(self.plan.workspace):
            values[("ws", j)] = self._workspace(j, eval_dim(size, env) * np.dtype(wdtype).itemsize)
        for k in self.kernels:
            for j, spec in enumerate(k.plan.tensor_maps):
                src = ("arg", spec.buffer_index)
                values[(k.plan.name, "tmap", j)] = encode_tensor_map(spec, values[src], shapes[src])
        calls = []
        self._calls(self.plan.program or tuple(("k", i) for i in range(len(self.kernels))), env, values, calls)
        return calls

    def _calls(self, program, env: dict, values: dict, calls: list) -> None:
        """The launches of ``program`` in order, a host loop's unrolled with its values."""
        for item in program:
            if item[0] == "loop":
                _, j, name, dtype, lo, extent, body = item
                start = eval_dim(lo, env)
                for i in range(start, start + eval_dim(extent, env)):
                    env[name], values[("loop", j)] = i, _scalar_arg(i, dtype)
                    self._calls(body, env, values, calls)
                continue
            k = self.kernels[item[1]]
            grid = k.static_grid or tuple(eval_dim(g, env) for g in k.plan.grid)
            if grid[0] >= 2**31 or grid[1] > 65535 or grid[2] > 65535:
                raise ValueError(f"kernel {k.plan.name}: grid {grid} exceeds CUDA's limits "
                                 f"(x < 2^31, y and z <= 65535); bind the larger extent to blockIdx.x")
            if min(grid) <= 0:
                grid = None          # nothing to do
            kargs = []
            for p in k.plan.params:
                if p[0] == "tmap":            # a tensor map: its 16 words
                    kargs.extend(values[(k.plan.name, "tmap", p[1])])
                else:
                    kargs.append(values[p])
            calls.append((k.fn, grid, k.block, kargs, k.smem))

    def _workspace(self, j, size):
        hit = self._ws_cache.get((j, size))
        if hit is None:
            hit = self._ws_cache[(j, size)] = driver().mem_alloc(max(size, 1))
        return int(hit)

    @staticmethod
    def launch(calls):
        for fn, grid, block, kargs, smem in calls:
            if grid is not None:
                fn.prepared_call(grid, block, *kargs, shared_size=smem)

    def time_evaluator(self, dev=None, number=10, repeat=1, min_repeat_ms=0):
        return _time_evaluator(self, number, repeat, min_repeat_ms)


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
    ``mod.time_evaluator(mod.entry_name, dev, number=..)`` times with CUDA events;
    ``mod.export_library("ops.tcuda")`` writes a file that ``tilecraft.runtime.load_module``
    loads (on any machine with a GPU of the same architecture, without the compiler).
    """

    type_key = "cuda"

    def __init__(self, funcs, source: str, cubin: bytes, arch: str, target: str, plans=None):
        self.funcs = {f.name: f for f in funcs}          # the lowered PrimFuncs (none when loaded from a file)
        plans = list(plans) if plans is not None else [plan_of(f) for f in funcs]
        if not plans:
            raise ValueError("a CUDA module needs at least one function")
        self.plans = {p.name: p for p in plans}
        self.entry_name = plans[0].name
        self.source, self.cubin, self.arch, self.target = source, cubin, arch, target
        self.image_kind = "cubin"      # "ptx" when loaded from a .ptx file (then ``cubin`` holds the PTX)
        self.compile_ptx = None        # set by the CUDA backend (nvcc -ptx of the source), for save("x.ptx")
        self._loaded = None
        self.build_times: dict = {}

    @property
    def imported_modules(self):
        return [self]

    def get_source(self, fmt: str = "cuda") -> str:
        """``"cuda"``: the CUDA C (a module loaded from a ``.ptx`` file: its PTX); ``"ptx"``: PTX
        (nvcc); ``"manifest"``: the launch metadata as JSON."""
        if fmt in ("cuda", "cu", ""):
            return self.source
        if fmt == "ptx":
            return self.ptx().decode("utf-8")
        if fmt == "manifest":
            return json.dumps(self.manifest(), indent=1)
        raise ValueError(f"a CUDA module has sources 'cuda' (CUDA C), 'ptx' and 'manifest'; got {fmt!r}")

    def ptx(self) -> bytes:
        """The kernels as PTX text: compiled by nvcc on first use (a loaded ``.ptx``: as read)."""
        if self.image_kind == "ptx":
            return self.cubin
        if self.compile_ptx is None:
            raise ValueError("this CUDA module was loaded from a cubin archive: it has no source to compile "
                             "to PTX (save('x.cubin') or export_library instead)")
        return self.compile_ptx()

    def save(self, file_name, fmt: str = "") -> str:
        """TVM's ``mod.save``: ``"x.ptx"`` (PTX, loadable on any newer GPU), ``"x.cubin"`` or
        ``"x.cu"`` (CUDA C), with ``x.tvm_meta.json`` beside it; ``load_module("x.ptx")`` reads
        them back (``runtime/cuda_files.py``).

        >>> fadd.imported_modules[0].save("myadd.ptx")
        """
        from .cuda_files import save_cuda_module
        return save_cuda_module(self, file_name, fmt)

    def load(self, index: int = 0) -> dict:
        """Load the cubin into the GPU, check every kernel against the device's limits."""
        if self._loaded is not None:
            return self._loaded
        drv = driver()
        context(index)
        dev = drv.Device(index)
        arch = device_arch(index)
        # sm_90a (wgmma kernels) runs on an sm_90 GPU: the suffix only marks arch-specific instructions;
        # PTX: the driver compiles it
        if arch is not None and arch != self.arch.removesuffix("a") and self.image_kind != "ptx":
            raise RuntimeError(f"the kernels were compiled for {self.arch} but GPU {index} is {arch}: "
                               f"build with target='cuda -arch={arch}'")
        mod = drv.module_from_buffer(self.cubin + b"\0" if self.image_kind == "ptx" else self.cubin)
        A = drv.device_attribute
        limits = {"threads": dev.get_attribute(A.MAX_THREADS_PER_BLOCK),
                  "shared": dev.get_attribute(A.MAX_SHARED_MEMORY_PER_BLOCK),
                  "regs": dev.get_attribute(A.MAX_REGISTERS_PER_BLOCK)}
        loaded = {}
        for name, plan in self.plans.items():
            kernels = []
            for kp in plan.kernels:
                fn = mod.get_function(kp.name)
                check_limits(kp, fn, limits)
                kernels.append(_Kernel(kp, fn, self.cubin if kp.tensor_maps else None))
            loaded[name] = CUDAFunction(self, plan, kernels)
        self._module = mod
        self._loaded = loaded
        return loaded

    def get_function(self, name: str) -> CUDAFunction:
        if name not in self.plans:
            raise KeyError(f"the module has no function {name!r}; it has: {', '.join(self.plans)}")
        return self.load()[name]

    __getitem__ = get_function

    def __call__(self, *args):
        return self.get_function(self.entry_name)(*args)

    def time_evaluator(self, func_name: str, dev=None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, cooldown_interval_ms: float = 0):
        """``mod.time_evaluator(mod.entry_name, tilecraft.cuda(0), number=100)(a, b, c).median``."""
        return _time_evaluator(self.get_function(func_name), number, repeat, min_repeat_ms)

    def manifest(self) -> dict:
        from . import version
        return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "tilecraft_version": version(),
                "target": self.target, "arch": self.arch, "entry": self.entry_name,
                "functions": [p.to_json() for p in self.plans.values()]}

    def export_library(self, path) -> str:
        """Write the module to ``path`` (a zip archive: ``manifest.json``, ``kernels.cubin``,
        ``kernels.cu``; no pickles) and return the absolute path. docs/cuda.md describes the
        manifest, for callers that launch the cubin themselves (C, the CUDA driver API)."""
        return export_cuda(self, path)

    def __repr__(self) -> str:
        return f"<tilecraft.CUDAModule [{', '.join(self.plans)}] {self.arch}>"


def export_cuda(module: CUDAModule, path, extra: dict | None = None) -> str:
    """Write ``module`` as a zip archive at ``path``; ``extra`` (name -> bytes) adds files (a
    model's graph and weights, ``runtime/cuda_graph_executor.py``)."""
    import os
    import tempfile
    import zipfile
    from .library import check_destination
    path = check_destination(os.fspath(path) if isinstance(path, os.PathLike) else path)
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tilecraft-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("manifest.json", json.dumps(module.manifest(), indent=1))
            z.writestr("kernels.cubin", module.cubin)
            z.writestr("kernels.cu", module.source)
            for name, data in (extra or {}).items():
                z.writestr(name, data)
        os.replace(tmp, path)       # whole file at once
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return path


def is_cuda_library(path) -> bool:
    """Whether ``path`` starts like a file written by ``CUDAModule.export_library`` (a zip archive)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def load_cuda_module(path) -> CUDAModule:
    """Read a file written by ``CUDAModule.export_library``; the GPU is touched on first call."""
    import os
    import zipfile
    p = os.fspath(path)
    try:
        with zipfile.ZipFile(p) as z:
            names = set(z.namelist())
            missing = {"manifest.json", "kernels.cubin"} - names
            if missing:
                raise ValueError(f"load_module: {p!r} lacks {', '.join(sorted(missing))}; it was not written "
                                 "by a CUDA module's export_library")
            info = json.loads(z.read("manifest.json").decode("utf-8"))
            cubin = z.read("kernels.cubin")
            source = z.read("kernels.cu").decode("utf-8") if "kernels.cu" in names else ""
            model = {n: z.read(n) for n in ("graph.json", "params.json", "params.bin") if n in names}
    except zipfile.BadZipFile as e:
        raise ValueError(f"load_module: {p!r} is not a valid archive ({e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"load_module: the manifest in {p!r} is not valid JSON ({e})") from None
    if info.get("format") != EXPORT_FORMAT or info.get("version") != EXPORT_VERSION:
        raise ValueError(f"load_module: {p!r} has format {info.get('format')!r} version {info.get('version')!r}; "
                         f"this tilecraft reads {EXPORT_FORMAT!r} version {EXPORT_VERSION}")
    try:
        plans = [FunctionPlan.from_json(f) for f in info["functions"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"load_module: the manifest in {p!r} is malformed ({type(e).__name__}: {e})") from None
    mod = CUDAModule([], source, cubin, info["arch"], info["target"], plans=plans)
    mod.entry_name = info.get("entry", mod.entry_name)
    if "graph.json" in model:           # a whole model (relay.build for cuda): kernels, graph, weights
        from .cuda_graph_executor import load_cuda_factory
        return load_cuda_factory(mod, model)
    return mod


def check_limits(info, fn, limits: dict) -> None:
    """Raise, in words naming the schedule choice, when a kernel cannot launch on the device.
    ``info`` is a :class:`KernelPlan` (or a lowered kernel's ``KernelInfo``)."""
    if not isinstance(info, KernelPlan):
        info = _kernel_view(info)
    threads = info.threads
    dims = " × ".join(f"{t}={info.block['xyz'.index(t[-1])]}" for t, _ in info.bindings) or "1"
    where = "; ".join(f"{t} ← {w}" for t, w in info.bindings)
    if threads > limits["threads"]:
        raise RuntimeError(f"kernel {info.name}: {threads} threads per block ({dims}) but the device allows "
                           f"{limits['threads']}. Bound loops: {where}. Use smaller thread splits")
    shared = fn.shared_size_bytes
    if shared > limits["shared"]:
        parts = ", ".join(f"'{n}' ({e} × {t})" for n, e, t in info.shared)
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
