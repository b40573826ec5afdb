"""``lower``: the whole pipeline from a schedule to a loop-nest function, one pass at a time.

    index check → inline → bound inference → loop nests → simplify → loop partition → storage flattening
        → vectorize → unroll → simplify → (with a target) legalize → (llvm) common subexpressions → dead code
                                                                   (cuda) kernels, thread binding, shared memory, barriers

:func:`lower` is that sequence and nothing else; the helpers below prepare its inputs (argument
buffers, who reads whom, the buffers of the stages) and check its result. ``lower(s, args,
print_ir=True)`` prints the IR after every pass; ``simple_mode=True`` leaves out loop
partitioning (as TVM's does), so guards stay where the schedule put them.
"""
from __future__ import annotations

from ..ir import intrinsics
from ..ir.cse import common_subexpression_elimination, remove_dead_code
from ..ir.expr import Const, Let, TensorLoad, Var
from ..ir.functor import IRMutator, collect_vars, post_order_visit, substitute
from ..ir.printer import func_str
from ..ir.simplify import simplify
from ..ir.module import IRModule
from ..ir.stmt import Buffer, For, LetStmt, PrimFunc
from ..te.extern import ExternOp
from ..te.scan import ScanOp
from ..te.tensor import PlaceholderOp, Tensor
from .bound import infer_bounds
from .check_indices import check_indices
from .passes.legalize import LEGALIZED_ATTR, legalize
from .passes.loop_partition import partition_loops
from .passes.storage_flatten import storage_flatten
from .passes.unroll import unroll_loops
from .passes.vectorize import vectorize_loops
from .ragged import bound_reads
from .scan import check_gpu_scans, scan_buffers, state_placeholders
from .schedule import Schedule, ScheduleError
from .schedule_ops import schedule_ops
from .tensorize import llvm_imports


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
        if isinstance(op, (ExternOp, ScanOp)):
            bodies[st] = ()         # whole input buffers (extern) or rows of init/update (scan): see _consumers
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
            if st is None and isinstance(a.op, PlaceholderOp):
                # a placeholder nothing in the schedule reads (TVM: an unused parameter buffer,
                # e.g. an input a gradient does not depend on)
                tensors.append((pos, a, a))
                continue
            if st is None:
                raise ScheduleError(f"argument {pos} '{a.name}' is not part of the schedule (a tensor "
                                    f"computed outside the graph of te.create_schedule's outputs)")
            # an inlined stage as an argument (TVM): a parameter buffer that nothing writes; its
            # consumers compute its values in place
            tensors.append((pos, st.op.outputs[a.value_index], a))
        elif isinstance(a, Var):
            scalars.append((pos, a))
        else:
            raise ScheduleError(f"argument {pos} must be a tensor or a te.var, got {a!r}")
    return tensors, scalars


def lower(sch: Schedule, args, name: str = "main", binds=None, simple_mode: bool = False,
          print_ir: bool = False, target: str | None = None, after_pass=None) -> IRModule:
    """Lower a schedule to a ``PrimFunc`` over the given argument tensors (and ``te.var`` scalars),
    which is also TVM's ``IRModule`` of that function: ``mod[name]`` (``mod["main"]`` by default) is
    the plain ``PrimFunc`` (``ir/module.py``).

    ``target`` (``"llvm"``, ``"cuda"`` or None) adds that backend's passes: legalize (what the
    target lacks, in terms of what it has; ``func.attr("legalized_for")`` says for which), common
    subexpressions and dead code for the CPU, kernels and launch indices for CUDA. ``simple_mode=True`` leaves out
    loop partitioning, so split tails keep their guard inside the loop (TVM's meaning: a compact
    loop nest to read). ``binds`` is TVM's tensor → buffer map; tilecraft gives every argument a
    compact buffer of its tensor's shape, so only ``None`` is accepted. ``print_ir=True`` prints
    the IR after every pass; ``after_pass(pass_name, func)``, when given, is called with the
    function after ``schedule_ops`` and after each pass of the common pipeline (tests run the
    lowered-IR interpreter there: ``tilecraft.interp_lowered.PassChecker``).

    >>> print(tilecraft.lower(s, [A, B, C], simple_mode=True))
    """
    _check_arguments(sch, args, binds)
    kind = _target_kind(target)
    arg_tensors, arg_scalars = _resolve_args(sch, args)
    check_indices(sch)
    bodies = inline_stages(sch)
    consumers = _consumers(sch, bodies)
    buffers, buffer_params = _argument_buffers(sch, arg_tensors, consumers)
    arg_set = set(buffers)
    scan_aliased = scan_buffers(sch, buffers)
    if kind == "cuda":
        from .passes.gpu_attached_args import check_attached_arguments
        check_attached_arguments(sch, arg_set)
        check_gpu_scans(sch)
    infos = infer_bounds(sch, bodies, consumers, {}, arg_set)
    mins = _stage_buffers(infos, buffers)
    params = tuple(buffer_params + _scalar_params(buffer_params, arg_scalars))
    aligns = {buffers[t]: st.align for st in infos for t in st.op.outputs if st.align and t not in arg_set}
    run = _PassRunner(name, params, print_ir, after_pass)

    body = run("schedule_ops", schedule_ops, sch, infos, buffers, mins, arg_set | scan_aliased, aligns)
    body = run("simplify", simplify, body)
    if not simple_mode:
        body = run("loop_partition", partition_loops, body)
    body = run("storage_flatten", storage_flatten, body, aligns)
    body = run("vectorize", vectorize_loops, body)
    body = run("unroll", unroll_loops, body)
    body = run("simplify", simplify, body)
    if kind in intrinsics.TARGETS:
        # without a target the backend legalizes (legalize_func), so a target-less lower() keeps
        # the calls as written
        body = run("legalize", legalize, body, kind)
    if kind == "llvm":
        # only when building for the CPU: the GPU passes analyse shared-memory reads for
        # barriers (CSE would move them into lets), and a target-less lower() stays readable
        body = run("cse", common_subexpression_elimination, body)
        body = run("remove_dead_code", remove_dead_code, body)
    _check_free_scalars(body, params)
    # ---- GPU hook (owned by the CUDA backend): kernels, launch indices, shared memory, barriers ----
    if kind == "cuda":
        from .passes.gpu_lower import lower_for_gpu
        _check_double_buffer(sch)
        body = lower_for_gpu(body, params, name, print_ir=print_ir)
    # ---- end of GPU hook ----
    attrs = ((LEGALIZED_ATTR, kind),) if kind in intrinsics.TARGETS else ()
    imports = llvm_imports(sch)
    if imports:
        attrs += (("import_llvm", imports),)
    return IRModule(name, params, body, attrs)


class _PassRunner:
    """Runs one pass and shows its result: printed (``print_ir``) and handed to ``after_pass``."""

    def __init__(self, name: str, params: tuple, print_ir: bool, after_pass):
        self.name, self.params, self.print_ir, self.after_pass = name, params, print_ir, after_pass

    def __call__(self, pass_name: str, fn, *inputs):
        body = fn(*inputs)
        if self.print_ir or self.after_pass is not None:
            func = PrimFunc(self.name, self.params, body)
            if self.print_ir:
                print(f"# ---- after {pass_name} ----")
                print(func_str(func))
            if self.after_pass is not None:
                self.after_pass(pass_name, func)
        return body


def _check_arguments(sch, args, binds) -> None:
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower expects a schedule from te.create_schedule, got {type(sch).__name__}")
    if not isinstance(args, (list, tuple)) or not args:
        raise ScheduleError("lower needs the list of argument tensors, e.g. [A, B, C]")
    if binds is not None:
        raise ScheduleError("lower: binds (TVM's map from tensors to buffers) is not supported: every "
                            "argument gets a compact row-major buffer of its tensor's shape; leave binds out")


def _target_kind(target) -> str | None:
    """``"llvm"``, ``"cuda"`` or None, from a target string, a Target or None."""
    return None if target is None else str(target).split()[0]


def _consumers(sch: Schedule, bodies: dict) -> dict:
    """Stage → the stages that read its outputs (after inlining)."""
    producer_of = {}
    for st in sch.stages:
        for t in st.op.outputs:
            producer_of[t] = st
    consumers = {st: [] for st in sch.stages}
    for st, body in bodies.items():
        if st.attach_type == "inline":
            continue
        reads = set(_reads(body)) | set(_bound_reads(st, producer_of))
        if isinstance(st.op, ScanOp):
            reads = st.op.input_tensors       # its init and update stages
        if isinstance(st.op, ExternOp):
            reads = st.op.inputs
            for t in reads:
                p = producer_of.get(t)
                if p is not None and p.attach_type == "inline":
                    raise ScheduleError(f"stage '{p.name}' is inlined (compute_inline), but the extern "
                                        f"stage '{st.name}' reads its whole buffer; compute it at the root")
        for t in reads:
            p = producer_of.get(t)
            if p is None:
                raise ScheduleError(f"stage '{st.name}' reads tensor '{t.name}', which is not part of this schedule")
            if st not in consumers[p]:
                consumers[p].append(st)
    return consumers


def _bound_reads(st, producer_of: dict) -> list:
    """The tensors read by the bounds of the stage's ragged reduce axes; they must have storage."""
    if not getattr(st.op, "reduce_axis", ()):
        return []
    reads = bound_reads(st.op)
    for t in reads:
        p = producer_of.get(t)
        if p is not None and p.attach_type == "inline":
            raise ScheduleError(f"stage '{st.name}': the bounds of a ragged reduce axis read '{t.name}', which is "
                                f"inlined (compute_inline); bounds are loaded from storage: compute '{t.name}' "
                                f"in its own stage (leave out compute_inline)")
    return reads


def _argument_buffers(sch: Schedule, arg_tensors: list, consumers: dict) -> tuple[dict, list]:
    """A buffer for each argument tensor (tensor → Buffer, and the Buffers in argument order),
    after checking that every input read and every output is among the arguments."""
    buffers: dict = {}
    params = []
    for _, t, orig in arg_tensors:
        b = Buffer(orig.name, t.shape, t.dtype)
        buffers[t] = b
        params.append(b)
    states = state_placeholders(sch)       # a scan's state is its output's buffer (scan_buffers)
    for st in sch.stages:
        if isinstance(st.op, PlaceholderOp) and st.op not in states:
            t = st.op.outputs[0]
            if t not in buffers and consumers[st]:
                raise ScheduleError(f"the input '{t.name}' is read by stage '{consumers[st][0].name}' but is "
                                    f"not in the argument list")
    for st in sch.stages:
        if st.is_output and st.attach_type != "inline":
            for t in st.op.outputs:
                if t not in buffers:
                    raise ScheduleError(f"the output '{t.name}' is not in the argument list")
    return buffers, params


def _stage_buffers(infos: dict, buffers: dict) -> dict:
    """Add a buffer, of the extent bound inference gave, for the output of every stage that is not
    an argument; return the non-zero minimums of those buffers (tensor → per-axis minimum)."""
    mins = {}
    for st, info in infos.items():
        for t in st.op.outputs:
            if t in buffers:
                continue
            shape = t.shape if isinstance(st.op, ExternOp) else tuple(info.root_extent)
            buffers[t] = Buffer(t.name, shape, t.dtype, st.scope)
            if any(not (isinstance(m, Const) and m.value == 0) for m in info.root_min):
                mins[t] = info.root_min
    return mins


def _scalar_params(buffer_params: list, arg_scalars: list) -> list:
    """The scalar parameters: the ``te.var`` arguments in their places, then the variables of the
    argument shapes that are not among them, in order of appearance (names sorted per dimension)."""
    scalar_params = [v for _, v in arg_scalars]
    seen = set(scalar_params)
    for b in buffer_params:
        for d in b.shape:
            for v in sorted(collect_vars(d), key=lambda v: v.name):
                if v not in seen:
                    seen.add(v)
                    scalar_params.append(v)
    return scalar_params


def _check_free_scalars(body, params) -> None:
    """Every scalar variable the body uses is a loop variable, a let binding or a parameter."""
    bound = set()
    used = set()

    def f(n):
        if isinstance(n, For):
            bound.add(n.loop_var)
        elif isinstance(n, (LetStmt, Let)):
            bound.add(n.var)
        elif isinstance(n, Var) and n.dtype != "handle":
            used.add(n)
    post_order_visit(body, f)
    free = used - bound - {p for p in params if isinstance(p, Var)}
    if free:
        raise ScheduleError(f"the scalar variable(s) {', '.join(sorted(v.name for v in free))} are used but "
                            f"are neither in the argument list nor in any argument's shape")


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
                f"{'pipeline' if st.pipeline_stages else 'double_buffer'} on '{st.name}': the stage is not "
                f"attached inside a loop of the kernel, so there is no next tile to overlap with; compute_at it "
                f"inside the reduction loop")
