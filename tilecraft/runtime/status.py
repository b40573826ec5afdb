"""What a compiled CPU function returns, and the Python errors made of it.

Every generated entry point returns an ``int32_t`` status: 0 on success, else one of the codes
below, after writing a message (NUL-terminated, at most :data:`MESSAGE_BYTES` bytes with the NUL)
into the calling thread's error buffer. The message stays there until that thread's next failure.
A library written by ``export_library`` declares a getter for it in its header
(``const char *<name>_last_error(void)``); JIT-compiled modules share one per-process getter.
:meth:`tilecraft.runtime.Function.__call__` turns a non-zero status into :class:`KernelError`
(or its subclasses) carrying that message.

>>> raise_for_status("f", STATUS_OUT_OF_MEMORY, b"out of memory: could not allocate 64 bytes ...")
Traceback (most recent call last):
...
tilecraft.runtime.status.KernelMemoryError: out of memory: could not allocate 64 bytes ...
"""
from __future__ import annotations
from ..error import TVMError

STATUS_OK = 0
STATUS_OUT_OF_MEMORY = 1        # aligned_alloc returned NULL for a local buffer
STATUS_OUT_OF_BOUNDS = 2        # an index outside its buffer (bounds-checked builds)
STATUS_PACKED_FUNC = 3          # a packed Python function (te.extern, call_packed) raised

# code -> (C macro, meaning); the exported header defines the macros from this table
STATUS_CODES = {
    STATUS_OK: ("TILECRAFT_OK", "success"),
    STATUS_OUT_OF_MEMORY: ("TILECRAFT_ERR_OUT_OF_MEMORY", "out of memory"),
    STATUS_OUT_OF_BOUNDS: ("TILECRAFT_ERR_OUT_OF_BOUNDS", "index out of bounds"),
    STATUS_PACKED_FUNC: ("TILECRAFT_ERR_PACKED_FUNC", "a packed function failed"),
}

MESSAGE_BYTES = 512


class KernelError(TVMError):
    """A compiled function returned a non-zero status; ``status`` is the code, ``function`` its
    name and the message what the generated code wrote (which function, buffer, sizes)."""

    def __init__(self, function: str, status: int, message: str):
        self.function, self.status = function, status
        super().__init__(message)


class KernelMemoryError(KernelError, MemoryError):
    """A local buffer could not be allocated (``aligned_alloc`` returned NULL)."""


class KernelIndexError(KernelError, IndexError):
    """A bounds-checked build found an index outside its buffer."""


_ERROR_CLASSES = {STATUS_OUT_OF_MEMORY: KernelMemoryError, STATUS_OUT_OF_BOUNDS: KernelIndexError}


def raise_for_status(function: str, status: int, message: bytes | None) -> None:
    """Raise the error for a non-zero ``status``; ``message`` is the error buffer's content (None
    where the module has no getter: a library written before messages existed)."""
    text = message.decode("utf-8", "replace") if message else ""
    if not text:
        meaning = STATUS_CODES.get(status, (None, "an unknown failure"))[1]
        text = f"{function} returned the error code {status} ({meaning}) without a message"
    raise _ERROR_CLASSES.get(status, KernelError)(function, status, text)
