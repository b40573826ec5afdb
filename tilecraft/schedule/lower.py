"""``lower``: the whole pipeline from a schedule to a loop-nest function, one pass at a time.

    index check → inline → bound inference → loop nests → simplify → loop partition → storage flattening → vectorize
           → unroll → simplify → (target llvm) common subexpressions → dead code
                               (cuda) kernels, thread binding, shared memory, barriers

``lower(s, args, print_ir=True)`` prints the IR after every pass.
"""
from __future__ import annotations

import time

from ..ir import dtype as dt
from ..ir.expr import TensorLoad, Var, SizeVar, Const
from ..ir.functor import IRMutator, collect_vars, post_order_visit, substitute
from ..ir.printer import func_str
from ..ir.simplify import simplify
from ..ir.stmt import Buffer, PrimFunc
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .bound import infer_bounds
from .check_indices import check_indices
from .schedule import Schedule, ScheduleError
from .schedule_ops import schedule_ops
from .tensorize import llvm_imports
from .passes.storage_flatten import storage_flatten
from .passes.vectorize import vectorize_loops
from .passes.unroll import unroll_loops
from .passes.loop_partition import partition_loops
from ..ir.cse import common_subexpression_elimination, remove_dead_code


class _Inline(IRMutator):
    def __init__(self, inlined: dict):
        self.inlined = inlined   # tensor -> (axis vars, body)

    def visit_TensorLoad(self, e):
        e = super().visit_TensorLoad(e)
        hit = self.inlined.get(e.tensor)
        if hit is None:
            return e
        axis_vars, body = hit
        return substitute(body, dict(zip(axis_vars, e.indices)))


def inline_stages(sch: Schedule) -> dict:
    """Each stage's body with every ``compute_inline`` producer substituted into it."""
    inlined: dict = {}
    bodies: dict = {}
    m = _Inline(inlined)
    for st in sch.stages:
        op = st.op
        if isinstance(op, PlaceholderOp):
            continue
        body = tuple(m.visit_expr(b) for b in op.body) if inlined else op.body
        bodies[st] = body
        if st.attach_type == "inline":
            inlined[op.outputs[0]] = ([iv.var for iv in op.axis], body[0])
    return bodies


def _reads(body: tuple) -> list:
    out = []

    def f(n):
        if isinstance(n, TensorLoad):
            out.append(n.tensor)
    for b in body:
        post_order_visit(b, f)
    return out


def _resolve_args(sch: Schedule, args) -> tuple[list, list]:
    tensors, scalars = [], []
    for pos, a in enumerate(args):
        if isinstance(a, Tensor):
            st = sch.stage_map.get(a.op)
            if st is None:
                raise ScheduleError(f"argument {pos} '{a.name}' is not part of the schedule")
            if st.attach_type == "inline":
                raise ScheduleError(f"argument {pos} '{a.name}' is inlined (compute_inline) and has no storage")
            tensors.append((pos, st.op.outputs[a.value_index], a))
        elif isinstance(a, Var):
            scalars.append((pos, a))
        else:
            raise ScheduleError(f"argument {pos} must be a tensor or a te.var, got {a!r}")
    return tensors, scalars


def lower(sch: Schedule, args, name: str = "main", simple_mode: bool = False, binds=None,
          print_ir: bool = False, target: str | None = None, after_pass=None) -> PrimFunc:
    """Lower a schedule to a ``PrimFunc`` over the given argument tensors.

    ``after_pass(pass_name, func)``, when given, is called with the function after
    ``schedule_ops`` and after each pass of the common pipeline (tests run the lowered-IR
    interpreter there: ``tilecraft.interp_lowered.PassChecker``).

    >>> print(tilecraft.lower(s, [A, B, C], simple_mode=True))
    """
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower expects a schedule from te.create_schedule, got {type(sch).__name__}")
    if not isinstance(args, (list, tuple)) or not args:
        raise ScheduleError("lower needs the list of argument tensors, e.g. [A, B, C]")
    timings = {}
    t0 = time.perf_counter()

    def show(what, body):
        if print_ir:
            print(f"# ---- after {what} ----")
            print(func_str(PrimFunc(name, tuple(params), body)))
        if after_pass is not None:
            after_pass(what, PrimFunc(name, tuple(params), body))

    arg_tensors, arg_scalars = _resolve_args(sch, args)
    check_indices(sch)
    bodies = inline_stages(sch)

    # who reads whom (after inlining)
    producer_of = {}
    for st in sch.stages:
        for t in st.op.outputs:
            producer_of[t] = st
    consumers = {st: [] for st in sch.stages}
    for st, body in bodies.items():
        if st.attach_type == "inline":
            continue
        for t in set(_reads(body)):
            p = producer_of.get(t)
            if p is None:
                raise ScheduleError(f"stage '{st.name}' reads tensor '{t.name}', which is not part of this schedule")
            if st not in consumers[p]:
                consumers[p].append(st)

    # buffers for the arguments
    buffers: dict = {}
    arg_set = set()
    params = []
    for pos, t, orig in arg_tensors:
        b = Buffer(orig.name, t.shape, t.dtype)
        buffers[t] = b
        arg_set.add(t)
        params.append(b)
    for st in sch.stages:
        if isinstance(st.op, PlaceholderOp):
            t = st.op.outputs[0]
            if t not in arg_set and consumers[st]:
                raise ScheduleError(f"the input '{t.name}' is read by stage '{consumers[st][0].name}' but is "
                                    f"not in the argument list")
    for st in sch.stages:
        if st.is_output and st.attach_type != "inline":
            for t in st.op.outputs:
                if t not in arg_set:
                    raise ScheduleError(f"the output '{t.name}' is not in the argument list")

    if target is not None and str(target).split()[0] == "cuda":
        from .passes.gpu_attached_args import check_attached_arguments
        check_attached_arguments(sch, arg_set)
    loop_extent: dict = {}
    infos = infer_bounds(sch, bodies, consumers, loop_extent, arg_set)
    timings["bound"] = time.perf_counter() - t0

    mins = {}
    for st, info in infos.items():
        for t in st.op.outputs:
            if t in buffers:
                continue
            buffers[t] = Buffer(t.name, tuple(info.root_extent), t.dtype, st.scope)
            if any(not (isinstance(m, Const) and m.value == 0) for m in info.root_min):
                mins[t] = info.root_min

    # scalar parameters: explicit ones in place, the rest (shape variables) appended
    scalar_params = [v for _, v in arg_scalars]
    seen = set(scalar_params)
    for b in list(params):
        for d in b.shape:
            for v in sorted(collect_vars(d), key=lambda v: v.name):
                if v not in seen:
                    seen.add(v)
                    scalar_params.append(v)
    params = params + scalar_params

    aligns = {buffers[t]: st.align for st in infos for t in st.op.outputs if st.align and t not in arg_set}
    body = schedule_ops(sch, infos, buffers, mins, arg_set, aligns)
    show("schedule_ops", body)
    passes = [
        ("simplify", simplify),
        ("loop_partition", partition_loops),
        ("storage_flatten", lambda b: storage_flatten(b, aligns)),
        ("vectorize", vectorize_loops),
        ("unroll", unroll_loops),
        ("simplify", simplify),
    ]
    if target is not None and str(target).split()[0] == "llvm":
        # only when building for the CPU: the GPU passes analyse shared-memory reads for
        # barriers (CSE would move them into lets), and a target-less lower() stays readable
        passes += [("cse", common_subexpression_elimination), ("remove_dead_code", remove_dead_code)]
    for pname, fn in passes:
        t1 = time.perf_counter()
        body = fn(body)
        timings[pname] = timings.get(pname, 0.0) + time.perf_counter() - t1
        show(pname, body)

    # free variables that are neither loop variables nor parameters
    free = _free_scalars(body, params)
    if free:
        raise ScheduleError(f"the scalar variable(s) {', '.join(sorted(v.name for v in free))} are used but "
                            f"are neither in the argument list nor in any argument's shape")
    # ---- GPU hook (owned by the CUDA backend): kernels, launch indices, shared memory, barriers ----
    if target is not None and str(target).split()[0] == "cuda":
        from .passes.gpu_lower import lower_for_gpu
        _check_double_buffer(sch)
        body = lower_for_gpu(body, params, name, print_ir=print_ir)
    # ---- end of GPU hook ----
    imports = llvm_imports(sch)
    func = PrimFunc(name, tuple(params), body, (("lower_time", time.perf_counter() - t0),)
                    + ((("import_llvm", imports),) if imports else ()))
    return func


def _check_double_buffer(sch) -> None:
    """A stage marked with double_buffer() must be attached at a loop that runs in time in its
    kernel (a serial or unrolled loop, not one bound to the grid or a virtual thread): the tiles
    alternate along it. (The mark itself is in the IR: ``schedule_ops`` wraps the tile's
    allocation in ``double_buffer_scope``. Where lowering leaves a tile outside any loop — the
    loop runs once, or loop partitioning peeled it off — it keeps one buffer.) A function lowered
    without a target and built for CUDA later is not checked here: such a tile keeps one buffer."""
    from .passes.gpu_kernels import GPULoweringError
    for st in sch.stages:
        if not getattr(st, "double_buffered", False):
            continue
        at = st.attach_ivar
        attr = st.attach_stage.iter_var_attrs.get(at) if at is not None else None
        if at is None or (attr is not None and attr.bind is not None):
            raise GPULoweringError(
                f"double_buffer on '{st.name}': the stage is not attached inside a "
                f"loop of the kernel, so there is no next tile to overlap with; compute_at it inside the "
                f"reduction loop")


def _free_scalars(body, params) -> set:
    bound = set()
    used = set()
    from ..ir.stmt import For, LetStmt
    from ..ir.expr import Let

    def f(n):
        if isinstance(n, For):
            bound.add(n.loop_var)
        elif isinstance(n, (LetStmt, Let)):
            bound.add(n.var)
        elif isinstance(n, Var) and n.dtype != "handle":
            used.add(n)
    post_order_visit(body, f)
    pset = {p for p in params if isinstance(p, Var)}
    return {v for v in used - bound - pset}
