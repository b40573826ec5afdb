"""Arrays in GPU memory: ``array(np_array, tilecraft.cuda(0))``, ``empty(shape, dtype, dev)``.

A :class:`CUDANDArray` owns a device allocation (through pycuda, imported on first use) and
exposes ``__cuda_array_interface__``, so PyTorch/CuPy can read it without a copy
(``torch.as_tensor(a, device="cuda")``); CUDA kernels built by tilecraft accept it and any other
object with that interface.

>>> # a = array(np.random.rand(1024).astype("float32"), tilecraft.cuda(0)); a.numpy()
"""
from __future__ import annotations

import numpy as np

from .device import Device


class CUDANDArray:
    """A C-contiguous array on a CUDA device."""

    __slots__ = ("_alloc", "shape", "_dtype", "device", "__weakref__")

    def __init__(self, alloc, shape: tuple, dtype, dev: Device):
        self._alloc = alloc
        self.shape = tuple(int(s) for s in shape)
        self._dtype = np.dtype(dtype)
        self.device = dev

    @property
    def dtype(self) -> str:
        return self._dtype.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def data_ptr(self) -> int:
        return int(self._alloc) if self._alloc is not None else 0

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self._dtype.str, "data": (self.data_ptr, False),
                "strides": None, "version": 3}

    def numpy(self) -> np.ndarray:
        """Copy the contents to the host."""
        from .cuda_runtime import driver
        out = np.empty(self.shape, self._dtype)
        if self.nbytes:
            driver().memcpy_dtoh(out, self.data_ptr)
        return out

    asnumpy = numpy

    def copyfrom(self, source) -> "CUDANDArray":
        """Overwrite the contents from a host array of the same shape and dtype."""
        from .cuda_runtime import driver
        src = _contiguous(source.numpy() if isinstance(source, CUDANDArray) else source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: shape {src.shape} does not match the array's {self.shape}")
        if src.dtype != self._dtype:
            raise TypeError(f"copyfrom: dtype {src.dtype} does not match the array's {self.dtype}")
        if self.nbytes:
            driver().memcpy_htod(self.data_ptr, src)
        return self

    def __repr__(self) -> str:
        return f"<tilecraft.CUDANDArray shape={self.shape}, dtype={self.dtype}, {self.device}>"


def _contiguous(x) -> np.ndarray:
    """``x`` as a C-contiguous numpy array of its own shape: ``np.ascontiguousarray`` alone makes
    a 0-d array (a reduction's scalar output) 1-d."""
    x = np.asarray(x)
    return np.ascontiguousarray(x).reshape(x.shape)


def empty(shape, dtype="float32", device: Device | None = None) -> CUDANDArray:
    """An uninitialised array in GPU memory."""
    from .cuda_runtime import context, driver
    from .device import cuda
    dev = device or cuda(0)
    context(dev.index)
    if isinstance(shape, int):
        shape = (shape,)
    a = CUDANDArray(None, shape, dtype, dev)
    a._alloc = driver().mem_alloc(max(a.nbytes, 1))
    return a


def array(arr, device: Device | None = None, dtype=None) -> CUDANDArray:
    """Copy a host array (numpy, list, or a tilecraft array) to the GPU."""
    if hasattr(arr, "numpy") and not isinstance(arr, np.ndarray):
        arr = arr.numpy()
    src = _contiguous(np.asarray(arr, dtype=dtype))
    out = empty(src.shape, src.dtype, device)
    return out.copyfrom(src)
