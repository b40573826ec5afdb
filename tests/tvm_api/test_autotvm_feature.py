"""``autotvm.feature`` (TVM's itervar / curve feature extraction) and the cost model's transfer
API at TVM's names (``XGBoostCostModel.load_basemodel``, ``base_model``) — ported in spirit from
TVM's ``test_autotvm_feature.py`` and ``test_autotvm_xgboost_model.py``."""
import numpy as np
import pytest

from autotvm_sample import sample_records, sample_task
import tilecraft as tvm
from tilecraft import autotune as autotvm
from tilecraft import te
from tilecraft.autotune import feature


def _gemm(n):
    k = te.reduce_axis((0, n), "k")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.compute(A.shape, lambda y, x: te.sum(A[y, k] * B[k, x], axis=k), name="C")
    return A, B, C, k


def test_itervar_feature_of_a_gemm_has_tvms_values():
    A, B, C, _ = _gemm(128)
    rows = feature.get_itervar_feature(te.create_schedule(C.op), [A, B, C], take_log=False)
    serial = [0] * 9 + [1, 0]                  # one-hot over feature.ANNOTATIONS: serial
    # TVM's numbers for this gemm (its C_1 / C_2 are C_0 / C_1 here: see the module docstring)
    want = [
        {"_attr_": [128, 1, 128, 2097152] + serial, "A_0": [128, -1, 16384, 128, 0, 0],
         "B_0": [0, -1, 16384, 128, 0, 0], "C_0": [128, -1, 16384, 128, 0, 0], "C_1": [128, -1, 16384, 128, 0, 0]},
        {"_attr_": [128, 2, 16384, 16384] + serial, "A_0": [0, -1, 128, 128, 0, 0],
         "B_0": [1, -1, 16384, 1, 0, 0], "C_0": [1, -1, 128, 128, 0, 0], "C_1": [1, -1, 128, 128, 0, 0]},
        {"_attr_": [128, 3, 2097152, 128] + serial, "A_0": [1, -1, 128, 1, 0, 0],
         "B_0": [128, -1, 128, 1, 0, 0], "C_0": [0, -1, 1, 128, 0, 0], "C_1": [0, -1, 1, 128, 0, 0]},
    ]
    assert [{p[0]: list(p[1:]) for p in row} for row in rows] == want


def test_itervar_feature_of_a_scheduled_nest():
    A, B, C, k = _gemm(64)
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    yo, xo, yi, xi = s[C].tile(y, x, 8, 16)
    s[C].reorder(yo, xo, k, yi, xi)
    s[C].vectorize(xi)
    s[C].parallel(yo)
    rows = feature.get_itervar_feature(s, [A, B, C])
    attrs = [r[0] for r in rows]
    kinds = [feature.ANNOTATIONS[attr[5:].index(1)] for attr in attrs]
    assert kinds == ["parallel", "serial", "serial", "serial"]      # xi is a vector lane now
    assert [a[1] for a in attrs] == [8, 4, 64, 8]
    b = {p[0]: p[1:] for p in rows[3][1:]}                         # yi: B[k, xo*16 + xi] does not move
    assert b["B_0"][0] == 0 and b["B_0"][2] == 16 and b["B_0"][3] == 8     # 16 lanes touched, re-read 8 times
    assert b["A_0"][0] == 64                                      # A[yo*8 + yi, k]: a row further


def test_take_log_and_flatten():
    A, B, C, _ = _gemm(32)
    s = te.create_schedule(C.op)
    raw = feature.get_itervar_feature(s, [A, B, C], take_log=False)
    logged = feature.get_itervar_feature(s, [A, B, C], take_log=True)
    flat_raw = feature.flatten_itervar_feature(raw)
    np.testing.assert_allclose(feature.flatten_itervar_feature(logged),
                               np.sign(flat_raw) * np.log2(np.abs(flat_raw) + 1), rtol=1e-6)
    flat = feature.get_itervar_feature_flatten(s, [A, B, C])
    names = feature.get_flatten_name(raw)
    assert len(flat) == len(names) == 3 * (15 + 4 * 6)
    assert names[:2] == ["0._attr_.length", "0._attr_.nest_level"] and "2.B_0.stride" in names


def test_curve_feature_length():
    A, B, C, _ = _gemm(128)
    feas = feature.get_buffer_curve_sample_flatten(te.create_schedule(C.op), [A, B, C], sample_n=30)
    assert len(feas) == 30 * 3 * 2 and np.all(np.isfinite(feas))     # sample_n x buffers x 2 curves


@pytest.mark.parametrize("gpu", [False, True])
def test_feature_shape_is_the_same_for_every_loop_order(gpu):
    """TVM's test_feature_shape: one computation's schedules of the same loop count give
    flattened features of one length (what a cost model needs)."""
    rng = np.random.default_rng(7)
    dims = set()
    for _ in range(6):
        A, B, C, k = _gemm(64)
        s = te.create_schedule(C.op)
        y, x = s[C].op.axis
        axes = list(s[C].tile(y, x, 8, 8)) + [k]
        perm = rng.permutation(5)
        axes = [axes[i] for i in perm]
        s[C].reorder(*axes)
        if gpu:
            pick = [axes[i] for i in range(5) if perm[i] != 4]         # not the reduction axis
            s[C].bind(pick[0], te.thread_axis("blockIdx.x"))
            s[C].bind(pick[1], te.thread_axis("vthread"))
            s[C].bind(pick[2], te.thread_axis("threadIdx.y"))
        flat = feature.get_itervar_feature_flatten(s, [A, B, C])
        dims.add(len(flat))
        if gpu:
            kinds = {feature.ANNOTATIONS[r[0][5:].index(1)] for r in feature.get_itervar_feature(s, [A, B, C])}
            assert {"blockIdx.x", "threadIdx.y"} <= kinds
    assert len(dims) == 1


def test_load_basemodel_then_fit_and_predict():
    pytest.importorskip("xgboost")
    from tilecraft.autotune.cost_model import XGBoostCostModel
    task = sample_task()
    base = XGBoostCostModel(task, feature_type="itervar", loss_type="reg", num_boost_round=20)
    assert base.fit_log(sample_records(40, task), plan_size=32)
    upper = XGBoostCostModel(task, feature_type="itervar", loss_type="reg", num_boost_round=20)
    assert upper.base_model is None
    upper.load_basemodel(base)
    assert upper.base_model is base
    before = upper.predict(np.arange(8))                  # the base model's ranking alone
    np.testing.assert_allclose(before, base.predict(np.arange(8)), rtol=1e-5)
    upper.fit(np.arange(10), np.arange(10), plan_size=32)
    assert upper.predict(np.ones(12, dtype=np.int64)).shape == (12,)
    assert upper.predict(np.ones(8, dtype=np.int64)).shape == (8,)


def test_load_basemodel_errors():
    pytest.importorskip("xgboost")
    from tilecraft.autotune.cost_model import XGBoostCostModel
    task = sample_task()
    with pytest.raises(ValueError, match=r"load_basemodel: the base model is not trained \(call its fit or fit_log first\)"):
        XGBoostCostModel(task).load_basemodel(XGBoostCostModel(task))
    knob = XGBoostCostModel(task, feature_type="knob", num_boost_round=5)
    knob.fit(np.arange(16), np.arange(1, 17))
    with pytest.raises(ValueError, match=r"the base model's features \(knob of task tvm_api/sample_matmul\) are "
                                         r"not this model's \(itervar of task tvm_api/sample_matmul\)"):
        XGBoostCostModel(task, feature_type="itervar").load_basemodel(knob)


def test_module_paths():
    assert autotvm.feature is feature and tvm.autotvm.feature is feature
