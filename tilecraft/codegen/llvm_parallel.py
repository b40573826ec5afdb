"""Parallel loops in the LLVM backend: a ``parallel`` ``For`` runs on libgomp's thread pool.

The loop is outlined into a function that each thread of ``GOMP_parallel`` runs on its static
chunk of iterations (see :meth:`ParallelLoops.parallel_for`), or, with
``pragma(ax, "parallel_dynamic", chunk)``, on chunks of ``chunk`` iterations handed out as threads
become free (libgomp's dynamic schedule: rows of uneven cost, such as a sparse matrix's, balance
without knowing their cost); parallel loops nested in a parallel loop run serially. The thread count is read from the module's global ``tilecraft_num_threads``
(``THREADS_GLOBAL``), which the runtime sets (``tc.set_num_threads``); 0 lets libgomp choose.
"""
from __future__ import annotations

from ..ir.expr import AccessPtr, BufferLoad, SizeVar, Var
from ..ir.functor import post_order_visit
from ..ir.stmt import Allocate, BufferStore, For
from .llvm_types import ll_type

THREADS_GLOBAL = "tilecraft_num_threads"


class ParallelLoops:
    """The parallel-loop methods of :class:`~tilecraft.codegen.llvm.LLVMCodegen` (a mixin)."""

    def parallel_for(self, s: For) -> None:
        """Run the loop on libgomp's thread pool.

        Three pieces: the caller packs the loop bounds and every value the body uses into a
        closure struct and calls ``GOMP_parallel(@f_parK, closure, threads, 0)``; ``f_parK`` (run by
        each thread) unpacks it, picks its static chunk and calls ``f_parK_body(start, stop, ...)``,
        whose buffer parameters are ``noalias`` so that, once inlined, loops in the body vectorize
        without runtime alias checks.
        """
        self.has_parallel = True
        for name, decl in (("GOMP_parallel", "declare void @GOMP_parallel(ptr, ptr, i32, i32)"),
                           ("omp_get_thread_num", "declare i32 @omp_get_thread_num()"),
                           ("omp_get_num_threads", "declare i32 @omp_get_num_threads()")):
            self.declare(name, decl)
        ity = ll_type(s.loop_var.dtype)
        begin, extent = self.loop_bounds(s)
        # one field per distinct value: two buffers resolving to one pointer must not both be noalias
        fields, keys_of = [], {}
        for key, ty in self.free_values(s.body):
            value = self.env[key]
            if value not in keys_of:
                keys_of[value] = []
                fields.append((value, ty))
            keys_of[value].append(key)
        outlined = f"{self.fn.name}_par{self.n_outlined}"
        self.n_outlined += 1

        saved = (self.fn, self.env, self.mask)
        self.in_parallel = True
        # the body: parameters (start, stop, fields...); returns a status if it has failure points
        self.fn, self.env, self.mask = self.new_function(outlined + "_body"), {}, None
        params = [f"{ity} %start", f"{ity} %stop"]
        for k, (value, ty) in enumerate(fields):
            name = f"%c{k}"
            params.append(f"{ty} noalias {name}" if ty == "ptr" else f"{ty} {name}")
            for key in keys_of[value]:
                self.env[key] = name
        self.loop(s.loop_var, "%start", "%stop", lambda: self.stmt(s.body))
        can_fail = self.fn.can_fail
        self.finish_function(f"define internal {'i32' if can_fail else 'void'} @{outlined}_body"
                             f"({', '.join(params)}) #0", "ret i32 0" if can_fail else "ret void")
        self.fn, self.env, self.mask = saved
        self.in_parallel = False

        # the caller: closure = (begin, extent, fields..., [status, message of the first failure])
        all_fields = [(begin, ity), (extent, ity)] + fields
        n_in = len(all_fields)
        if can_fail:
            all_fields += [("0", "i32"), ("null", "ptr")]
        sty = "{" + ", ".join(ty for _, ty in all_fields) + "}"
        closure = self.alloca(sty, 8)
        for k, (value, ty) in enumerate(all_fields):
            p = self.op(f"getelementptr inbounds {sty}, ptr {closure}, i32 0, i32 {k}")
            self.emit(f"store {ty} {value}, ptr {p}")
        # never more threads than iterations; 0 (the exported library's default) lets libgomp choose
        nt = self.op(f"load i32, ptr @{THREADS_GLOBAL}, align 4")
        cap = extent
        if ity != "i32":
            cap = self.op(f"call {ity} @llvm.smin.{ity}({ity} {extent}, {ity} 1073741824)")
            cap = self.op(f"trunc {ity} {cap} to i32")
        cap = self.op(f"call i32 @llvm.smax.i32(i32 {cap}, i32 1)")
        capped = self.op(f"call i32 @llvm.smin.i32(i32 {nt}, i32 {cap})")
        positive = self.op(f"icmp sgt i32 {nt}, 0")
        nt = self.op(f"select i1 {positive}, i32 {capped}, i32 0")
        self.emit(f"call void @GOMP_parallel(ptr @{outlined}, ptr {closure}, i32 {nt}, i32 0)")
        if can_fail:
            status_p = self.op(f"getelementptr inbounds {sty}, ptr {closure}, i32 0, i32 {n_in}")
            message_p = self.op(f"getelementptr inbounds {sty}, ptr {closure}, i32 0, i32 {n_in + 1}")
            status = self.op(f"load i32, ptr {status_p}")
            self.fail_with_status(status, self.op(f"load ptr, ptr {message_p}"))

        # the thread entry: unpack, take this thread's chunk, call the body
        saved = (self.fn, self.env)
        self.fn, self.env = self.new_function(outlined), {}
        vals = []
        for k, (_, ty) in enumerate(all_fields[:n_in]):
            p = self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {k}")
            vals.append(self.op(f"load {ty}, ptr {p}"))
        lo, ext = vals[0], vals[1]
        args = [f"{ty} {v}" for v, (_, ty) in zip(vals[2:], fields)]
        dynamic = s.annotation("pragma_parallel_dynamic")
        if dynamic is not None:
            self._dynamic_chunks(ity, lo, ext, max(1, int(dynamic)), outlined, args, can_fail, sty, n_in)
            self.finish_function(f"define internal void @{outlined}(ptr noalias %closure) #0", "ret void")
            self.fn, self.env = saved
            return
        tid = self.op("call i32 @omp_get_thread_num()")
        nth = self.op("call i32 @omp_get_num_threads()")
        if ity != "i32":
            tid, nth = self.op(f"sext i32 {tid} to {ity}"), self.op(f"sext i32 {nth} to {ity}")
        chunk = self.op(f"add nsw {ity} {ext}, {nth}")
        chunk = self.op(f"sub nsw {ity} {chunk}, 1")
        chunk = self.op(f"sdiv {ity} {chunk}, {nth}")
        start = self.op(f"mul nsw {ity} {tid}, {chunk}")
        stop = self.op(f"add nsw {ity} {start}, {chunk}")
        stop = self.op(f"call {ity} @llvm.smin.{ity}({ity} {stop}, {ity} {ext})")
        start = self.op(f"add nsw {ity} {start}, {lo}")
        stop = self.op(f"add nsw {ity} {stop}, {lo}")
        args = [f"{ity} {start}", f"{ity} {stop}"] + args
        if can_fail:
            rc = self.op(f"call i32 @{outlined}_body({', '.join(args)})")
            self.record_first_failure(
                rc, self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {n_in}"),
                self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {n_in + 1}"))
        else:
            self.emit(f"call void @{outlined}_body({', '.join(args)})")
        self.finish_function(f"define internal void @{outlined}(ptr noalias %closure) #0", "ret void")
        self.fn, self.env = saved

    def _dynamic_chunks(self, ity, lo, ext, chunk, outlined, args, can_fail, sty, n_in) -> None:
        """The thread entry of a ``parallel_dynamic`` loop: take chunks of ``chunk`` iterations from
        libgomp (``GOMP_loop_dynamic_start``/``_next``) until none is left, calling the body on each."""
        for name, decl in (("GOMP_loop_dynamic_start",
                            "declare zeroext i1 @GOMP_loop_dynamic_start(i64, i64, i64, i64, ptr, ptr)"),
                           ("GOMP_loop_dynamic_next", "declare zeroext i1 @GOMP_loop_dynamic_next(ptr, ptr)"),
                           ("GOMP_loop_end_nowait", "declare void @GOMP_loop_end_nowait()")):
            self.declare(name, decl)
        wide = (lambda v: self.op(f"sext {ity} {v} to i64")) if ity != "i64" else (lambda v: v)
        begin = wide(lo)
        end = self.op(f"add nsw i64 {begin}, {wide(ext)}")
        istart, iend = self.alloca("i64", 8), self.alloca("i64", 8)
        got = self.op(f"call zeroext i1 @GOMP_loop_dynamic_start(i64 {begin}, i64 {end}, i64 1, i64 {chunk}, "
                      f"ptr {istart}, ptr {iend})")
        body, done = self.label(), self.label()
        self.emit(f"br i1 {got}, label %{body}, label %{done}")
        self.start_block(body)
        narrow = (lambda v: self.op(f"trunc i64 {v} to {ity}")) if ity != "i64" else (lambda v: v)
        start = narrow(self.op(f"load i64, ptr {istart}"))
        stop = narrow(self.op(f"load i64, ptr {iend}"))
        call_args = ", ".join([f"{ity} {start}", f"{ity} {stop}"] + args)
        if can_fail:
            rc = self.op(f"call i32 @{outlined}_body({call_args})")
            self.record_first_failure(
                rc, self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {n_in}"),
                self.op(f"getelementptr inbounds {sty}, ptr %closure, i32 0, i32 {n_in + 1}"))
        else:
            self.emit(f"call void @{outlined}_body({call_args})")
        more = self.op(f"call zeroext i1 @GOMP_loop_dynamic_next(ptr {istart}, ptr {iend})")
        self.emit(f"br i1 {more}, label %{body}, label %{done}")
        self.start_block(done)
        self.emit("call void @GOMP_loop_end_nowait()")

    def free_values(self, body) -> list:
        """(key, LLVM type) of every bound variable and buffer pointer that ``body`` uses."""
        seen: dict = {}

        def visit(n):
            t = type(n)
            if t is Var or t is SizeVar:
                if n in self.env and n not in seen:
                    seen[n] = ll_type(n.dtype) if n.dtype != "handle" else "ptr"
            elif t is BufferLoad or t is BufferStore or t is AccessPtr:
                self._capture_buffer(n.buffer, seen)
                if self.bound_checks:           # the checks read the buffer's extent
                    for d in n.buffer.shape:
                        post_order_visit(d, visit)
            elif t is Allocate:
                for d in n.buffer.shape:
                    if not isinstance(d, int):
                        post_order_visit(d, visit)
        post_order_visit(body, visit)
        return list(seen.items())

    def _capture_buffer(self, buf, seen) -> None:
        if buf.data in seen:
            return
        if buf.data in self.env:
            seen[buf.data] = "ptr"
        elif buf.name in self.buf_by_name:
            self.env[buf.data] = self.buf_by_name[buf.name]
            seen[buf.data] = "ptr"
