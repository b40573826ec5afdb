"""TVM's files of a CUDA device module: ``mod.save("x.ptx")`` / ``"x.cubin"`` / ``"x.cu"`` writes
the kernels, and next to them ``x.tvm_meta.json`` (TVM's name) with what launching them needs (the
functions' kernels, launch dimensions and arguments: the module's manifest, plain JSON);
``tilecraft.runtime.load_module("x.ptx")`` (or ``.cubin``) reads both back into a ``CUDAModule``.

A PTX file is compiled by the CUDA driver for the GPU it is loaded on (any GPU at least as new as
the architecture it was generated for); a cubin runs only on its own ``sm_XX``. A ``.cu`` file is
the CUDA C, for reading: it cannot be loaded back (no compiler at load time).

>>> fadd.imported_modules[0].save("myadd.ptx")         # writes myadd.ptx and myadd.tvm_meta.json
>>> fadd1 = tilecraft.runtime.load_module("myadd.ptx"); fadd1(a, b, c)
"""
from __future__ import annotations

import json
import os

IMAGE_FORMATS = ("ptx", "cubin")
SAVE_FORMATS = IMAGE_FORMATS + ("cu",)


def meta_path(path: str) -> str:
    """``dir/x.tvm_meta.json`` for ``dir/x.ptx`` (TVM's metadata file name)."""
    return os.path.splitext(path)[0] + ".tvm_meta.json"


def save_cuda_module(mod, path, fmt: str = "") -> str:
    """Write ``mod``'s kernels as ``fmt`` (from the suffix when empty) and the metadata file;
    returns the kernels' path."""
    path = os.fspath(path)
    fmt = (fmt or os.path.splitext(path)[1].lstrip(".")).lower()
    if fmt == "cuda":
        fmt = "cu"
    if fmt not in SAVE_FORMATS:
        raise ValueError(f"save({path!r}): a CUDA module saves as PTX ('.ptx'), a cubin ('.cubin') or CUDA C "
                         f"('.cu'), not {fmt!r}; export_library writes one loadable archive")
    if fmt == "cu":
        data = mod.source.encode()
    elif fmt == "cubin":
        if mod.image_kind != "cubin":
            raise ValueError(f"save({path!r}): this module was loaded from PTX; it has no cubin (save it as '.ptx')")
        data = mod.cubin
    else:
        data = mod.ptx()
    with open(path, "wb") as f:
        f.write(data)
    with open(meta_path(path), "w") as f:
        json.dump(dict(mod.manifest(), image=fmt), f, indent=1)
    return os.path.abspath(path)


def load_cuda_image(path):
    """A ``CUDAModule`` from a ``.ptx`` or ``.cubin`` file that ``save`` wrote (with its
    ``.tvm_meta.json``); the GPU is touched on the first call."""
    from .cuda_runtime import EXPORT_FORMAT, EXPORT_VERSION, CUDAModule, FunctionPlan
    p = os.fspath(path)
    kind = os.path.splitext(p)[1].lstrip(".").lower()
    meta = meta_path(p)
    if not os.path.exists(meta):
        raise FileNotFoundError(f"load_module: {p!r} needs its metadata file {meta!r} (CUDAModule.save writes "
                                f"it next to the {kind}: the kernels' launch dimensions and arguments)")
    try:
        with open(meta) as f:
            info = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"load_module: {meta!r} is not valid JSON ({e})") from None
    if info.get("format") != EXPORT_FORMAT or info.get("version") != EXPORT_VERSION:
        raise ValueError(f"load_module: {meta!r} has format {info.get('format')!r} version {info.get('version')!r}; "
                         f"this tilecraft reads {EXPORT_FORMAT!r} version {EXPORT_VERSION}")
    with open(p, "rb") as f:
        data = f.read()
    if kind == "ptx" and b".entry" not in data:
        raise ValueError(f"load_module: {p!r} is not PTX (no '.entry' kernel in it)")
    try:
        plans = [FunctionPlan.from_json(fj) for fj in info["functions"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"load_module: {meta!r} is malformed ({type(e).__name__}: {e})") from None
    source = data.decode("utf-8", "replace") if kind == "ptx" else ""
    mod = CUDAModule([], source, data, info["arch"], info["target"], plans=plans)
    mod.image_kind = kind
    mod.entry_name = info.get("entry", mod.entry_name)
    return mod
