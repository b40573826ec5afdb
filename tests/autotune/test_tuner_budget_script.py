"""bench/tuner_budget.py without tuning anything: its summary of fake logs (best within each
budget, median over seeds, the XGB-vs-Random ratio) and its error messages."""
import importlib.util
import json
import pathlib

import pytest

from tilecraft.autotune import record
from tilecraft.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult


@pytest.fixture(scope="module")
def tb():
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "tuner_budget.py"
    spec = importlib.util.spec_from_file_location("tuner_budget_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ns(tb, **kw):
    """The driver's arguments at their defaults, changed by ``kw``."""
    args = dict(log_dir="", seeds=1, cores="", gpu=False, parallel=1, measure_cache=False, random_pool=0,
                order="", deadline=0, time_limit=0, builders=1, max_busy=0.3, max_load=1.2, longest_first=False,
                spaces=["conv2d_64"])
    args.update(kw)
    return tb.argparse.Namespace(**args)


def write_log(tb, path, costs, verify=None):
    """A log of distinct configs of conv2d_64 with these costs (None: a failed build)."""
    task = tb.make_task("conv2d_64")
    lines = []
    for k, c in enumerate(costs):
        inp = MeasureInput(task.target, task, task.config_space.get(task.config_space.valid_index(k)))
        res = (MeasureResult((c,), MeasureErrorNo.NO_ERROR) if c is not None
               else MeasureResult((), MeasureErrorNo.COMPILE_HOST, "failed"))
        lines.append(record.encode(inp, res))
    if verify is not None:      # a re-measurement after the run: not a trial
        inp = MeasureInput(task.target, task, task.config_space.get(task.config_space.valid_index(0)))
        lines.append(record.encode(inp, MeasureResult((verify,), MeasureErrorNo.NO_ERROR, stage="verify")))
    path.write_text("\n".join(lines) + "\n")
    return task.flop


def test_summary_takes_the_best_within_each_budget_and_the_median_over_seeds(tb, tmp_path):
    args = ns(tb, log_dir=str(tmp_path), seeds=3)
    costs = {("xgb", 0): [4e-3, 2e-3, None, 1e-3], ("xgb", 1): [2e-3, 2e-3, 2e-3, 2e-3],
             ("xgb", 2): [8e-3, 4e-3, 4e-3, 5e-4], ("random", 0): [4e-3] * 4,
             ("random", 1): [2e-3, 4e-3, 4e-3, 4e-3], ("random", 2): [1e-3, 4e-3, 4e-3, 4e-3]}
    for (t, seed), c in costs.items():
        flop = write_log(tb, tmp_path / f"conv2d_64_{t}_s{seed}.jsonl", c, verify=5e-4)
    got = tb.summarise("conv2d_64", args, [2, 4], {"xgb": 4, "random": 4}, {})
    g = lambda s: flop / s / 1e9  # noqa: E731
    assert got["tuners"]["xgb"]["at"][2] == {"median": g(2e-3), "min": g(4e-3), "max": g(2e-3),
                                             "q1": g(4e-3) + (g(2e-3) - g(4e-3)) / 2, "q3": g(2e-3), "seeds": 3}
    assert got["tuners"]["xgb"]["at"][4]["median"] == g(1e-3)
    assert got["tuners"]["random"]["at"][4] == {"median": g(2e-3), "min": g(4e-3), "max": g(1e-3),
                                                "q1": (g(4e-3) + g(2e-3)) / 2, "q3": (g(2e-3) + g(1e-3)) / 2,
                                                "seeds": 3}
    assert got["tuners"]["xgb"]["curves"][0][2] == 0.0          # a failure is a trial of 0 GFLOP/s
    assert "xgb128_vs_random_at_max" not in got                  # no run reached 128 trials


def test_a_run_cut_off_counts_only_at_the_budgets_it_reached(tb, tmp_path):
    args = ns(tb, log_dir=str(tmp_path), seeds=2)
    write_log(tb, tmp_path / "conv2d_64_ga_s0.jsonl", [1e-3] * 4)
    flop = write_log(tb, tmp_path / "conv2d_64_ga_s1.jsonl", [2e-3, 4e-3, 5e-4])   # cut off by the deadline
    got = tb.summarise("conv2d_64", args, [2, 4], {"ga": 4}, {})
    assert got["tuners"]["ga"]["seeds_done"] == 1
    assert got["tuners"]["ga"]["at"][2]["seeds"] == 2 and got["tuners"]["ga"]["at"][4]["seeds"] == 1
    assert got["tuners"]["ga"]["at"][2]["min"] == flop / 2e-3 / 1e9
    assert got["tuners"]["ga"]["at"][4]["median"] == flop / 1e-3 / 1e9     # not the cut-off run's 5e-4
    assert tb.table(got).splitlines()[2].startswith("| ga | ")


@pytest.mark.parametrize("argv, message", [
    (["conv2d_64", "--tuners", "random,annealing"], "unknown tuner 'annealing'; the tuners: random, ga, xgb"),
    (["sgemm1024_cuda"], "sgemm1024_cuda: needs --gpu space"),
    (["conv2d_64", "--gpu"], "conv2d_64: is not a --gpu space"),
    (["sgemm1024_cuda", "--gpu", "--cores", "1"], "--cores is for CPU spaces"),
    (["sgemm2048_cuda", "--gpu", "--parallel", "4"], "--parallel on the GPU needs --measure-cache"),
])
def test_bad_arguments_say_what_is_wrong(tb, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        tb.main(argv + ["--log-dir", str(tmp_path), "--out", str(tmp_path)])
    assert message in capsys.readouterr().err


def test_a_core_this_process_may_not_use_is_refused(tb, tmp_path):
    with pytest.raises(SystemExit, match=r"--cores: core 100000 is not one this process may run on"):
        tb.main(["conv2d_64", "--cores", "100000", "--log-dir", str(tmp_path), "--out", str(tmp_path)])
    assert json.dumps(tb.busy_fraction([0], 0.05)) and 0.0 <= tb.busy_fraction([0], 0.05)[0] <= 1.0


def test_core_groups_explicit_pairs_and_hyperthread_siblings(tb):
    assert tb.core_groups("0-1,4,6-7", {0, 1, 4, 6, 7}) == [(0, 1), (4,), (6, 7)]
    assert tb.core_groups("each", {3, 1, 2}) == [(1,), (2,), (3,)]
    # no SMT: neighbours two by two (an odd CPU out is left unused)
    assert tb.core_groups("pairs", {0, 1, 2, 3, 4}, siblings=str) == [(0, 1), (2, 3)]
    # SMT with siblings n and n+4: each pair is one physical core's two threads
    sib = {c: f"{c % 4},{c % 4 + 4}" for c in range(8)}
    assert tb.core_groups("pairs", set(range(8)), siblings=sib.get) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    with pytest.raises(SystemExit, match=r"--cores: core 8 is not one this process may run on \(\[0, 1\]\)"):
        tb.core_groups("0-1,8-9", {0, 1})


def test_longest_first_starts_randoms_512_then_the_rest_seed_by_seed(tb, tmp_path):
    args = ns(tb, log_dir=str(tmp_path), seeds=2, spaces=["conv2d_64", "gemm1024"], longest_first=True)
    jobs = tb.plan_jobs(args, {"random": 512, "ga": 256, "xgb": 256})
    assert [(j[0], j[1], j[2]) for j in jobs[:4]] == [("gemm1024", "random", 0), ("gemm1024", "random", 1),
                                                      ("conv2d_64", "random", 0), ("conv2d_64", "random", 1)]
    assert [(j[1], j[2]) for j in jobs[4:8]] == [("ga", 0), ("xgb", 0), ("ga", 1), ("xgb", 1)]
    assert {j[0] for j in jobs[4:8]} == {"gemm1024"} and len(jobs) == 12
    args.longest_first = False
    assert [(j[0], j[1], j[2]) for j in tb.plan_jobs(args, {"random": 512, "ga": 256})][:3] == [
        ("conv2d_64", "random", 0), ("conv2d_64", "ga", 0), ("gemm1024", "random", 0)]


def test_each_run_is_pinned_to_its_group_and_builds_on_each_of_its_cores(tb, tmp_path, monkeypatch):
    started = []

    class FakeRun:
        def __init__(self, cmd, env=None, preexec_fn=None, **kw):
            started.append(cmd)
            self.returncode = 0

        def poll(self):
            return 0

    cpus = sorted(tb.os.sched_getaffinity(0))[:2]
    monkeypatch.setattr(tb.subprocess, "Popen", FakeRun)
    monkeypatch.setattr(tb, "busy_fraction", lambda cores, seconds=1.0: {c: 0.0 for c in cores})
    args = ns(tb, cores="-".join(map(str, cpus)) if len(cpus) == 2 else str(cpus[0]))
    jobs = [("conv2d_64", "ga", s, 8, str(tmp_path / f"s{s}.jsonl")) for s in range(3)]
    ran = tb.run_jobs(jobs, args)
    assert len(started) == 3 and all(r["cores"] == cpus and r["rc"] == 0 for r in ran.values())
    assert all(cmd[cmd.index("--builders") + 1] == str(len(cpus)) for cmd in started)


def test_replot_draws_the_plot_from_an_earlier_runs_json(tb, tmp_path):
    pytest.importorskip("matplotlib")
    args = ns(tb, log_dir=str(tmp_path), seeds=2)
    for seed in range(2):
        write_log(tb, tmp_path / f"conv2d_64_random_s{seed}.jsonl", [4e-3, 2e-3, 1e-3, 1e-3])
    result = tb.summarise("conv2d_64", args, [2, 4], {"random": 4}, {})
    (tmp_path / "budget_conv2d_64.json").write_text(json.dumps(result))
    assert tb.main(["conv2d_64", "--replot", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "budget_conv2d_64.png").stat().st_size > 1000


class FakeBuilder:
    """Builds every config but index ``bad`` (a compile error); remembers what it built."""

    def __init__(self, bad=-1):
        self.n_parallel, self.bad, self.built, self.cleaned = 4, bad, [], []

    def set_task(self, task):
        self.task = task

    def build(self, inputs):
        from tilecraft.autotune.measure import BuildResult
        self.built += [inp.config.index for inp in inputs]
        return [BuildResult(None, (), MeasureErrorNo.COMPILE_HOST, "no", 0.1) if inp.config.index == self.bad
                else BuildResult(f"lib{inp.config.index}", (), MeasureErrorNo.NO_ERROR, "", 0.1) for inp in inputs]

    def cleanup(self, build_results):
        self.cleaned += [br.filename for br in build_results]


class FakeRunner:
    """Times config i as 1e-3 * (1 + i % 7) plus ``offset``; checks that the GPU lock is held."""

    def __init__(self, lock=None, offset=0.0):
        self.lock, self.offset, self.ran = lock, offset, []

    def set_task(self, task):
        pass

    def run(self, inputs, build_results):
        import fcntl
        if self.lock:       # another open file: the lock CachedMeasure holds must refuse it
            with open(self.lock, "a") as f, pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert all(br.filename == f"lib{inp.config.index}" for inp, br in zip(inputs, build_results))
        self.ran += [inp.config.index for inp in inputs]
        return [MeasureResult((1e-3 * (1 + inp.config.index % 7) + self.offset,), MeasureErrorNo.NO_ERROR)
                for inp in inputs]


def test_runs_sharing_a_measurement_cache_measure_each_config_once(tb, tmp_path):
    from tilecraft.autotune import measure_option
    from tilecraft.autotune.tuner import RandomTuner
    task = tb.make_task("conv2d_64")
    cache, lock = str(tmp_path / "measured.jsonl"), str(tmp_path / "gpu.lock")
    bad = tb.pool_random(RandomTuner(task, seed=9), 12)._order[5]        # one of the pool
    runs = []
    for seed, offset in ((0, 0.0), (1, 5.0)):      # the second runner's timings would differ: never used
        m = tb.CachedMeasure(FakeBuilder(bad), FakeRunner(lock, offset), cache, lock)
        tuner = tb.pool_random(RandomTuner(task, seed=seed), 12)
        tuner.tune(12, measure_option(builder=m, runner=m))
        runs.append((m, tuner))
    (m0, t0), (m1, t1) = runs
    assert sorted(m0.builder.built) == sorted(t0.visited)
    assert m1.builder.built == [] and m1.runner.ran == [] and m1.hits == 12      # the same pool, all cached
    assert m0.misses == 12 and bad not in m0.runner.ran                           # a build error is not run
    assert sorted(f for f in m0.builder.cleaned if f) == sorted(f"lib{i}" for i in m0.runner.ran)
    # the second run got the first run's figures, build error included
    assert t1.best_flops == t0.best_flops > 0
    lines = [record.decode(ln) for ln in open(cache).read().splitlines()]
    assert len(lines) == 12 and {inp.config.index for inp, _ in lines} == set(t0.visited)
    assert [res.error_no for inp, res in lines if inp.config.index == bad] == [MeasureErrorNo.COMPILE_HOST]


def test_random_seeds_walk_one_uniform_pool_in_their_own_orders(tb):
    from tilecraft.autotune.tuner import RandomTuner
    task = tb.make_task("conv2d_64")
    valid = {task.config_space.valid_index(k) for k in range(len(task.config_space))}
    orders = []
    for seed in range(3):
        t = tb.pool_random(RandomTuner(task, seed=seed), 40)
        order = []
        while t.has_next():
            batch = t.next_batch(7)
            t.visited.update(c.index for c in batch)
            order += [c.index for c in batch]
        orders.append(order)
    assert all(len(o) == len(set(o)) == 40 for o in orders)
    assert set(orders[0]) == set(orders[1]) == set(orders[2]) and set(orders[0]) <= valid
    assert orders[0] != orders[1] != orders[2]
    # a pool larger than the space is the whole space
    t = tb.pool_random(RandomTuner(task, seed=0), 10**6)
    assert t.visited_max == len(task.config_space) and set(t._order) == valid


def test_a_run_past_the_deadline_is_stopped_and_said_so(tb, tmp_path, monkeypatch, capsys):
    class Endless:
        def __init__(self, cmd, env=None, preexec_fn=None, **kw):
            self.returncode = None
            self.pid = None           # no process group: stop() falls back to terminate()

        def poll(self):
            return self.returncode

        def terminate(self):
            self.returncode = -15

        def wait(self, timeout=None):
            return self.returncode

    monkeypatch.setattr(tb.subprocess, "Popen", Endless)
    args = ns(tb, gpu=True, parallel=2, measure_cache=True, deadline=0.6, log_dir=str(tmp_path))
    jobs = [("sgemm2048_cuda", "xgb", s, 256, str(tmp_path / f"s{s}.jsonl")) for s in range(3)]
    ran = tb.run_jobs(jobs, args)
    assert len(ran) == 2 and all(r["cut_off"] and r["rc"] == -15 for r in ran.values())
    out = capsys.readouterr().out
    assert "cut off at the deadline" in out and "time limit: 1 runs not started" in out


def write_trials(tb, path, trials):
    """A log of conv2d_64 trials given as (valid position, cost)."""
    task = tb.make_task("conv2d_64")
    lines = []
    for k, c in trials:
        inp = MeasureInput(task.target, task, task.config_space.get(task.config_space.valid_index(k)))
        lines.append(record.encode(inp, MeasureResult((c,), MeasureErrorNo.NO_ERROR)))
    path.write_text("\n".join(lines) + "\n")
    return task


def test_top_configs_are_the_k_fastest_within_the_budget(tb):
    trials = [(4, 1.0), (9, 3.0), (2, 0.0), (7, 2.0), (5, 9.0)]
    assert tb.top_configs(trials, 4, 2) == [9, 7]
    assert tb.top_configs(trials, 5, 2) == [5, 9]
    assert tb.top_configs(trials, 3, 5) == [9, 4]          # a failure is never chosen


def test_the_report_judges_every_tuner_by_its_remeasured_choice(tb, tmp_path):
    """Random's best tuning figure was lucky (0.5 ms; 2 ms re-measured), XGB's 1 ms holds: as
    measured Random wins, re-measured XGB does, and the ratio says so."""
    args = ns(tb, log_dir=str(tmp_path), seeds=1, remeasure=2, rounds=3)
    task = write_trials(tb, tmp_path / "conv2d_64_random_s0.jsonl", [(0, 4e-3), (1, 5e-4), (2, 3e-3), (3, 4e-3)])
    write_trials(tb, tmp_path / "conv2d_64_xgb_s0.jsonl", [(5, 4e-3), (6, 1e-3), (7, 4e-3), (8, 4e-3)])
    idx = lambda k: task.config_space.valid_index(k)  # noqa: E731
    assert tb.remeasure_set("conv2d_64", args, {"random": 4, "xgb": 4}, [2, 4]) == sorted(
        idx(k) for k in (0, 1, 2, 5, 6))
    remeasured = {0: 4e-3, 1: 2e-3, 2: 3e-3, 5: 4e-3, 6: 1e-3}
    lines = []
    for k, c in remeasured.items():
        inp = MeasureInput(task.target, task, task.config_space.get(idx(k)))
        lines.append(record.encode(inp, MeasureResult((c, c, c), MeasureErrorNo.NO_ERROR, stage="verify")))
    (tmp_path / "conv2d_64_remeasured.jsonl").write_text("\n".join(lines) + "\n")
    got = tb.summarise("conv2d_64", args, [2, 4], {"random": 4, "xgb": 4}, {})
    g = lambda s: task.flop / s / 1e9  # noqa: E731
    assert got["tuners"]["random"]["at"][4]["median"] == g(5e-4)                 # the lucky tuning figure
    assert got["tuners"]["random"]["at_remeasured"][4]["median"] == g(2e-3)      # best of its top 2, re-measured
    assert got["tuners"]["xgb"]["at_remeasured"][2]["median"] == g(1e-3)
    assert "re-measured" in got["host"]
    rows = tb.table(got).splitlines()
    assert any(r.startswith("| xgb re-measured | ") for r in rows)
    assert any(r.startswith("| random | ") for r in rows)


def test_remeasure_space_times_the_union_of_the_tops_once_in_rounds_and_resumes(tb, tmp_path, monkeypatch):
    import tilecraft.autotune as autotune
    builder, runner = FakeBuilder(), FakeRunner()
    monkeypatch.setattr(autotune, "LocalBuilder", lambda **kw: builder)
    monkeypatch.setattr(autotune, "LocalRunner", lambda **kw: runner)
    args = ns(tb, log_dir=str(tmp_path), seeds=2, remeasure=2, rounds=3)
    write_trials(tb, tmp_path / "conv2d_64_xgb_s0.jsonl", [(0, 4e-3), (1, 5e-4), (2, 3e-3)])
    task = write_trials(tb, tmp_path / "conv2d_64_xgb_s1.jsonl", [(1, 5e-4), (3, 1e-3), (4, 9e-3)])
    want = tb.remeasure_set("conv2d_64", args, {"xgb": 3}, [2, 3])
    assert want == sorted(task.config_space.valid_index(k) for k in (0, 1, 2, 3))
    assert tb.remeasure_space("conv2d_64", args, {"xgb": 3}, [2, 3]) == 4
    assert sorted(builder.built) == want and sorted(runner.ran) == sorted(want * 3)   # built once, 3 rounds
    recs = record.load_from_file(str(tmp_path / "conv2d_64_remeasured.jsonl"))
    assert sorted(inp.config.index for inp, _ in recs) == want
    assert all(res.stage == "verify" and len(res.costs) == 3 for _, res in recs)
    assert sorted(builder.cleaned) == sorted(f"lib{i}" for i in want)
    figures = tb.remeasured_figures("conv2d_64", args)
    assert figures[want[0]] == task.flop / (1e-3 * (1 + want[0] % 7)) / 1e9
    assert tb.remeasure_space("conv2d_64", args, {"xgb": 3}, [2, 3]) == 0        # resumed: nothing left
