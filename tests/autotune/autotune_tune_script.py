"""A real tuning run, for the SIGKILL/resume test: python autotune_tune_script.py LOG N_TRIAL."""
import sys

import tilecraft.autotune as autotune

import autotune_real_templates  # noqa: F401 -- registers the templates

if __name__ == "__main__":
    log, n_trial = sys.argv[1], int(sys.argv[2])
    task = autotune.task.create("test/real_matmul", args=(32,), target="llvm")
    tuner = autotune.tuner.RandomTuner(task, seed=int(sys.argv[3]) if len(sys.argv) > 3 else None)
    import os
    if os.path.exists(log):
        tuner.load_history(autotune.record.load_from_file(log))
    option = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=2),
                                     runner=autotune.LocalRunner(number=2, repeat=1))
    tuner.tune(n_trial, option, callbacks=[autotune.callback.log_to_file(log)])
    print("done", len(tuner.visited))
