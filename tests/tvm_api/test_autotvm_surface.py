"""AutoTVM names and semantics TVM scripts rely on: ``ConfigSpace.get`` of an index that
``multi_filter`` removed, ``apply_history_best(None)``, ``compute_flop`` of integer arithmetic,
``record.encode(protocol=)`` / ``measure_str_key``, ``callback.log_to_file`` of an open file,
``autotvm.measure.LocalRunner``."""
import io
import json

import pytest

from tilecraft import autotune as autotvm
from tilecraft import te
from tilecraft.autotune import record
from tilecraft.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult
from tilecraft.autotune.space import ConfigSpace
from tilecraft.autotune.task import compute_flop


def _filtered_space():
    space = ConfigSpace()
    space.define_split("a", 16)
    space.define_split("b", 16)
    space.multi_filter(lambda e: e["a"].size[-1] * e["b"].size[-1] <= 16)
    return space


def test_get_refuses_an_index_removed_by_multi_filter():
    space = _filtered_space()
    removed = [i for i in range(space.range_length) if not space.is_index_valid(i)]
    assert removed and len(space) == space.range_length - len(removed)
    with pytest.raises(IndexError, match=rf"config index {removed[0]} is removed by the template's "
                                         rf"multi_filter; .* i < len\(space\) = {len(space)}"):
        space.get(removed[0])
    kept = [space.get(space.valid_index(i)) for i in range(len(space))]
    assert all(e["a"].size[-1] * e["b"].size[-1] <= 16 for e in kept)
    assert [e.index for e in kept] == [e.index for e in space]
    with pytest.raises(IndexError, match="out of range"):
        space.get(space.range_length)


def test_compute_flop_of_integer_arithmetic():
    A = te.placeholder((16, 24), "int32", name="A")
    k = te.reduce_axis((0, 24), "k")
    B = te.compute((16,), lambda i: te.sum(A[i, k] * 3 + 1, axis=k), name="B")
    assert compute_flop(te.create_schedule(B.op)) == 16 * 24 * 3     # *, + and the sum's +
    F = te.placeholder((16,), name="F")
    G = te.compute((16,), lambda i: F[i] * 2, name="G")          # float arithmetic: as before
    assert compute_flop(te.create_schedule(G.op)) == 16


def test_compute_flop_of_a_copy_has_nothing_to_count():
    A = te.placeholder((16,), "int32", name="A")
    B = te.compute((16,), lambda i: A[15 - i], name="B")           # index arithmetic only
    with pytest.raises(autotvm.task.FlopCountError, match="the compute graph has no arithmetic"):
        compute_flop(te.create_schedule(B.op))


def _a_record():
    import tilecraft.topi.matmul  # noqa: F401  (registers topi/matmul.llvm)
    task = autotvm.task.create("topi/matmul.llvm", args=(32, 32, 32, "float32"), target="llvm")
    inp = MeasureInput(task.target, task, task.config_space.get(task.config_space.valid_index(3)))
    return inp, MeasureResult((1.5e-4,), MeasureErrorNo.NO_ERROR, "", 0.01, 1.0)


def test_encode_protocol_and_measure_str_key():
    inp, res = _a_record()
    line = record.encode(inp, res, "json")
    assert json.loads(line)["costs"] == [1.5e-4]
    assert record.decode(line, "json")[0].config.index == inp.config.index
    with pytest.raises(ValueError, match="record.encode: protocol 'pickle' is not supported; tilecraft's "
                                         "records are JSON lines only"):
        record.encode(inp, res, protocol="pickle")
    key = record.measure_str_key(inp)
    assert key.startswith(str(inp.target)) and "topi/matmul.llvm" in key and str(inp.config) in key
    assert str(inp.config) not in record.measure_str_key(inp, include_config=False)


def test_log_to_file_of_an_open_file():
    inp, res = _a_record()
    out = io.StringIO()
    cb = autotvm.callback.log_to_file(out)
    cb(None, [inp, inp], [res, res])
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    back = [record.decode(line) for line in lines]
    assert [i.config.index for i, _ in back] == [inp.config.index] * 2 and back[0][1].costs == res.costs


def test_local_runner_at_tvms_path():
    assert autotvm.measure.LocalRunner is autotvm.LocalRunner
    assert autotvm.measure.LocalBuilder is autotvm.LocalBuilder
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        autotvm.measure.Nope


def test_apply_history_best_of_none_falls_back():
    import tilecraft.topi.matmul  # noqa: F401
    task = autotvm.task.create("topi/matmul.llvm", args=(32, 32, 32, "float32"), target="llvm")
    ctx = autotvm.apply_history_best(None)
    with pytest.warns(UserWarning, match="no tuned configuration"):
        cfg = ctx.query(task.target, task.workload)
    assert cfg.is_fallback


def test_fallback_split_resolves_every_factor_and_survives_redefinition():
    from tilecraft.autotune.space import FallbackConfigEntity
    cfg = FallbackConfigEntity()
    cfg.define_split("tile_n", cfg.axis(128), num_outputs=3)
    cfg.fallback_split("tile_n", [-1, 8, 4])
    cfg.define_split("tile_n", cfg.axis(128), num_outputs=3)      # a template run again: kept
    assert cfg["tile_n"].size == [4, 8, 4]
    cfg.define_split("tile_m", 24, num_outputs=3)
    cfg.fallback_split("tile_m", [-1, 4, 5])                     # innermost first: 4, then 3 ≤ 4
    assert cfg["tile_m"].size == [2, 3, 4]
    with pytest.raises(ValueError, match=r"fallback_split: knob 'tile_m' splits into 3 loops, got 2 "
                                         r"constraints \[-1, 4\]"):
        cfg.fallback_split("tile_m", [-1, 4])
    cfg.define_knob("unroll", [0, 1])
    with pytest.raises(ValueError, match="fallback_split: knob 'unroll' is not a split"):
        cfg.fallback_split("unroll", [-1])


def test_fallback_split_schedule_runs(rng):
    """The resolved sizes drive a real schedule: built and run against numpy."""
    import numpy as np
    import tilecraft as tvm
    from tilecraft.autotune.space import FallbackConfigEntity
    cfg = FallbackConfigEntity()
    A = te.placeholder((96,), name="A")
    B = te.compute((96,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    cfg.define_split("t", B.op.axis[0], num_outputs=3)
    cfg.fallback_split("t", [-1, 4, 16])
    assert cfg["t"].size == [2, 3, 16]
    cfg["t"].apply(s, B, B.op.axis[0])
    a = rng.standard_normal(96).astype("float32")
    b = np.full(96, np.nan, "float32")
    tvm.build(s, [A, B], "llvm")(a, b)
    np.testing.assert_allclose(b, a * 2)


def test_task_space_at_tvms_attribute_path():
    assert autotvm.task.space.ConfigSpace is ConfigSpace
    assert autotvm.task.space.FallbackConfigEntity is autotvm.space.FallbackConfigEntity


def test_task_space_and_task_task_at_tvms_module_paths():
    from tilecraft.autotune.task.space import FallbackConfigEntity, OtherOptionEntity, SplitEntity, get_factors
    from tilecraft.autotune.task.task import compute_flop as compute_flop_2
    assert (FallbackConfigEntity, SplitEntity, OtherOptionEntity) == (
        autotvm.space.FallbackConfigEntity, autotvm.space.SplitEntity, autotvm.space.OtherOptionEntity)
    assert get_factors(12) == [1, 2, 3, 4, 6, 12] and compute_flop_2 is compute_flop


def test_tvms_runtime_errors_of_fallback_split_and_flop_count():
    """TVM raises RuntimeError for these; tilecraft's errors are ValueErrors and TVMErrors (RuntimeErrors)."""
    cfg = autotvm.FallbackConfigEntity()
    cfg.define_split("tile_n", cfg.axis(49), num_outputs=3)
    with pytest.raises(RuntimeError, match=r"fallback_split: no split of knob 'tile_n' \(49\) fits the constraints "
                                           r"\[-1, 1, 0\]"):
        cfg.fallback_split("tile_n", [-1, 1, 0])
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i], name="B")
    with pytest.raises(RuntimeError, match="the compute graph has no arithmetic"):
        compute_flop(te.create_schedule(B.op))


def test_dummy_database_save_load_filter():
    from tilecraft.autotune.database import DummyDatabase, filter_inputs
    inp, res = _a_record()
    other_inp = MeasureInput(inp.target, inp.task, inp.task.config_space.get(inp.task.config_space.valid_index(5)))
    failed = MeasureResult((), MeasureErrorNo.RUN_TIMEOUT, "timeout", 4.0, 2.0)
    db = autotvm.database.DummyDatabase()
    assert db.load(inp) is None
    db.save(inp, res)
    db.save(other_inp, failed)
    assert db.load(inp).costs == res.costs
    later = MeasureResult((2.5e-4,), MeasureErrorNo.NO_ERROR, "", 0.01, 3.0)
    db.save(inp, later, extend=True)
    assert db.load(inp).costs == later.costs and len(db.load(inp, get_all=True)) == 2
    db.save(inp, res)                                        # replaces both
    assert len(db.load(inp, get_all=True)) == 1
    ok = db.filter(lambda i, results: all(r.error_no == 0 for r in results))      # TVM's signature
    assert [(i.config.index, r.costs) for i, r in ok] == [(inp.config.index, res.costs)]
    db.save(inp, later, extend=True)
    ok = db.filter(lambda i, results: len(results) == 2)                         # newest of the two
    assert [(i.config.index, r.costs) for i, r in ok] == [(inp.config.index, later.costs)]
    fresh = MeasureInput(inp.target, inp.task, inp.task.config_space.get(inp.task.config_space.valid_index(7)))
    partial, todo = filter_inputs(db, [inp, other_inp, fresh])
    assert [i.config.index for i in todo] == [fresh.config.index]
    assert [p is None for p in partial] == [False, False, True] and partial[0].costs == later.costs
    partial, todo = filter_inputs(db, [inp, other_inp, fresh], retry=True)
    assert [i.config.index for i in todo] == [other_inp.config.index, fresh.config.index]
    assert [p is None for p in partial] == [False, True, True]
    db.flush()
    assert db.load(inp) is None and isinstance(db, DummyDatabase)


def test_autotvm_is_the_autotune_package_under_tvms_name():
    """`tvm.autotvm...` and `from tilecraft import autotvm` reach tilecraft.autotune, loaded only
    when asked for (a fresh interpreter: `import tilecraft` alone does not import it)."""
    import subprocess
    import sys
    code = ("import sys, tilecraft as tvm\n"
            "assert 'tilecraft.autotune' not in sys.modules\n"
            "from tilecraft import autotvm\n"
            "import tilecraft.autotune\n"
            "assert autotvm is tilecraft.autotune and tvm.autotvm.task.create is tilecraft.autotune.task.create\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
