"""nvcc: CUDA C → cubin for one ``sm_XX``, cached on disk by source hash, architecture and nvcc
version. A compile error quotes the offending lines of the generated source.

>>> # cubin = compile_cuda(src, "sm_90")          # bytes; a second call with the same src is a cache hit
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from functools import lru_cache

from ..runtime.tempdirs import owned_temp_dir
from ..error import TVMError

NVCC_FLAGS = ("-O3", "-std=c++17")
DEFAULT_ARCH = "sm_90"


class CUDACompileError(TVMError):
    """nvcc rejected the generated CUDA C; the message quotes the lines it complained about."""


def find_nvcc() -> str | None:
    """The nvcc on PATH, else under CUDA_HOME / /usr/local/cuda."""
    p = shutil.which("nvcc")
    if p:
        return p
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release ([0-9.]+), (V[0-9.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def default_arch() -> str:
    """The current GPU's ``sm_XX`` when pycuda and a GPU are present, else sm_90."""
    try:
        from ..runtime.cuda_runtime import device_arch
        return device_arch() or DEFAULT_ARCH
    except Exception:
        return DEFAULT_ARCH


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tilecraft", "cuda")


# instructions that exist only in an architecture-specific target (sm_90 -> sm_90a)
ARCH_SPECIFIC = ("wgmma.mma_async", "setmaxnreg")


def target_arch(src: str, arch: str) -> str:
    """The architecture ``src`` is compiled for: ``arch``, or its arch-specific form (``sm_90a``)
    where the code uses instructions only that has: ``target_arch("...wgmma.mma_async...", "sm_90")
    == "sm_90a"``. A cubin for sm_90a loads on an sm_90 GPU."""
    if arch == "sm_90" and any(i in src for i in ARCH_SPECIFIC):
        return "sm_90a"
    return arch


def compile_cuda(src: str, arch: str = DEFAULT_ARCH, use_cache: bool = True, fmt: str = "cubin") -> bytes:
    """Compile CUDA C to a cubin for ``arch`` (``"sm_90"``; ``sm_90a`` where the code needs it,
    :func:`target_arch`), or with ``fmt="ptx"`` to PTX text for that architecture's virtual one
    (what ``CUDAModule.save("x.ptx")`` writes; the driver compiles it for the GPU it is loaded on)."""
    if fmt not in ("cubin", "ptx"):
        raise ValueError(f"compile_cuda: fmt must be 'cubin' or 'ptx', got {fmt!r}")
    nvcc = find_nvcc()
    if nvcc is None:
        raise CUDACompileError("nvcc was not found (PATH, CUDA_HOME, /usr/local/cuda): it is needed to "
                               "compile CUDA kernels; install the CUDA toolkit")
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise CUDACompileError(f"the CUDA architecture must look like 'sm_90', got {arch!r}")
    arch = target_arch(src, arch)
    key = hashlib.sha256("\0".join([src, arch, nvcc_version(nvcc), " ".join(NVCC_FLAGS)]).encode()).hexdigest()
    path = os.path.join(cache_dir(), key[:2], key + "." + fmt)
    if use_cache and os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    tmp = owned_temp_dir("tilecraft_nvcc_")      # a killed run's folder goes at the next start
    try:
        cu = os.path.join(tmp, "kernel.cu")
        out = os.path.join(tmp, "kernel." + fmt)
        with open(cu, "w") as f:
            f.write(src)
        # sm_90a (wgmma, setmaxnreg) through -gencode: the -arch=sm_90a shorthand of some nvcc
        # versions also runs a plain sm_90 pass, which rejects those instructions
        arch_flag = (f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith("a") and fmt == "cubin"
                     else f"-arch={arch}")
        cmd = [nvcc, "-" + fmt, arch_flag, *NVCC_FLAGS, "-o", out, cu]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise CUDACompileError(explain_errors(p.stderr, src, " ".join(cmd)))
        with open(out, "rb") as f:
            cubin = f.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if use_cache:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp_path = f"{path}.{os.getpid()}.tmp"
            with open(tmp_path, "wb") as f:
                f.write(cubin)
            os.replace(tmp_path, path)         # atomic: parallel builders never see half a file
        except OSError:
            pass
    return cubin


def explain_errors(stderr: str, src: str, cmd: str, context: int = 2) -> str:
    """nvcc's messages, each followed by the generated lines it points at."""
    lines = src.splitlines()
    out = [f"nvcc failed ({cmd}):"]
    shown = set()
    for msg in stderr.strip().splitlines():
        out.append("  " + msg)
        m = re.search(r"\((\d+)\): (error|warning)", msg)
        if m and m.group(2) == "error":
            n = int(m.group(1))
            if n in shown:
                continue
            shown.add(n)
            for k in range(max(1, n - context), min(len(lines), n + context) + 1):
                mark = ">>" if k == n else "  "
                out.append(f"    {mark} {k:5d} | {lines[k - 1]}")
    return "\n".join(out)
