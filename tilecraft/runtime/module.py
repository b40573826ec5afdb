"""Compiled modules and their checked functions.

A :class:`Module` holds one or more compiled functions (JIT-compiled by the LLVM backend, or
loaded from a library written by ``export_library``). Calling a :class:`Function` checks its
arguments against the function's :class:`~tilecraft.runtime.signature.FuncSignature` (count,
dtype, shape, C-contiguity, outputs not aliasing inputs), derives the symbolic shape parameters
from the arrays' shapes and calls the C entry point through a cached ctypes prototype.

>>> # mod = tilecraft.build(s, [A, B, C], target="llvm", name="vadd")
>>> # mod(a, b, c); mod["vadd"](a, b, c); mod.entry_name
"""
from __future__ import annotations

import ctypes
import functools
import json
import os

import numpy as np

from .ndarray import NDArray
from .signature import FuncSignature, eval_dim, shape_str
from .packed import take_error
from .status import STATUS_PACKED_FUNC, KernelError, raise_for_status
from .threads import mark_parallel_used
from .timing import time_evaluator as _time_evaluator

MANIFEST_SYMBOL = "tilecraft_manifest"
THREADS_SYMBOL = "tilecraft_num_threads"
MANIFEST_FORMAT = 1

_c_char = ctypes.c_char
_addressof = ctypes.addressof

C_SCALAR_TYPES = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "float16": ctypes.c_uint16,
    "float32": ctypes.c_float, "float64": ctypes.c_double,
}


class _BufferCheck:
    """Precomputed checks for one buffer argument."""
    __slots__ = ("pos", "name", "np_dtype", "static", "shape", "ndim", "written")

    def __init__(self, pos, spec):
        self.pos = pos
        self.name = spec.name
        self.np_dtype = np.dtype(spec.dtype)
        self.shape = spec.shape
        self.ndim = len(spec.shape)
        self.static = spec.shape if all(isinstance(d, int) for d in spec.shape) else None
        self.written = spec.written


class Function:
    """A compiled function with argument checks: ``f(a, b, c)``; ``f.signature`` says what it takes."""

    def __init__(self, signature: FuncSignature, address, keepalive=None, parallel: bool = False,
                 error_message=None):
        """``address``: the C entry point, or a function returning it, called when the function
        is first needed (the LLVM backend generates machine code then). ``error_message``: a
        function returning the calling thread's error message (bytes) after a non-zero status."""
        self.signature = signature
        self._error_message = error_message
        self.parallel = parallel
        self.name = signature.name
        self._keepalive = keepalive
        ctys = [ctypes.c_void_p if p.kind == "buffer" else C_SCALAR_TYPES[p.dtype] for p in signature.params]
        self._prototype = ctypes.CFUNCTYPE(ctypes.c_int32, *ctys)
        self._address = address
        if not callable(address):
            self._cfunc = self._prototype(address)
        self._bufs = [_BufferCheck(i, p) for i, p in enumerate(signature.buffers)]
        derived = signature.derived_scalars()
        self._user = signature.user_params()
        self._nuser = len(self._user)
        # how to produce each scalar: ("env", name) or ("arg", position among the user's args)
        user_pos = {p.name: i for i, p in enumerate(self._user) if p.kind == "scalar"}
        self._scalars = [("env", s.name) if s.name in derived else ("arg", user_pos[s.name])
                         for s in signature.scalars]
        self._all_static = all(b.static is not None for b in self._bufs)
        self._alias_pairs = [(i, j) for i in range(len(self._bufs)) for j in range(len(self._bufs))
                             if i != j and self._bufs[i].written and (j > i or not self._bufs[j].written)]

    @functools.cached_property
    def _cfunc(self):
        """The ctypes function; looked up (and the address resolved) on first use, then a plain
        attribute, so calls pay nothing for the laziness."""
        return self._prototype(self._address())

    def resolve(self) -> "Function":
        """Make sure the machine code exists now (it is otherwise made on the first call)."""
        self._cfunc
        return self

    # --- calling ---------------------------------------------------------------------------
    def __call__(self, *args):
        if self.parallel:
            mark_parallel_used()
        self._check_rc(self._cfunc(*self._prepare(args)))

    def _check_rc(self, rc):
        if rc != 0:
            message = self._error_message() if self._error_message is not None else None
            cause = take_error() if rc == STATUS_PACKED_FUNC else None
            try:
                raise_for_status(self.name, rc, message)
            except KernelError as e:
                if cause is None:
                    raise
                raise e from cause

    def _prepare(self, args) -> list:
        """Check the arguments and return the raw C arguments (pointers, then scalars)."""
        if len(args) != self._nuser:
            names = ", ".join(p.name for p in self._user)
            raise TypeError(f"{self.name} expects {self._nuser} argument{'s' if self._nuser != 1 else ''} "
                            f"({names}), got {len(args)}")
        raw = []
        arrays = []
        env = None if self._all_static else {}
        pending = []
        for chk, a in zip(self._bufs, args):
            arr = a._array if type(a) is NDArray and a.device.kind == "cpu" else a
            if type(arr) is not np.ndarray:
                arr = self._coerce(chk, a)
            if arr.dtype != chk.np_dtype:
                raise TypeError(f"argument {chk.pos} '{chk.name}': expected dtype {chk.np_dtype.name}, "
                                f"got {arr.dtype.name}")
            if chk.static is not None:
                if arr.shape != chk.static:
                    raise ValueError(f"argument {chk.pos} '{chk.name}': expected shape "
                                     f"{shape_str(chk.static)}, got {shape_str(arr.shape)}")
            else:
                self._bind(chk, arr.shape, env, pending)
            if not arr.flags.c_contiguous:
                raise ValueError(f"argument {chk.pos} '{chk.name}': expected a C-contiguous array, got "
                                 f"strides {arr.strides}; pass np.ascontiguousarray(...) instead")
            try:
                raw.append(_addressof(_c_char.from_buffer(arr)))   # 4x faster than arr.ctypes.data
            except (TypeError, ValueError):                        # read-only or empty arrays
                if chk.written and not arr.flags.writeable:
                    raise ValueError(f"argument {chk.pos} '{chk.name}': the function writes this array, "
                                     "but it is read-only") from None
                raw.append(arr.ctypes.data)
            arrays.append(arr)
        if pending:
            self._check_exprs(env, pending)
        if self._alias_pairs:
            self._check_aliasing(raw, arrays)
        for how, key in self._scalars:
            raw.append(env[key][0] if how == "env" else self._scalar_arg(key, args[key]))
        return raw

    def _coerce(self, chk, a) -> np.ndarray:
        if isinstance(a, NDArray):
            if a.device.kind != "cpu":
                raise ValueError(f"argument {chk.pos} '{chk.name}': expected an array on cpu(0), "
                                 f"got one on {a.device}")
            return a._array
        if isinstance(a, np.ndarray):
            return a
        raise TypeError(f"argument {chk.pos} '{chk.name}': expected a numpy array or tilecraft NDArray, "
                        f"got {type(a).__name__}")

    def _bind(self, chk, shape, env, pending):
        if len(shape) != chk.ndim:
            raise ValueError(f"argument {chk.pos} '{chk.name}': expected a {chk.ndim}-d array of shape "
                             f"{shape_str(chk.shape)}, got shape {shape_str(shape)}")
        for d, got in zip(chk.shape, shape):
            if isinstance(d, int):
                ok = d == got
            elif isinstance(d, str):
                seen = env.get(d)
                if seen is None:
                    env[d] = (got, chk)
                    continue
                ok = seen[0] == got
            else:
                pending.append((chk, shape))  # checked once every name is bound
                continue
            if not ok:
                raise ValueError(f"argument {chk.pos} '{chk.name}': expected shape "
                                 f"{self._expected(chk.shape, env)}, got {shape_str(shape)}")

    def _expected(self, shape, env) -> str:
        values = {k: v[0] for k, v in env.items()}
        names = sorted({d for d in _names(shape)})
        try:
            concrete = shape_str(tuple(eval_dim(d, values) for d in shape))
        except KeyError:
            return shape_str(shape)
        where = ", ".join(f"{k} = {values[k]} from argument {env[k][1].pos} '{env[k][1].name}'"
                          for k in names if k in env)
        return f"{concrete}" + (f" (that is {shape_str(shape)} with {where})" if where else "")

    def _check_exprs(self, env, pending):
        values = {k: v[0] for k, v in env.items()}
        for chk, shape in pending:
            for d, got in zip(chk.shape, shape):
                if isinstance(d, tuple) and eval_dim(d, values) != got:
                    raise ValueError(f"argument {chk.pos} '{chk.name}': expected shape "
                                     f"{self._expected(chk.shape, env)}, got {shape_str(shape)}")

    def _check_aliasing(self, raw, arrays):
        for i, j in self._alias_pairs:
            ai, aj = arrays[i], arrays[j]
            if ai.nbytes and aj.nbytes and raw[i] < raw[j] + aj.nbytes and raw[j] < raw[i] + ai.nbytes:
                bi, bj = self._bufs[i], self._bufs[j]
                raise ValueError(f"arguments {bi.pos} '{bi.name}' and {bj.pos} '{bj.name}' overlap in "
                                 f"memory, but '{bi.name}' is written: compiled functions assume an "
                                 f"output aliases no other argument (pass a copy)")

    def _scalar_arg(self, pos, value):
        spec = self._user[pos]
        if not isinstance(value, (int, float, np.generic)) or isinstance(value, bool) and spec.dtype != "bool":
            raise TypeError(f"argument {pos} '{spec.name}': expected a {spec.dtype} scalar, "
                            f"got {type(value).__name__}")
        if spec.dtype == "float16":
            return int(np.float16(value).view(np.uint16))   # passed as its bits
        return value

    # --- conveniences ------------------------------------------------------------------------
    def time_evaluator(self, dev=None, number=10, repeat=1, min_repeat_ms=0):
        return _time_evaluator(self, dev, number, repeat, min_repeat_ms)

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.dtype}{shape_str(p.shape) if p.kind == 'buffer' else ''}"
                           for p in self.signature.params)
        return f"<tilecraft.Function {self.name}({params})>"


def _names(shape):
    for d in shape:
        if isinstance(d, str):
            yield d
        elif isinstance(d, tuple):
            yield from _names(d[1:])


class Module:
    """Compiled functions plus what produced them (``get_source``) and how to export them.

    ``artifact`` provides ``get_source(fmt)`` and ``export_library(module, path)``; the LLVM
    backend and :func:`load_module` supply one each.
    """

    def __init__(self, functions: dict, entry_name: str, target: str, artifact, type_key: str = "llvm"):
        self._functions = functions
        self.entry_name = entry_name
        self.target = target
        self.artifact = artifact
        self.type_key = type_key
        self._imported: list = []

    def __call__(self, *args):
        return self._functions[self.entry_name](*args)

    def __getitem__(self, name: str) -> Function:
        return self.get_function(name)

    def get_function(self, name: str) -> Function:
        """The function ``name`` of this module, else of a module imported into it."""
        if name in self._functions:
            return self._functions[name]
        for m in self._imported:
            if name in getattr(m, "plans", getattr(m, "_functions", ())):
                return m.get_function(name)
        names = list(self._functions) + [n for m in self._imported for n in getattr(m, "plans", ())]
        raise KeyError(f"the module has no function {name!r}; it has: {', '.join(names)}")

    def import_module(self, mod) -> None:
        """TVM's ``host.import_module(device_module)``: ``mod`` (e.g. a CUDA module loaded from
        ``x.ptx``) is listed in ``imported_modules`` and its functions are found through this
        module: ``host["myadd"](a, b, c)``."""
        self._imported.append(mod)

    @property
    def function_names(self) -> list:
        return list(self._functions)

    @property
    def signatures(self) -> list:
        return [f.signature for f in self._functions.values()]

    def get_source(self, fmt: str = "ll") -> str:
        """``"ll"``: optimised LLVM IR; ``"ll-raw"``: IR as emitted; ``"asm"``: assembly;
        ``"manifest"``: the JSON manifest embedded by ``export_library``."""
        if fmt in ("manifest", "json"):
            return json.dumps(manifest(self), indent=1)
        return self.artifact.get_source(fmt)

    def time_evaluator(self, func_name: str, dev=None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, cooldown_interval_ms: float = 0):
        """``mod.time_evaluator(mod.entry_name, dev, number=10)(a, b, c).mean`` (seconds)."""
        return _time_evaluator(self.get_function(func_name), dev, number, repeat, min_repeat_ms,
                               cooldown_interval_ms)

    def export_library(self, path) -> str:
        """Write a shared library with a C entry point per function, plus a C header next to it."""
        return self.artifact.export_library(self, os.fspath(path))

    @property
    def imported_modules(self) -> list:
        """TVM's device modules imported by this one (``import_module``); none after a CPU build."""
        return list(self._imported)

    def save(self, file_name, fmt: str = "") -> str:
        """TVM's ``mod.save``: ``"myadd.o"`` an object file that ``tilecraft.contrib.cc.create_shared``
        links into a library for :func:`load_module`; ``".ll"`` LLVM IR, ``".s"`` assembly (``fmt``,
        when given, instead of the suffix).

        >>> # fadd.save("myadd.o"); cc.create_shared("myadd.so", ["myadd.o"])
        """
        path = os.fspath(file_name)
        fmt = (fmt or os.path.splitext(path)[1].lstrip(".")).lower()
        if fmt not in ("o", "ll", "s"):
            raise ValueError(f"save({path!r}): a CPU module saves as an object file ('.o'), LLVM IR ('.ll') "
                             f"or assembly ('.s'), not {fmt!r}; export_library writes a shared library")
        save = getattr(self.artifact, "save", None)
        if save is None:
            raise ValueError(f"save({path!r}): this module was loaded from a library; it has no code to "
                             f"save (copy the library, or export_library it)")
        return save(self, path, fmt)

    def __repr__(self) -> str:
        return f"<tilecraft.Module {self.type_key} [{', '.join(self._functions)}] target={self.target!r}>"


def manifest(module: Module) -> dict:
    """The JSON-able description embedded in exported libraries."""
    from . import version
    return {"format": MANIFEST_FORMAT, "tilecraft_version": version(), "target": module.target,
            **getattr(module.artifact, "machine", {}),
            "entry": module.entry_name, "parallel": bool(getattr(module.artifact, "has_parallel", False)),
            "functions": [f.signature.to_json() for f in module._functions.values()],
            **({"error_getter": module.artifact.error_getter}
               if getattr(module.artifact, "error_getter", None) else {})}


class _SharedLibrary:
    """The artifact of a module loaded from an exported library."""

    def __init__(self, path: str, lib, manifest_text: str):
        self.path, self.lib, self.manifest_text = path, lib, manifest_text
        info = json.loads(manifest_text)
        self.has_parallel = bool(info.get("parallel", False))
        self.machine = {k: info[k] for k in ("triple", "cpu", "features") if k in info}
        self.error_getter = info.get("error_getter")   # absent in libraries of older versions
        self.soname = info.get("soname")
        self.error_message = None
        if self.error_getter:
            self.error_message = ctypes.CFUNCTYPE(ctypes.c_char_p)(
                ctypes.cast(getattr(lib, self.error_getter), ctypes.c_void_p).value)

    def get_source(self, fmt: str) -> str:
        raise ValueError(f"a module loaded from {self.path!r} has no {fmt!r} source; "
                         "only get_source('manifest') is available")

    def export_library(self, module, path: str) -> str:
        from .library import copy_library
        return copy_library(self.path, module, path)


def _check_host_features(path: str, info: dict) -> None:
    """Refuse a library built for instructions this CPU lacks (it would die of SIGILL)."""
    wanted = {f[1:] for f in info.get("features", "").split(",") if f.startswith("+")}
    if not wanted:
        return
    try:
        import llvmlite.binding as llvm
        host = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    except Exception:       # no llvmlite, or it cannot tell: trust the library
        return
    missing = sorted(wanted - host)
    if missing:
        raise ValueError(f"load_module: {path!r} was compiled for cpu {info.get('cpu')!r} and uses "
                         f"{', '.join(missing)}, which this CPU lacks; re-export it with a target like "
                         "'llvm -mcpu=x86-64-v3'")


def load_module(path) -> Module:
    """Load a library written by ``Module.export_library`` and rebuild its checked functions.

    >>> # mod = tilecraft.runtime.load_module("ops.so"); mod(a, b, c)
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"load_module: no such file {p!r}")
    if os.path.isdir(p):
        raise IsADirectoryError(f"load_module: {p!r} is a directory, expected a shared library (.so)")
    try:
        lib = ctypes.CDLL(os.path.abspath(p))
    except OSError as e:
        raise ValueError(f"load_module: {p!r} is not a loadable shared library ({e})") from None
    try:
        cell = ctypes.c_char.in_dll(lib, MANIFEST_SYMBOL)
    except ValueError:
        raise ValueError(f"load_module: {p!r} has no '{MANIFEST_SYMBOL}' symbol; it was not written "
                         "by tilecraft's export_library") from None
    text = ctypes.string_at(ctypes.addressof(cell)).decode("utf-8")
    try:
        info = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"load_module: the manifest in {p!r} is not valid JSON ({e})") from None
    if info.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"load_module: {p!r} has manifest format {info.get('format')!r}; this "
                         f"tilecraft reads format {MANIFEST_FORMAT}")
    _check_host_features(p, info)
    artifact = _SharedLibrary(p, lib, text)
    functions = {}
    for fj in info["functions"]:
        sig = FuncSignature.from_json(fj)
        address = ctypes.cast(getattr(lib, sig.name), ctypes.c_void_p).value
        functions[sig.name] = Function(sig, address, keepalive=lib, parallel=artifact.has_parallel,
                                       error_message=artifact.error_message)
    try:
        threads = ctypes.c_int32.in_dll(lib, THREADS_SYMBOL)
    except ValueError:
        pass
    else:
        from .threads import register_thread_count_cell
        register_thread_count_cell(artifact, ctypes.addressof(threads))
    for f in functions.values():
        f._keepalive = artifact
    module = Module(functions, info["entry"], info["target"], artifact)
    if "graph" in info:     # a whole model (relay.build): kernels, graph and weights
        from .graph_executor import load_factory
        return load_factory(module, info, lib)
    return module
