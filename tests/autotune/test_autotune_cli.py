"""The tilecraft command: tune (real, tiny), log summary, log plot."""
import os

import pytest

import tilecraft.autotune as autotune
from tilecraft import cli
from tilecraft.autotune.tuner import RandomTuner

import autotune_fakes as fk

HERE = os.path.dirname(os.path.abspath(__file__))


def fake_log(tmp_path, n=20):
    log = tmp_path / "t.jsonl"
    task = autotune.task.create("test/fake_matmul", args=(64, 64, 64), target="llvm")
    for seed in (0, 1):
        RandomTuner(task, seed=seed).tune(n, fk.fake_option(fail_tile_x_one=True),
                                          callbacks=[autotune.callback.log_to_file(log)])
    return log


def test_log_summary(tmp_path, capsys):
    log = fake_log(tmp_path)
    assert cli.main(["log", "summary", str(log)]) == 0
    out = capsys.readouterr().out
    assert "test/fake_matmul[64, 64, 64] on llvm" in out and "trials: 40" in out
    assert "GFLOP/s" in out and "best config" in out


def test_log_plot_one_curve_per_run(tmp_path, capsys):
    log = fake_log(tmp_path)
    curves = cli.best_curves(log)
    assert len(curves) == 2 and all(len(c) == 20 for c in curves.values())
    assert all(all(a <= b for a, b in zip(c, c[1:])) for c in curves.values())
    out = tmp_path / "curve.png"
    assert cli.main(["log", "plot", str(log), "--out", str(out)]) == 0
    assert out.stat().st_size > 1000


def test_tune_unknown_template_is_a_clear_error():
    with pytest.raises(SystemExit, match="no template"):
        cli.main(["tune", "no_such_template", "1", "--quiet"])


@pytest.mark.slow
def test_tune_user_module_and_resume(tmp_path, capsys):
    log = tmp_path / "cli.jsonl"
    argv = ["tune", "test/real_matmul", "16", "--module", os.path.join(HERE, "autotune_real_templates.py"),
            "--trials", "4", "--log", str(log), "--tuner", "random", "--quiet", "--number", "1", "--repeat", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "best:" in out and "GFLOP/s" in out
    assert len(autotune.record.load_from_file(log)) == 4
    argv[argv.index("--trials") + 1] = "6"
    assert cli.main(argv) == 0
    assert "resuming from" in capsys.readouterr().out
    idx = [inp.config.index for inp, _ in autotune.record.load_from_file(log)]
    assert len(idx) == 6 and len(set(idx)) == 6


def test_export_builds_the_best_config_as_a_library(tmp_path, capsys):
    import json
    import numpy as np
    import tilecraft
    import autotune_real_templates  # noqa: F401
    task = autotune.task.create("test/real_matmul", args=(16,), target="llvm")
    log = tmp_path / "t.jsonl"
    option = autotune.measure_option(builder=fk.FakeBuilder(), runner=fk.FakeRunner(lambda c: 1e-3 + c.index * 1e-6))
    RandomTuner(task, seed=0).tune(5, option, callbacks=[autotune.callback.log_to_file(log)])
    out = tmp_path / "ops"
    assert cli.main(["export", str(log), "--out-dir", str(out)]) == 0
    (entry,) = json.loads((out / "manifest.json").read_text())
    assert entry["task"] == "test/real_matmul" and entry["args"] == [16]
    mod = tilecraft.runtime.load_module(str(out / entry["library"]))
    a, b = np.random.rand(16, 16).astype("float32"), np.random.rand(16, 16).astype("float32")
    c = np.full((16, 16), np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
