"""Bound checks in generated CPU code (``PassContext(config={"tir.instrument_bound_checkers": True})``).

With the option on, every load and store the LLVM backend emits is preceded by a check of its
element offset against the buffer's extent (the product of its shape: an argument's shape as
passed at run time, an allocation's size), as TVM's ``instrument_bound_checkers`` does on
flattened buffers. An offset outside ``[0, extent)`` is a failure point of
:mod:`~tilecraft.codegen.llvm_status`: the function returns ``STATUS_OUT_OF_BOUNDS`` and Python
raises :class:`~tilecraft.runtime.status.KernelIndexError` with the message

    index 8 out of bounds for buffer 'A' of extent 8 in function 'f' (a load; A has shape (n,))

before any memory outside the buffer is touched. Only what runs is checked: the side of a lazy
select that is not taken is not evaluated, and a masked vector access checks the lanes it
touches. A vector access checks its first and last lane (contiguous) or every lane (gather,
scatter). Being offsets into the flattened buffer, ``A[i, j]`` with ``j`` one past its row is
caught only where it leaves the whole buffer; ``lower``'s static check (``check_indices``) finds
such reads in constant dimensions. Off by default: the checks cost a compare and a branch per
access.
"""
from __future__ import annotations

from ..runtime.status import STATUS_OUT_OF_BOUNDS
from .llvm_status import printf_escape


class BoundChecks:
    """The bound-check methods of :class:`~tilecraft.codegen.llvm.LLVMCodegen` (a mixin); they
    use its ``op``/``declare``/``size_i64``/``fail_if`` and ``func_name``."""

    def buffer_extent(self, buf) -> str:
        """The number of elements of ``buf``, as an i64 value (computed in 64 bits)."""
        n = "1"
        for d in buf.shape:
            v = self.size_i64(d)
            n = v if n == "1" else self.op(f"mul i64 {n}, {v}")
        return n

    def _bounds_message(self, buf, store: bool) -> str:
        shape = ", ".join(str(d) for d in buf.shape) + ("," if len(buf.shape) == 1 else "")
        name = printf_escape(buf.name)
        return (f"index %lld out of bounds for buffer '{name}' of extent %lld in function "
                f"'{printf_escape(self.func_name)}' ({'a store' if store else 'a load'}; "
                f"{name} has shape ({printf_escape(shape)}))")

    def check_contiguous(self, buf, first: str, lanes: int, store: bool) -> None:
        """Offsets ``first .. first + lanes - 1`` (i64) must lie in ``buf``; under a vector mask
        only the lanes it selects."""
        if lanes > 1 and self.mask is not None:
            iota = ", ".join(f"i64 {k}" for k in range(lanes))
            vec = self.op(f"add <{lanes} x i64> {self.splat_i64(first, lanes)}, <{iota}>")
            return self.check_lanes(buf, vec, lanes, self.mask, store)
        ext = self.buffer_extent(buf)
        bad = self.op(f"icmp uge i64 {first}, {ext}")         # unsigned: negative offsets too
        idx = first
        if lanes > 1:
            last = self.op(f"add i64 {first}, {lanes - 1}")
            bad_last = self.op(f"icmp uge i64 {last}, {ext}")
            idx = self.op(f"select i1 {bad}, i64 {first}, i64 {last}")
            bad = self.op(f"or i1 {bad}, {bad_last}")
        self.fail_if(bad, STATUS_OUT_OF_BOUNDS, self._bounds_message(buf, store), [("i64", idx), ("i64", ext)])

    def check_lanes(self, buf, vec: str, lanes: int, mask: str | None, store: bool) -> None:
        """Every lane of the ``<lanes x i64>`` offsets ``vec`` (where ``mask`` holds) must lie in
        ``buf``; the message names the first lane that does not."""
        ext = self.buffer_extent(buf)
        bad = self.op(f"icmp uge <{lanes} x i64> {vec}, {self.splat_i64(ext, lanes)}")
        if mask is not None:
            bad = self.op(f"and <{lanes} x i1> {bad}, {mask}")
        bits = self.op(f"bitcast <{lanes} x i1> {bad} to i{lanes}")
        anyl = self.op(f"icmp ne i{lanes} {bits}, 0")
        self.declare(f"llvm.cttz.i{lanes}", f"declare i{lanes} @llvm.cttz.i{lanes}(i{lanes}, i1)")
        lane = self.op(f"call i{lanes} @llvm.cttz.i{lanes}(i{lanes} {bits}, i1 false)")
        idx = self.op(f"extractelement <{lanes} x i64> {vec}, i{lanes} {lane}")
        self.fail_if(anyl, STATUS_OUT_OF_BOUNDS, self._bounds_message(buf, store), [("i64", idx), ("i64", ext)])

    def splat_i64(self, v: str, lanes: int) -> str:
        one = self.op(f"insertelement <{lanes} x i64> poison, i64 {v}, i64 0")
        return self.op(f"shufflevector <{lanes} x i64> {one}, <{lanes} x i64> poison, <{lanes} x i32> zeroinitializer")
