"""``tvm.ir.save_json`` / ``load_json`` of TE objects: round trips that keep sharing (axes,
variables, tensors), are stable (save → load → save gives the same text), and compute the same
thing (the loaded graph built and run against the original's numbers); errors for what the format
refuses, without pickle anywhere."""
import json

import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te


def _run(out, inputs, out_shape):
    s = te.create_schedule(out.op)
    res = np.full(out_shape, np.nan, out.dtype)
    tvm.build(s, list(out.op.input_tensors) + [out], "llvm")(*inputs, res)
    return res


def test_round_trip_of_a_reduction_with_symbolic_shape(rng):
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    k = te.reduce_axis((0, 8), "k")
    B = te.compute((n,), lambda i: te.sum(te.exp(A[i, k]) * 2.0, axis=k), name="B")
    text = tvm.ir.save_json(B)
    B2 = tvm.ir.load_json(text)
    assert B2 is not B and B2.name == "B" and str(B2.op.body) == str(B.op.body)
    assert tvm.ir.save_json(B2) == text                           # stable
    A2 = B2.op.input_tensors[0]
    assert A2 is not A and A2.shape[0] is B2.shape[0]             # n is one variable again
    a = rng.standard_normal((5, 8)).astype("float32")
    np.testing.assert_allclose(_run(B2, [a], (5,)), (np.exp(a) * 2).sum(1), rtol=1e-5)


def test_round_trip_of_a_tuple_reducer_and_several_outputs(rng):
    argmax = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                             lambda t0, t1: (tvm.tir.const(-1, t0), te.min_value(t1)), name="argmax")
    A = te.placeholder((6, 9), name="A")
    k = te.reduce_axis((0, 9), "k")
    idx, val = te.compute((6,), lambda i: argmax((k.var, A[i, k]), axis=k), name="T")
    idx2, val2 = tvm.ir.load_json(tvm.ir.save_json([idx, val]))
    assert idx2.op is val2.op and idx2.value_index == 0 and val2.value_index == 1
    s = te.create_schedule(idx2.op)
    a = rng.standard_normal((6, 9)).astype("float32")
    i_out, v_out = np.full(6, -7, "int32"), np.full(6, np.nan, "float32")
    tvm.build(s, [idx2.op.input_tensors[0], idx2, val2], "llvm")(a, i_out, v_out)
    np.testing.assert_array_equal(i_out, a.argmax(1))
    np.testing.assert_allclose(v_out, a.max(1))


def test_expressions_and_non_finite_constants():
    x = te.var("x", "float32")
    e = te.if_then_else(x > 0, x, tvm.tir.const(float("-inf"), "float32"))
    e2 = tvm.ir.load_json(tvm.ir.save_json(e))
    assert str(e2) == str(e)
    doc = json.loads(tvm.ir.save_json(e))
    assert {"float": "-inf"} in [f for node in doc["nodes"] for f in node["fields"].values()]


@pytest.mark.parametrize("text, msg", [
    ("not json", "load_json: not JSON text"),
    ('{"format": "other"}', "not a tilecraft TE JSON document"),
    ('{"format": "tilecraft-te-json", "version": 9, "nodes": []}', "version 9 of the format"),
    ('{"format": "tilecraft-te-json", "version": 1, "root": {"node": 0}, '
     '"nodes": [{"type": "Popen", "fields": {}}]}', r"node 0 \(Popen\): unknown node type 'Popen'"),
    ('{"format": "tilecraft-te-json", "version": 1, "root": {"node": 3}, "nodes": []}', "no node 3 in the table"),
    ('{"format": "tilecraft-te-json", "version": 1, "root": {"node": 0}, '
     '"nodes": [{"type": "Var", "fields": {"name": {"code": "x"}}}]}', "a value the format does not have"),
])
def test_load_json_errors(text, msg):
    with pytest.raises(tvm.TEError, match=msg):
        tvm.ir.load_json(text)


def test_save_json_refuses_what_it_cannot_save():
    with pytest.raises(tvm.TEError, match=r"save_json: cannot save a object"):
        tvm.ir.save_json(object())
    X = te.placeholder((4,), name="X")
    s_init = te.compute((1, 4), lambda _, i: X[i])
    state = te.placeholder((3, 4))
    upd = te.compute((3, 4), lambda t, i: state[t - 1, i] + X[i])
    scan = te.scan(s_init, upd, state, inputs=[X])
    with pytest.raises(tvm.TEError, match=r"save_json: a ScanOp .* cannot be saved yet"):
        tvm.ir.save_json(scan)
