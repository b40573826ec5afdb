"""Graph passes (TVM's ``relay.transform``), one per file, each a :class:`Pass` run by
:class:`Sequential` under ``tilecraft.transform.PassContext(opt_level=...)``.

=========================  =========  =====================================================
pass                       opt_level  what holds afterwards
=========================  =========  =====================================================
``InferType``              0          every node has its type
``SimplifyInference``      0          no ``nn.batch_norm``: a scale and a shift instead
``FoldConstant``           2          no call has only constant arguments
``FoldScaleAxis``          3          per-channel scales folded into the preceding conv's kernel
``CombineParallelDense``   3          no 3 (or more) dense layers with constant weights read the
                                      same input: one dense on the concatenated weights, sliced
``FuseAttention``          3          on the CPU: self-attention blocks (per-head transposes,
                                      Q Kᵀ, scale, softmax, · V, transpose back) are one
                                      ``nn.contrib_attention`` reading Q, K, V in place
``AlterOpLayout``          3          convolutions in NCHW[x]c, the values between them too
``TensorCoreLayout``       3          on cuda: tensor-core convolutions in NHWC, the values
                                      between them too
``ToMixedPrecision``       0          (not in relay.build's pipeline) float32 computed in
                                      float16, float32 at the boundary
``SinkReshape``            3          reshapes after the element-wise ops, softmaxes, layer norms
                                      that commute with them (a dense layer's epilogue fuses)
``EliminateCommonSubexpr`` 3          each distinct call computed once
``DeadCodeElimination``    1          no projection of a literal tuple, no uncalled function
``FuseOps``                0          main calls primitive functions (fused groups) only
=========================  =========  =====================================================

>>> seq = relay.transform.Sequential([relay.transform.InferType(), relay.transform.FoldConstant()])
>>> with tilecraft.transform.PassContext(opt_level=3):
...     mod = seq(mod)                                           # doctest: +SKIP
"""
from .alter_op_layout import AlterOpLayout
from .combine_parallel_dense import CombineParallelDense
from .dead_code import DeadCodeElimination
from .eliminate_common_subexpr import EliminateCommonSubexpr
from .fold_constant import FoldConstant
from .fold_scale_axis import FoldScaleAxis
from .fuse_attention import FuseAttention
from .fuse_ops import FuseOps
from .infer_type import InferType
from .pass_infra import Pass, PrintAfterAll, Sequential, function_pass, module_pass
from .simplify_inference import SimplifyInference
from .sink_reshape import SinkReshape
from .tensorcore_layout import TensorCoreLayout
from .to_mixed_precision import ToMixedPrecision

__all__ = ["AlterOpLayout", "CombineParallelDense", "DeadCodeElimination", "EliminateCommonSubexpr", "FoldConstant", "FoldScaleAxis", "FuseAttention", "FuseOps",
           "InferType", "Pass", "PrintAfterAll", "Sequential", "SimplifyInference", "SinkReshape", "TensorCoreLayout", "ToMixedPrecision",
           "function_pass", "module_pass"]
