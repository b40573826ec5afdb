"""Dimension expressions of signatures: IR integer expressions become the JSON dimension format
(``runtime.signature.dim_of_expr``) and evaluate exactly (``eval_dim``), large values included."""
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilecraft import te
from tilecraft.ir.expr import Var
from tilecraft.runtime.signature import FuncSignature, ParamSpec, dim_of_expr, eval_dim

n, m = Var("n", "int64"), Var("m", "int64")


def _trunc(a, b):
    return int(Fraction(a, b))           # towards zero, exactly


OPS = [(lambda a, b: a + b, lambda a, b: a + b), (lambda a, b: a - b, lambda a, b: a - b),
       (lambda a, b: a * b, lambda a, b: a * b), (lambda a, b: a // b, lambda a, b: a // b),
       (lambda a, b: a % b, lambda a, b: a % b), (te.truncdiv, _trunc),
       (te.truncmod, lambda a, b: a - b * _trunc(a, b)), (te.min, min), (te.max, max)]


@settings(max_examples=400, deadline=None)
@given(st.integers(-2**62, 2**62), st.integers(-10**6, 10**6).filter(bool),
       st.sampled_from(range(len(OPS))), st.integers(0, 5))
def test_dimension_expressions_evaluate_exactly(a, b, which, c):
    build, want = OPS[which]
    d = dim_of_expr(build(n, m) + c, lambda v: v.name, lambda bad: AssertionError(str(bad)))
    assert eval_dim(d, {"n": a, "m": b}) == want(a, b) + c
    # and through the manifest's JSON form
    sig = FuncSignature("f", (ParamSpec("A", "buffer", "float32", (d,)), ParamSpec("n", "scalar", "int64"),
                              ParamSpec("m", "scalar", "int64")))
    assert eval_dim(FuncSignature.from_json(sig.to_json()).params[0].shape[0], {"n": a, "m": b}) == want(a, b) + c


def test_a_dimension_that_is_not_an_integer_expression_is_refused():
    A = te.placeholder((4,), name="A")
    with pytest.raises(ValueError, match="not a shape"):
        dim_of_expr(n + A[0].astype("int64"), lambda v: v.name, lambda bad: ValueError(f"`{bad}` not a shape"))
