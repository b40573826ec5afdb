"""The tunable workloads of a model: what ``relay.build`` asks the dispatch context for.

The model is optimised and fused exactly as ``relay.build`` does, then each distinct fused
group is computed (not compiled) by ``te_compiler`` under a dispatch context that records every
workload a template asks a configuration for and answers each with its fallback. So a task
made from a recorded workload has, by construction, the key ``relay.build`` looks up in
``apply_history_best(log)``: the micro-kernel conv (``topi/conv2d_NCHWc_microkernel.llvm``: the
blocked convolutions whose output channels are whole vectors), the conv2d NCHW[x]c template
(``topi/conv2d_nchw.llvm``: the others, and all of them with AlterOpLayout off), dense
layers with constant weights through the micro-kernel GEMM on packed panels
(``topi/dense_pack.llvm``; other dense layers through ``topi/matmul.llvm``), batch_matmul
(``topi/batch_matmul.llvm``), the fused attention (``topi/attention.llvm``), and the row-reduction templates of softmax, layer_norm and
global pooling (``topi/softmax.llvm``, ``topi/layer_norm.llvm``, ``topi/global_pool.llvm``).
The model is optimised at opt_level 3 at least (as TVM does), the level it is built at.
For ``target="cuda"`` (``te_compiler_cuda``, ``cuda_tensorcore``): the conv2d template
``topi/conv2d_nchw.cuda`` (direct convolutions), and on tensor cores
``topi/conv2d_nhwc_tensorcore.cuda`` (the NHWC convolutions of ``TensorCoreLayout``),
``topi/dense_tensorcore.cuda`` and ``topi/batch_matmul_tensorcore.cuda`` (float16); float32
dense, batch_matmul and the row kernels have fixed GPU schedules and give no task.

>>> tuning_workloads(mod["main"], "llvm", params)          # doctest: +SKIP
[(('topi/conv2d_nchw.llvm', 1, 16, 10, 10, 32, 3, 3, 1, 1, 'float32'), 2, ('nn.conv2d', 'add', 'nn.relu')), ...]
"""
from __future__ import annotations

from tilecraft.autotune.dispatch import DispatchContext
from tilecraft.autotune.space import FallbackConfigEntity

from ..ir import Call, Function, IRModule, RelayError, post_order
from ..printer import astext


class _RecordWorkloads(DispatchContext):
    """Answers every workload with its fallback configuration and remembers the workloads."""

    def __init__(self):
        super().__init__()
        self.workloads: list = []

    def _query_inside(self, target, workload):
        if workload is None:
            return None
        if workload not in self.workloads:
            self.workloads.append(workload)
        return FallbackConfigEntity()


# the operators AlterOpLayout makes, by the one they replace (``ops=["nn.conv2d"]`` keeps them)
_ALTERED = {"nn.contrib_conv2d_NCHWc": "nn.conv2d", "nn.contrib_dense_pack": "nn.dense"}


def _op_names(fn: Function) -> tuple:
    return tuple(n.op.name for n in post_order(fn.body) if type(n) is Call and not isinstance(n.op, Function))


def tuning_workloads(program, target="llvm", params: dict | None = None, ops=None) -> list:
    """``[(workload, count, op names)]``, one per distinct workload of ``program`` (a relay
    ``Function``, e.g. ``mod["main"]``, or an ``IRModule``), in the order the graph first
    uses them: ``count`` is how many kernel calls of the fused graph use it (groups computed
    once each; equal groups are one kernel but each call runs it), ``op names`` the operators
    of the first group that uses it. ``ops``, when given, keeps only groups that contain one of
    these operators (``relay.op.get("nn.conv2d")`` or the name)."""
    from tilecraft.target import Target, TargetError

    from ..build_module import optimize
    from .te_compiler import compute_group, template_kernel
    from .te_compiler_cuda import cuda_anchor, template_kernel_cuda
    mod = program if isinstance(program, IRModule) else IRModule.from_expr(program)
    try:
        tgt = Target(target)
    except TargetError as err:
        raise RelayError(f"extract_from_program: {err}") from None
    if tgt.kind not in ("llvm", "cuda"):
        raise RelayError(f"extract_from_program: target {str(tgt)!r} is not supported; the graph level "
                         "builds for 'llvm' (the CPU) and 'cuda'")
    wanted = None if ops is None else {getattr(o, "name", o) for o in ops}
    from tilecraft.transform import PassContext
    cur = PassContext.current()
    # at opt_level 3 at least (TVM's extract_from_program too): the level models are built at,
    # where AlterOpLayout makes the blocked convolutions and packed dense layers whose
    # workloads the build asks for; the caller's required / disabled passes still count
    with PassContext(opt_level=max(3, cur.opt_level), required_pass=cur.required_pass,
                     disabled_pass=cur.disabled_pass, config=cur.config):
        fused, _ = optimize(mod, tgt, params)
    found: dict = {}          # workload -> [count, op names]
    seen_groups: dict = {}    # group text -> its workloads
    with tgt:
        for n in post_order(fused["main"].body):
            if type(n) is not Call or not isinstance(n.op, Function):
                continue
            names = _op_names(n.op)
            if wanted is not None and not wanted.intersection(names + tuple(_ALTERED.get(o, o) for o in names)):
                continue
            key = astext(n.op)
            if key not in seen_groups:
                rec = _RecordWorkloads()
                with rec:
                    if tgt.kind == "cuda":
                        if template_kernel_cuda(n.op) is None:
                            compute_group(n.op, cuda_anchor)
                    elif template_kernel(n.op) is None:
                        compute_group(n.op)
                seen_groups[key] = rec.workloads
            for wl in seen_groups[key]:
                found.setdefault(wl, [0, names])[0] += 1
    return [(wl, count, names) for wl, (count, names) in found.items()]
