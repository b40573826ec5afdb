"""A check before GPU lowering: where a stage attached with ``compute_at`` may also be an argument.

On the CPU such a stage writes its region into the argument's buffer (``schedule_ops``). Inside a
CUDA kernel that buffer is global memory shared by every thread, and nothing orders one
thread's stores before another thread's loads (barriers are inserted for shared memory only). It
is correct when each thread computes the region it reads itself: the stage is attached inside
every loop of its kernel that is bound to a GPU index and binds none of its own loops. Anything
else (attached at the block level, cooperative loops bound to ``threadIdx``) is refused here,
naming the stage and the index; a non-argument stage gets a private ``local``/``shared`` buffer
instead and has no such restriction.

Nothing holds afterwards that did not hold before: the schedule is not changed.

>>> # s[B].compute_at(s[C], bx)   (C's inner loop bound to threadIdx.x, B an argument)
>>> # → GPULoweringError: stage 'B' is an argument attached ... outside the loop bound to threadIdx.x
"""
from __future__ import annotations

from .gpu_kernels import GPULoweringError

GPU_TAGS = ("blockIdx.", "threadIdx.", "vthread", "cthread")


def _bound_tags(st, ivs) -> dict:
    out = {}
    for iv in ivs:
        a = st.iter_var_attrs.get(iv)
        if a is not None and a.bind is not None and a.bind.thread_tag.startswith(GPU_TAGS):
            out[a.bind.thread_tag] = iv
    return out


def check_attached_arguments(sch, args: set) -> None:
    """Refuse attached argument stages whose global buffer threads would share (see above)."""
    from ..bound import enclosing_loops
    stages = [st for st in sch.stages if st.attach_type == "scope" and not st.is_output
              and any(t in args for t in st.op.outputs)]
    for st in stages:
        root = st
        while root.attach_type == "scope" and root.attach_stage is not None:
            root = root.attach_stage
        kernel = [x for x in sch.stages if x is root or _attached_under(x, root)]
        used = {}
        for x in kernel:
            for tag in _bound_tags(x, x.leaf_iter_vars):
                used.setdefault(tag, x)
        if not used:
            continue                      # not in a kernel: computed on the host side
        enclosing = set()
        for p, iv in enclosing_loops(st):
            enclosing |= set(_bound_tags(p, [iv]))
        own = _bound_tags(st, st.leaf_iter_vars)
        missing = sorted(t for t in used if t not in enclosing)
        if own or missing:
            tag = sorted(own)[0] if own else missing[0]
            raise GPULoweringError(
                f"stage '{st.name}' is an argument attached with compute_at at loop "
                f"'{st.attach_ivar.var.name}' of stage '{st.attach_stage.name}', "
                + (f"with its own loop bound to {tag}" if own else f"outside the loop bound to {tag}")
                + f": on the GPU its threads would share {st.name}'s global buffer without "
                f"synchronisation; attach it inside every thread-bound loop, compute it at the root "
                f"(its own kernel), or leave it out of the arguments")


def _attached_under(x, root) -> bool:
    seen = set()
    while x.attach_type == "scope" and x.attach_stage is not None and id(x) not in seen:
        seen.add(id(x))
        x = x.attach_stage
        if x is root:
            return True
    return False
