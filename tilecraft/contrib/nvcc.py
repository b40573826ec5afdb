"""TVM's ``tvm.contrib.nvcc`` names that scripts use to ask about the GPU.

>>> have_tensorcore("7.0"), have_tensorcore("6.1")
(True, False)
"""
from __future__ import annotations


def have_tensorcore(compute_version: str | None = None, target=None) -> bool:
    """Whether a GPU of ``compute_version`` (``"9.0"``; the current GPU's when None, as
    ``tilecraft.cuda(0).compute_version``) has tensor cores (compute capability 7.0 or newer).
    Without a GPU and without a version: False. ``target`` (``"cuda -arch=sm_90"``) gives the
    version when ``compute_version`` is None and there is no GPU."""
    if compute_version is None:
        from ..runtime.device import cuda
        compute_version = cuda(0).compute_version
    if compute_version is None and target is not None:
        arch = getattr(target, "attrs", {}).get("arch") if not isinstance(target, str) else None
        if isinstance(target, str) and "-arch=sm_" in target:
            arch = target.split("-arch=")[1].split()[0]
        if arch:
            digits = arch[3:].rstrip("a")
            compute_version = f"{digits[:-1]}.{digits[-1]}"
    if compute_version is None:
        return False
    major = int(str(compute_version).split(".")[0])
    return major >= 7
