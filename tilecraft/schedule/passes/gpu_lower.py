"""The GPU part of lowering, one pass per step, run by ``lower(..., target="cuda")``::

    split into kernels → per kernel: launch extents → cross-thread reductions
        → thread-loop unification → shared allocations hoisted → virtual threads
        → double buffering → vector indices → barriers → simplify → kernel parameters

Afterwards the function body is ``Allocate*(global workspace)`` around one
``AttrStmt("cuda_kernel", KernelInfo, ...)`` per kernel (see ``gpu_kernels.py``), which the CUDA
renderer (``tilecraft.codegen.cuda``) turns into ``__global__`` functions and the runtime launches
in order.
"""
from __future__ import annotations

from ...ir.expr import AccessPtr, BufferLoad, Const, Var
from ...ir.functor import post_order_visit
from ...ir.printer import stmt_str
from ...ir.simplify import simplify
from ...ir.stmt import Allocate, Buffer, BufferStore, For, ForKind, LetStmt, seq
from .gpu_barriers import insert_barriers
from .gpu_double_buffer import double_buffer
from .gpu_hoist_shared import hoist_shared_allocations
from .gpu_kernels import (GPULoweringError, KernelInfo, check_local_sizes, collect_launch, kernel_stmt,
                          split_kernels)
from .gpu_thread_reduce import lower_thread_reductions
from .gpu_unify_threads import unify_thread_loops
from .gpu_vector_index import canonicalize_vector_indices
from .gpu_vthread import inject_virtual_threads

__all__ = ["lower_for_gpu", "GPULoweringError", "KernelInfo", "kernels_of"]


def lower_for_gpu(body, params, func_name: str = "main", print_ir: bool = False):
    """Turn a lowered loop nest with thread bindings into kernels. The buffers of stages marked
    with ``double_buffer()`` come marked ``double_buffer_scope`` (``schedule_ops``)."""
    workspace, program = split_kernels(body, func_name)
    new = _lower_program(program, list(params), workspace, print_ir)
    for b in reversed(workspace):
        new = Allocate(b, new)
    return new


def _lower_program(program, params: list, workspace: list, print_ir: bool):
    """Each kernel through the per-kernel passes; a host loop stays a loop around its kernels,
    its variable a scalar parameter of the kernels that use it."""
    out = []
    for kind, a, b in program:
        if kind == "loop":
            inner = _lower_program(b, params + [a.loop_var], workspace, print_ir)
            out.append(For(a.loop_var, a.min, a.extent, a.kind, inner, a.thread_tag, a.annotations))
            continue
        name, stmt = a, b
        info = collect_launch(stmt, name)
        steps = [
            ("cross-thread reductions", lambda s: lower_thread_reductions(s, info)),
            ("thread-loop unification", lambda s: unify_thread_loops(s, info)),
            ("shared allocations hoisted", lambda s: hoist_shared_allocations(s, info)),
            ("virtual threads", inject_virtual_threads),
            ("double buffering", lambda s: double_buffer(s, info)),
            ("vector indices", canonicalize_vector_indices),
            ("barriers", lambda s: insert_barriers(s, info)),
            ("simplify", lambda s: simplify(s, _launch_bounds(info))),
        ]
        for what, fn in steps:
            stmt = fn(stmt)
            if print_ir:
                print(f"# ---- {name}: after {what} ----")
                print(stmt_str(stmt))
        check_local_sizes(stmt, info)
        info.params = kernel_params(stmt, params, workspace, info)
        out.append(kernel_stmt(info, stmt))
    return seq(*out)


def _launch_bounds(info: KernelInfo) -> dict:
    bounds = {}
    for tag, v in info.index_vars.items():
        e = info.extents[tag]
        if isinstance(e, int):
            bounds[v] = (0, e - 1)
        elif isinstance(e, Const):
            bounds[v] = (0, int(e.value) - 1)
    return bounds


def kernel_params(stmt, params, workspace, info: KernelInfo) -> list:
    """The global buffers and scalars a kernel uses, in the function's parameter order
    (then workspace buffers)."""
    used_bufs, used_vars, bound = set(), set(), set(info.index_vars.values())

    def f(n):
        if isinstance(n, (BufferLoad, BufferStore, AccessPtr)) and n.buffer.scope == "global":
            used_bufs.add(n.buffer)
        elif isinstance(n, Var) and n.dtype != "handle":
            used_vars.add(n)
        elif isinstance(n, For):
            bound.add(n.loop_var)
        elif isinstance(n, LetStmt):
            bound.add(n.var)
    post_order_visit(stmt, f)
    for e in info.grid:
        post_order_visit(e, f)
    out = [p for p in params if isinstance(p, Buffer) and p in used_bufs]
    out += [b for b in workspace if b in used_bufs]
    # sets, never lists: `v in [...]` compares Vars with `==`, which is an error between dtypes
    scalars = [p for p in params if isinstance(p, Var) and p in used_vars]
    for p in params:         # symbolic shapes of the buffers used, as the function has them
        if isinstance(p, Var) and p not in set(scalars) and any(p in _vars(d) for b in out for d in b.shape):
            scalars.append(p)
    free = used_vars - bound - set(scalars)
    if free:
        raise GPULoweringError(f"kernel {info.name} uses the variable(s) "
                               f"{', '.join(sorted(v.name for v in free))}, which are not parameters")
    return out + scalars


def _vars(e):
    from ...ir.functor import collect_vars
    return collect_vars(e)


def kernels_of(body) -> tuple:
    """``(workspace buffers, [(KernelInfo, kernel body), ...])`` of a body made by lower_for_gpu,
    every kernel once, in the order written (those inside host loops too)."""
    workspace, program = launch_program(body)
    ks = []

    def flat(items):
        for kind, a, b in items:
            if kind == "kernel":
                ks.append((a, b))
            else:
                flat(b)
    flat(program)
    return workspace, ks


def launch_program(body) -> tuple:
    """``(workspace buffers, program)`` of a body made by lower_for_gpu: the program lists
    ``("kernel", KernelInfo, body)`` and ``("loop", For, program)`` (a loop the host runs,
    launching the kernels inside once per iteration, its variable passed to them), in order."""
    from ...ir.stmt import AttrStmt, SeqStmt
    workspace = []
    while isinstance(body, Allocate):
        workspace.append(body.buffer)
        body = body.body

    def items(stmt):
        out = []
        for p in (list(stmt.seq) if isinstance(stmt, SeqStmt) else [stmt]):
            if isinstance(p, AttrStmt) and p.key == "cuda_kernel":
                out.append(("kernel", p.node, p.body))
            elif isinstance(p, For) and p.kind is not ForKind.THREAD_BINDING:
                out.append(("loop", p, items(p.body)))
            else:
                raise GPULoweringError("this function was not lowered for target 'cuda': "
                                       "use tilecraft.lower(s, args, target='cuda')")
        return out
    return workspace, items(body)
