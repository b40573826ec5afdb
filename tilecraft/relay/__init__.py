"""The graph level (TVM's Relay, static shapes): import a model, optimise its graph, build every
fused group with topi and the templates, run it with the graph executor, export one library.

>>> from tilecraft import relay
>>> mod, params = relay.frontend.from_onnx(model, shape={"data": (1, 3, 224, 224)})   # doctest: +SKIP
>>> with tilecraft.transform.PassContext(opt_level=3):
...     lib = relay.build(mod, target="llvm", params=params)                          # doctest: +SKIP
>>> m = tilecraft.contrib.graph_executor.GraphModule(lib["default"](tilecraft.cpu(0)))  # doctest: +SKIP

See docs/relay.md: what exists and what does not yet.
"""
from .ir import (Attrs, Call, Constant, Expr, Function, IRModule, RelayError, TensorType, Tuple,
                 TupleGetItem, TupleType, Var, const, var)
from .op import (OpPattern, abs, broadcast_to, clip, greater_equal, less_equal, log, logical_and,  # noqa: A004
                 logical_not, logical_or, maximum, minimum, not_equal, rsqrt, add, cast, concatenate, copy, divide, equal, erf, exp, expand_dims, greater, less,
                 max, mean, multiply, negative, nn, power, reshape, sigmoid, sqrt, squeeze, strided_slice,
                 subtract, sum, take, tanh, transpose, where)
from . import op, transform, frontend
from .build_module import build, optimize, bind_params_by_name

__all__ = ["Attrs", "Call", "Constant", "Expr", "Function", "IRModule", "RelayError", "TensorType", "Tuple",
           "TupleGetItem", "TupleType", "Var", "const", "var", "op", "nn", "transform", "frontend", "build",
           "optimize", "bind_params_by_name", "OpPattern",
           # operators (relay.nn.* for the layers)
           "add", "cast", "concatenate", "copy", "divide", "equal", "erf", "exp", "expand_dims", "greater", "less",
           "max", "mean", "multiply", "negative", "power", "reshape", "sigmoid", "sqrt", "squeeze",
           "strided_slice", "subtract", "sum", "take", "tanh", "transpose", "where",
           "abs", "broadcast_to", "clip", "greater_equal", "less_equal", "log", "logical_and", "logical_not",
           "logical_or", "maximum", "minimum", "not_equal", "rsqrt"]
