"""Kernel extraction: each root loop nest bound to the grid becomes one kernel, with its launch.

``split_kernels`` peels the workspace allocations off the function body and cuts the rest into
one statement per root loop nest (each must be bound to ``blockIdx``/``threadIdx``);
``collect_launch`` checks that all loops bound to one tag in a kernel have the same extent (a
constant one for ``threadIdx``, at most 1024 threads in all) and makes the kernel's
:class:`KernelInfo` with one index variable per tag; ``kernel_stmt`` wraps a kernel body, once
the per-kernel passes of ``gpu_lower.py`` ran, so that the function body is afterwards
``Allocate*(global workspace)`` around a sequence of ``AttrStmt("cuda_kernel", KernelInfo,
launch, body)``, one per kernel, in launch order. ``check_local_sizes`` refuses a ``local``
array of symbolic size. The KernelInfo record and the GPU lowering error live here too.

>>> # for i.outer in thread_binding(0, 4, "blockIdx.x"): for i.inner in thread_binding(0, 64, "threadIdx.x"): C[i.outer*64+i.inner] = ...
>>> # becomes, after the per-kernel passes: # attr cuda_kernel(main_kernel) = grid(4, 1, 1) block(64, 1, 1)
>>> #                                       C[blockIdx.x*64 + threadIdx.x] = ...
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.expr import Const, Var
from ...ir.functor import post_order_visit
from ...ir.simplify import simplify
from ...ir.stmt import Allocate, AttrStmt, BufferStore, For, ForKind, SeqStmt
from ...error import TVMError

LAUNCH_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
VIRTUAL_TAGS = ("vthread", "cthread")
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SHARED_BYTES = 48 * 1024
MAX_SHARED_BYTES = 227 * 1024          # per block on sm_90 (H100/H200), as dynamic shared memory


def dynamic_shared_layout(buffers) -> list:
    """``[(buffer, byte offset)]`` of shared buffers laid out one after another in one dynamic
    block, each 16-byte aligned (a kernel needing more than ``MAX_STATIC_SHARED_BYTES``); the
    renderer declares them so and the launcher passes ``dynamic_shared_layout``'s end as the size."""
    from ...ir import dtype as dt
    out, off = [], 0
    for b in buffers:
        out.append((b, off))
        off += -(-int(b.shape[0].value) * dt.nbytes(b.dtype) // 16) * 16
    return out


class GPULoweringError(ValueError, TVMError):
    """A CUDA schedule that cannot be lowered; the message names the schedule choice."""


@dataclass
class KernelInfo:
    """What the renderer and the launcher need to know about one kernel."""
    name: str
    index_vars: dict                      # tag -> Var (one per launch index used)
    extents: dict                         # tag -> Expr (grid) or int (block)
    bindings: dict                        # tag -> ["loop 'x' of stage 'C'", ...] (for messages)
    shared: list = field(default_factory=list)       # hoisted __shared__ buffers
    params: list = field(default_factory=list)       # global Buffers and scalar Vars, in call order
    double_buffered: dict = field(default_factory=dict)   # Buffer -> loop Var it alternates with
    async_stages: dict = field(default_factory=dict)      # Buffer -> copies of a cp.async pipeline (pipeline())
    min_blocks: int = 0                   # pragma(ax, "min_blocks_per_sm", n) on a blockIdx loop: launch bounds

    @property
    def grid(self) -> tuple:
        return tuple(self.extents.get(f"blockIdx.{a}", Const(1, "int32")) for a in "xyz")

    @property
    def block(self) -> tuple:
        return tuple(int(self.extents.get(f"threadIdx.{a}", 1)) for a in "xyz")

    @property
    def threads(self) -> int:
        b = self.block
        return b[0] * b[1] * b[2]

    def shared_bytes(self) -> int:
        from ...ir import dtype as dt
        return sum(int(b.shape[0].value) * dt.nbytes(b.dtype) for b in self.shared)

    def launch_text(self) -> str:
        g = ", ".join(str(x) for x in self.grid)
        b = ", ".join(str(x) for x in self.block)
        return f"grid({g}) block({b})"

    def describe(self, tag: str) -> str:
        return "; ".join(self.bindings.get(tag, [])) or "nothing"


def _writer(stmt) -> str:
    """The stage a loop belongs to, for messages: the last buffer its body writes (the stages
    attached inside a loop come before the owner's own statement)."""
    found = []
    post_order_visit(stmt, lambda n: found.append(n.buffer.name) if isinstance(n, BufferStore) else None)
    return found[-1] if found else "?"


def split_kernels(body, func_name: str):
    """Peel the workspace allocations and return ``(workspace buffers, program)``: the program
    is a list of ``("kernel", name, stmt)`` (a root loop nest bound to the grid) and
    ``("loop", For, program)`` (a serial loop the host runs, e.g. a ``te.scan``'s steps, around
    kernels launched once per iteration; the ``global`` buffers allocated inside it become
    workspace)."""
    workspace = []
    while isinstance(body, Allocate):
        if body.buffer.scope != "global":
            raise GPULoweringError(
                f"stage '{body.buffer.name}' has scope '{body.buffer.scope}' but is not attached inside a "
                f"kernel: a '{body.buffer.scope}' stage must be placed with s[...].compute_at(...) under the "
                f"loops bound to blockIdx")
        workspace.append(body.buffer)
        body = body.body
    count = [0]
    program = _split_parts(body, workspace, count, ())
    if count[0] > 1:
        _number_kernels(program, func_name, iter(range(count[0])))
    else:
        _number_kernels(program, func_name, iter([""]))
    return workspace, program


def _split_parts(body, workspace: list, count: list, host_loops: tuple) -> list:
    parts = list(body.seq) if isinstance(body, SeqStmt) else [body]
    program = []
    while parts:
        part = parts.pop(0)
        if isinstance(part, Allocate) and host_loops:
            _hoist(part.buffer, host_loops)
            workspace.append(part.buffer)
            parts[:0] = list(part.body.seq) if isinstance(part.body, SeqStmt) else [part.body]
            continue
        if isinstance(part, AttrStmt) and part.key == "buffer_bind_scope" and _launches_inside(part.body):
            # an extern stage's buffer view (te.extern, a hybrid script) around its kernels: the
            # view is the same in every thread, so it goes inside each kernel's launch loops
            moved = _bind_inside(part.body, part)
            parts[:0] = list(moved.seq) if isinstance(moved, SeqStmt) else [moved]
            continue
        if isinstance(part, For) and part.kind is ForKind.THREAD_BINDING and part.thread_tag in LAUNCH_TAGS:
            program.append(["kernel", None, part])
            count[0] += 1
        elif isinstance(part, For) and part.kind is ForKind.SERIAL and _launches_inside(part.body):
            program.append(["loop", part, _split_parts(part.body, workspace, count, host_loops + (part,))])
        elif not isinstance(part, For) and _launches_inside(part):
            raise GPULoweringError(
                f"kernels sit under a {type(part).__name__} on the host, outside any kernel: a te.scan's loop "
                f"over the steps runs on the host and launches the kernels of its body, so it cannot be "
                f"guarded (a split of the scan axis whose factor does not divide the number of steps); "
                f"split the scan axis evenly or leave it unsplit")
        else:
            loop = f"its outermost loop '{part.loop_var.name}'" if isinstance(part, For) else "it"
            raise GPULoweringError(
                f"stage '{_writer(part)}' is not bound to the GPU grid: {loop} is not bound to blockIdx/"
                f"threadIdx. For target 'cuda' every root stage needs e.g. "
                f"s[X].bind(xo, te.thread_axis('blockIdx.x')) and s[X].bind(xi, te.thread_axis('threadIdx.x'))"
                + (" (the body stages of a te.scan too)" if host_loops else ""))
    return program


def _bind_inside(stmt, attr: AttrStmt):
    """``stmt`` with ``attr`` (a ``buffer_bind_scope``) put around the body of each kernel's
    launch loops in it."""
    if isinstance(stmt, For) and stmt.kind is ForKind.THREAD_BINDING and stmt.thread_tag in LAUNCH_TAGS:
        inner = stmt.body
        if not (isinstance(inner, For) and inner.kind is ForKind.THREAD_BINDING and inner.thread_tag in LAUNCH_TAGS):
            inner = AttrStmt(attr.key, attr.node, attr.value, inner)
        else:
            inner = _bind_inside(inner, attr)
        return For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, inner, stmt.thread_tag, stmt.annotations)
    if isinstance(stmt, SeqStmt):
        return SeqStmt(tuple(_bind_inside(x, attr) for x in stmt.seq))
    if isinstance(stmt, AttrStmt) and stmt.key == "buffer_bind_scope":
        return AttrStmt(stmt.key, stmt.node, stmt.value, _bind_inside(stmt.body, attr))
    if _launches_inside(stmt):
        raise GPULoweringError(
            f"the extern stage viewing '{attr.node.name}' launches kernels under a {type(stmt).__name__} on "
            f"the host; put its loops bound to blockIdx/threadIdx outermost")
    return AttrStmt(attr.key, attr.node, attr.value, stmt)


def _launches_inside(stmt) -> bool:
    """Whether a serial loop holds kernels (a loop the host runs) rather than being a stage's own."""
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING
                     and n.thread_tag in LAUNCH_TAGS else None)
    return bool(found)


def _hoist(buf, host_loops) -> None:
    from ...ir.functor import collect_vars
    if buf.scope != "global":
        raise GPULoweringError(
            f"stage '{buf.name}' has scope '{buf.scope}' but is not attached inside a kernel: place it with "
            f"s[...].compute_at(...) under the loops bound to blockIdx")
    loop_vars = {f.loop_var for f in host_loops}
    if any(collect_vars(d) & loop_vars for d in buf.shape):
        raise GPULoweringError(f"stage '{buf.name}': its size depends on the host loop "
                               f"'{host_loops[-1].loop_var.name}'; it cannot be allocated once for the kernels")


def _number_kernels(program, func_name, numbers) -> None:
    for item in program:
        if item[0] == "kernel":
            item[1] = f"{func_name}_kernel{next(numbers)}"
        else:
            _number_kernels(item[2], func_name, numbers)


def collect_launch(stmt, name: str) -> KernelInfo:
    """Check the extents bound to each launch tag and make the kernel's index variables."""
    extents: dict = {}
    bindings: dict = {}
    min_blocks = []

    def visit(n):
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING and n.thread_tag in LAUNCH_TAGS:
            tag = n.thread_tag
            mb = n.annotation("pragma_min_blocks_per_sm")
            if mb is not None:
                if not tag.startswith("blockIdx") or not isinstance(mb, int) or mb < 1:
                    raise GPULoweringError(
                        f"kernel {name}: pragma min_blocks_per_sm={mb!r} on loop '{n.loop_var.name}' (bound to "
                        f"{tag}): it takes a positive int, on a loop bound to blockIdx")
                min_blocks.append(mb)
            what = f"loop '{n.loop_var.name}' of stage '{_writer(n.body)}' (extent {n.extent})"
            if what not in bindings.setdefault(tag, []):
                bindings[tag].append(what)
            if tag in extents:
                if not _same(extents[tag], n.extent):
                    raise GPULoweringError(
                        f"kernel {name}: {tag} is bound to loops of different extents: "
                        f"{bindings[tag][0]} and {what}. Every loop bound to one thread index in a kernel "
                        f"must have the same extent: choose the split factors (or nparts=) so they match")
            else:
                extents[tag] = n.extent
    post_order_visit(stmt, visit)
    for tag, e in extents.items():
        if tag.startswith("threadIdx"):
            if not isinstance(simplify(e), Const):
                raise GPULoweringError(
                    f"kernel {name}: {tag} has the symbolic extent `{e}` ({bindings[tag][0]}); the block "
                    f"size must be a constant: split with a constant factor and bind the inner loop")
            extents[tag] = int(simplify(e).value)
        else:
            extents[tag] = simplify(e)
    info = KernelInfo(name, {t: Var(t, "int32") for t in extents}, extents, bindings,
                      min_blocks=max(min_blocks, default=0))
    if info.threads > MAX_THREADS_PER_BLOCK:
        dims = " × ".join(f"{t}={extents[t]}" for t in extents if t.startswith("threadIdx"))
        raise GPULoweringError(
            f"kernel {name} has {info.threads} threads per block ({dims}), more than the "
            f"{MAX_THREADS_PER_BLOCK} a CUDA block may have; they come from: "
            + "; ".join(f"{t}: {info.describe(t)}" for t in extents if t.startswith("threadIdx"))
            + ". Use smaller split factors for the loops bound to threadIdx")
    return info


def _same(a, b) -> bool:
    d = simplify(a - b)
    return isinstance(d, Const) and d.value == 0


def check_local_sizes(stmt, info: KernelInfo) -> None:
    """Every ``local`` array of the kernel has a constant size (CUDA keeps them in registers or
    stack frames sized at compile time); a size that depends on a symbolic extent is refused,
    naming the stage, rather than rendered as a variable-length array nvcc rejects."""
    def visit(n):
        if isinstance(n, Allocate) and n.buffer.scope == "local" and not isinstance(n.buffer.shape[0], Const):
            b = n.buffer
            raise GPULoweringError(
                f"kernel {info.name}: the local buffer '{b.name}' has the size `{b.shape[0]}`, which is not a "
                f"constant; a local array needs a size known when the kernel is compiled. It comes from the "
                f"extents of the loops stage '{b.name}' is attached under (compute_at): split them with "
                f"constant factors, or attach the stage at an inner loop")
    post_order_visit(stmt, visit)


def kernel_stmt(info: KernelInfo, body):
    return AttrStmt("cuda_kernel", info, info.launch_text(), body)
