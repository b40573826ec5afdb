"""``tilecraft.nd``: ``array(np_array, dev)``, ``empty(shape, dtype, dev)`` and :class:`NDArray`."""
from .ndarray import NDArray, array, empty

__all__ = ["NDArray", "array", "empty"]
