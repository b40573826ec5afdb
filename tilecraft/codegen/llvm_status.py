"""Failure returns in generated CPU code: "write a message, free what was allocated, return a status".

Generated entry points return an ``int32_t`` status (codes and Python errors in
:mod:`tilecraft.runtime.status`). A failure point is one call of :meth:`StatusEmitter.fail_if`
in the code generator::

    null = self.op(f"icmp eq ptr {p}, null")
    self.fail_if(null, STATUS_OUT_OF_MEMORY,
                 "out of memory: could not allocate %lld bytes for buffer 'B' in function 'f'",
                 [("i64", nbytes)])

which emits a cold branch that formats the message with ``snprintf`` into the calling thread's
error buffer (``ptr tilecraft_error_buffer()``, a hidden symbol), frees the heap buffers the
current LLVM function holds at that point, and returns the status. Inside a parallel loop the
outlined body returns the status instead; the thread that fails first records it and its
buffer's address in the loop's closure, and the function that started the loop copies the
message into its own thread's buffer and returns the status (see ``LLVMCodegen.parallel_for``).

Where ``tilecraft_error_buffer`` comes from:

* JIT-compiled modules: :func:`jit_error_support` compiles, once per process, a small module that
  keeps one 512-byte buffer per thread under a pthread key (MCJIT cannot allocate thread-local
  storage) and registers the symbol with LLVM; its ``tilecraft_last_error`` is the getter.
* exported libraries: the manifest object (:func:`export_error_support_ir`) defines a
  ``thread_local`` buffer, the hidden ``tilecraft_error_buffer`` and the public getter
  ``<name>_last_error``.

Modules without failure points reference none of this.
"""
from __future__ import annotations

import threading

from ..runtime.status import MESSAGE_BYTES

ERROR_BUFFER_SYMBOL = "tilecraft_error_buffer"
JIT_GETTER_SYMBOL = "tilecraft_last_error"
_BUFFER_DECL = f"declare hidden ptr @{ERROR_BUFFER_SYMBOL}()"


def c_string_constant(text: str) -> tuple[str, int]:
    """``text`` as an LLVM ``c"..."`` literal with its NUL, and its length in bytes."""
    data = text.encode("utf-8") + b"\0"
    body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
    return f'c"{body}"', len(data)


def printf_escape(text: str) -> str:
    """A user-chosen name made safe to embed in a printf format (``%`` doubled)."""
    return text.replace("%", "%%")


class StatusEmitter:
    """The failure-point methods of :class:`~tilecraft.codegen.llvm.LLVMCodegen` (a mixin).

    Relies on the codegen's ``op``/``emit``/``label``/``start_block``/``declare`` and on the
    current function's ``heap`` (pointers to free on failure, innermost last) and ``can_fail``.
    """

    def fail_if(self, cond: str, status: int, fmt: str, args=()) -> None:
        """If the ``i1`` value ``cond`` is true: write ``fmt`` (a C printf format; ``args`` are
        ``(llvm type, value)`` pairs such as ``("i64", "%v12")``) to the thread's error buffer,
        free this function's live heap buffers and return ``status``. Code emitted afterwards
        runs where ``cond`` is false.

        >>> # self.fail_if(self.op(f"icmp eq ptr {p}, null"), STATUS_OUT_OF_MEMORY, "out of memory ...")
        """
        self.declare("llvm.expect.i1", "declare i1 @llvm.expect.i1(i1, i1)")
        cold = self.op(f"call i1 @llvm.expect.i1(i1 {cond}, i1 false)")
        fail_l, ok_l = self.label(), self.label()
        self.emit(f"br i1 {cold}, label %{fail_l}, label %{ok_l}")
        self.start_block(fail_l)
        buffer = self.error_buffer()
        fmt_global = self.format_constant(fmt)
        self.declare("snprintf", "declare i32 @snprintf(ptr, i64, ptr, ...)")
        extra = "".join(f", {ty} {v}" for ty, v in args)
        self.op(f"call i32 (ptr, i64, ptr, ...) @snprintf(ptr {buffer}, i64 {MESSAGE_BYTES}, "
                f"ptr {fmt_global}{extra})")
        self.return_failure(str(status))
        self.start_block(ok_l)

    def fail_with_status(self, status: str, message: str) -> None:
        """If the ``i32`` value ``status`` is non-zero, copy the message at ``message`` (another
        thread's error buffer) into this thread's and return ``status`` (after a parallel loop)."""
        bad = self.op(f"icmp ne i32 {status}, 0")
        self.declare("llvm.expect.i1", "declare i1 @llvm.expect.i1(i1, i1)")
        cold = self.op(f"call i1 @llvm.expect.i1(i1 {bad}, i1 false)")
        fail_l, ok_l = self.label(), self.label()
        self.emit(f"br i1 {cold}, label %{fail_l}, label %{ok_l}")
        self.start_block(fail_l)
        buffer = self.error_buffer()
        self.declare("llvm.memmove", "declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)")
        self.emit(f"call void @llvm.memmove.p0.p0.i64(ptr {buffer}, ptr {message}, i64 {MESSAGE_BYTES}, i1 false)")
        self.return_failure(status)
        self.start_block(ok_l)

    def record_first_failure(self, status: str, status_ptr: str, message_ptr: str) -> None:
        """In a parallel loop's thread entry: if the body returned a non-zero ``status`` and no
        thread has failed yet, store the status and this thread's error buffer in the closure."""
        bad = self.op(f"icmp ne i32 {status}, 0")
        record_l, message_l, done_l = self.label(), self.label(), self.label()
        self.emit(f"br i1 {bad}, label %{record_l}, label %{done_l}")
        self.start_block(record_l)
        pair = self.op(f"cmpxchg ptr {status_ptr}, i32 0, i32 {status} monotonic monotonic")
        first = self.op(f"extractvalue {{ i32, i1 }} {pair}, 1")
        self.emit(f"br i1 {first}, label %{message_l}, label %{done_l}")
        self.start_block(message_l)
        self.emit(f"store ptr {self.error_buffer()}, ptr {message_ptr}")
        self.emit(f"br label %{done_l}")
        self.start_block(done_l)

    def return_failure(self, status: str) -> None:
        """Free this function's live heap buffers (innermost first) and return ``status``."""
        self.fn.can_fail = True
        for p in reversed(self.fn.heap):
            self.emit(f"call void @free(ptr {p})")
        self.emit(f"ret i32 {status}")

    def error_buffer(self) -> str:
        """This thread's error buffer (a call; only on failure paths)."""
        self.declare(ERROR_BUFFER_SYMBOL, _BUFFER_DECL)
        return self.op(f"call ptr @{ERROR_BUFFER_SYMBOL}()")

    def format_constant(self, fmt: str) -> str:
        """A private global holding ``fmt`` (one per distinct text in the module)."""
        literal, size = c_string_constant(fmt)
        name = f"@.tc_msg{len(self.declares)}"
        key = "format " + literal
        self.declare(key, f"{name} = private unnamed_addr constant [{size} x i8] {literal}, align 1")
        return self.declares[key].split(" ", 1)[0]


# ------------------------------------------------------------------------------------------------
# Where the buffer lives

_JIT_SUPPORT = f"""
@key = internal global i32 0, align 4
@once = internal global i32 0, align 4
@fallback = internal global [{MESSAGE_BYTES} x i8] zeroinitializer, align 16
declare i32 @pthread_once(ptr, ptr)
declare i32 @pthread_key_create(ptr, ptr)
declare ptr @pthread_getspecific(i32)
declare i32 @pthread_setspecific(i32, ptr)
declare ptr @calloc(i64, i64)
declare void @free(ptr)

define internal void @make_key() {{
entry:
  %r = call i32 @pthread_key_create(ptr @key, ptr @free)
  ret void
}}

define ptr @{JIT_GETTER_SYMBOL}() {{
entry:
  %r = call i32 @pthread_once(ptr @once, ptr @make_key)
  %k = load i32, ptr @key, align 4
  %p = call ptr @pthread_getspecific(i32 %k)
  %none = icmp eq ptr %p, null
  br i1 %none, label %make, label %done
make:
  %q = call ptr @calloc(i64 1, i64 {MESSAGE_BYTES})
  %failed = icmp eq ptr %q, null
  br i1 %failed, label %shared, label %keep
keep:
  %s = call i32 @pthread_setspecific(i32 %k, ptr %q)
  ret ptr %q
shared:                     ; no memory for a buffer of its own: share one (messages may mix)
  ret ptr @fallback
done:
  ret ptr %p
}}
"""

_jit_lock = threading.Lock()
_jit_engine = None
_jit_getter = None


def jit_error_support(llvm, target_machine) -> int:
    """Compile the per-process error buffer (once), make ``tilecraft_error_buffer`` resolve to it
    in every JIT-compiled module, and return the address of ``char *tilecraft_last_error(void)``
    (this thread's buffer)."""
    global _jit_engine, _jit_getter
    with _jit_lock:
        if _jit_engine is None:
            mod = llvm.parse_assembly(_JIT_SUPPORT)
            engine = llvm.create_mcjit_compiler(mod, target_machine)
            engine.finalize_object()
            _jit_getter = engine.get_function_address(JIT_GETTER_SYMBOL)
            llvm.add_symbol(ERROR_BUFFER_SYMBOL, _jit_getter)
            _jit_engine = engine
        return _jit_getter


def jit_error_message() -> bytes | None:
    """This thread's error message from JIT-compiled code (None before any module was JIT-ed)."""
    if _jit_getter is None:
        return None
    import ctypes
    return ctypes.CFUNCTYPE(ctypes.c_char_p)(_jit_getter)()


def getter_name(library_stem: str) -> str:
    """``ops`` (of ``libops.so``) → ``ops_last_error`` (a C identifier)."""
    import re
    name = re.sub(r"\W", "_", library_stem)
    return ("_" + name if name[:1].isdigit() else name) + "_last_error"


def export_error_support_ir(getter: str) -> str:
    """LLVM IR for an exported library: a thread-local buffer, the hidden
    ``tilecraft_error_buffer`` the code calls, and the public ``const char *<getter>(void)``."""
    return (f"@tilecraft_error_message = internal thread_local global [{MESSAGE_BYTES} x i8] "
            "zeroinitializer, align 16\n"
            f"define hidden ptr @{ERROR_BUFFER_SYMBOL}() {{\n  ret ptr @tilecraft_error_message\n}}\n"
            f"define ptr @{getter}() {{\n  ret ptr @tilecraft_error_message\n}}\n")
