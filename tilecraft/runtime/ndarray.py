"""Arrays owned by the runtime: ``tilecraft.nd.array(np_array, dev)``, ``tilecraft.nd.empty``.

On the CPU an :class:`NDArray` wraps a C-contiguous numpy array whose data is 64-byte aligned
(so vector loads never straddle a cache line at the start of a row). Compiled functions also
accept plain numpy arrays.

>>> import numpy as np
>>> a = array(np.arange(4, dtype="float32"))
>>> a.shape, a.dtype, a.numpy().tolist()
((4,), 'float32', [0.0, 1.0, 2.0, 3.0])
"""
from __future__ import annotations

import numpy as np

from .device import Device, cpu

ALIGNMENT = 64


def _aligned_empty(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + ALIGNMENT, dtype=np.uint8)
    off = (-raw.ctypes.data) % ALIGNMENT
    return raw[off:off + n].view(dtype).reshape(shape)


def _check_device(dev) -> Device:
    if dev is None:
        return cpu(0)
    if not isinstance(dev, Device):
        raise TypeError(f"expected a tilecraft Device such as tilecraft.cpu(0), got {dev!r}")
    if dev.kind != "cpu":
        raise NotImplementedError(f"arrays on {dev} are created by the CUDA runtime; "
                                  "tilecraft.runtime.nd handles cpu arrays only")
    return dev


class NDArray:
    """A C-contiguous, 64-byte aligned array on a device (the CPU here)."""

    __slots__ = ("_array", "device")

    def __init__(self, arr: np.ndarray, dev: Device):
        self._array = arr
        self.device = dev

    @property
    def shape(self) -> tuple:
        return self._array.shape

    @property
    def dtype(self) -> str:
        return self._array.dtype.name

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def size(self) -> int:
        return self._array.size

    def numpy(self) -> np.ndarray:
        """A copy of the contents as a numpy array."""
        return self._array.copy()

    asnumpy = numpy

    def copyfrom(self, source) -> "NDArray":
        """Overwrite the contents from a numpy array (or NDArray) of the same shape and dtype."""
        src = source._array if isinstance(source, NDArray) else np.asarray(source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: shape {src.shape} does not match the array's {self.shape}")
        if src.dtype != self._array.dtype:
            raise TypeError(f"copyfrom: dtype {src.dtype} does not match the array's {self.dtype}")
        np.copyto(self._array, src)
        return self

    def copyto(self, target):
        """Copy into another NDArray, or to a new array on the device ``target``."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        return array(self._array, target)

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)

    def __repr__(self) -> str:
        return f"<tilecraft.NDArray shape={self.shape}, dtype={self.dtype}, {self.device}>\n{self._array!r}"


def array(arr, device: Device | None = None, dtype=None) -> NDArray:
    """Copy ``arr`` (numpy array, list, NDArray) into a new array on ``device`` (default cpu(0));
    on ``tilecraft.cuda(i)`` the copy is in GPU memory (needs pycuda and a GPU)."""
    if isinstance(device, Device) and device.kind == "cuda":
        from . import cuda_ndarray
        src = arr.numpy() if hasattr(arr, "numpy") and not isinstance(arr, np.ndarray) else arr
        return cuda_ndarray.array(src, device, dtype)
    dev = _check_device(device)
    src = arr._array if isinstance(arr, NDArray) else np.asarray(arr, dtype=dtype)
    if dtype is not None:
        src = src.astype(dtype, copy=False)
    out = _aligned_empty(src.shape, src.dtype)
    np.copyto(out, src)
    return NDArray(out, dev)


def empty(shape, dtype="float32", device: Device | None = None) -> NDArray:
    """An uninitialised array: ``nd.empty((1024, 1024), "float32", tilecraft.cpu(0))``."""
    if isinstance(device, Device) and device.kind == "cuda":
        from . import cuda_ndarray
        return cuda_ndarray.empty(shape, dtype, device)
    dev = _check_device(device)
    if isinstance(shape, int):
        shape = (shape,)
    return NDArray(_aligned_empty(shape, dtype), dev)
