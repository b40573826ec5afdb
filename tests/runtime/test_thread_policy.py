"""libgomp's wait policy: tilecraft's default (idle pool threads sleep instead of spinning) is in
place before libgomp loads, in JIT-compiled and in loaded libraries, and the user's own
OMP_WAIT_POLICY / GOMP_SPINCOUNT win. libgomp itself reports what it uses (OMP_DISPLAY_ENV)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

RUN_PARALLEL = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tilecraft as tc
    from tilecraft import te
    from tilecraft.runtime.threads import wait_policy
    A = te.placeholder((1000,), name="A")
    C = te.compute((1000,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    f = tc.build(s, [A, C], target="llvm", name="twice")
    if len(sys.argv) > 1:                      # through an exported library instead
        f = tc.runtime.load_module(f.export_library(sys.argv[1]))
    a = np.random.default_rng().standard_normal(1000).astype("float32")
    c = np.full(1000, np.nan, "float32")
    f(a, c)
    assert np.array_equal(c, a * 2)
    print(json.dumps(wait_policy()))
""")


def libgomp_report(env_extra, prelude="", args=()):
    """Run a parallel kernel in a fresh interpreter; return (libgomp's ICVs, wait_policy())."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(PYTHONPATH=REPO, OMP_DISPLAY_ENV="VERBOSE", TILECRAFT_NUM_THREADS="2", **env_extra)
    out = subprocess.run([sys.executable, "-c", prelude + RUN_PARALLEL, *args], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    icvs = dict(line.strip().replace("'", "").split(" = ", 1) for line in out.stderr.splitlines()
                if " = " in line and line.startswith("  "))
    return icvs, json.loads(out.stdout.strip().splitlines()[-1])


def test_default_is_passive_before_libgomp_loads():
    icvs, policy = libgomp_report({})
    assert icvs["OMP_WAIT_POLICY"] == "PASSIVE" and icvs["GOMP_SPINCOUNT"] == "0"
    assert policy == {"source": "tilecraft", "OMP_WAIT_POLICY": "PASSIVE"}


def test_default_applies_to_a_loaded_library(tmp_path):
    icvs, _ = libgomp_report({}, args=[str(tmp_path / "libtwice.so")])
    assert icvs["OMP_WAIT_POLICY"] == "PASSIVE" and icvs["GOMP_SPINCOUNT"] == "0"


@pytest.mark.parametrize("env, want", [
    ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
    ({"GOMP_SPINCOUNT": "5000"}, {"GOMP_SPINCOUNT": "5000"}),
])
def test_the_users_variables_win(env, want):
    icvs, policy = libgomp_report(env)
    for k, v in want.items():
        assert icvs[k] == v
    assert policy == {"source": "user", **env}


def test_libgomp_loaded_before_tilecraft_is_reported():
    """Another library loaded libgomp first: it read its environment already, and wait_policy()
    says so (children still inherit tilecraft's default)."""
    icvs, policy = libgomp_report({}, prelude="import ctypes; ctypes.CDLL('libgomp.so.1')\n")
    assert icvs["GOMP_SPINCOUNT"] == "300000"          # libgomp's own default: spin
    assert policy == {"source": "libgomp (loaded before tilecraft)", "OMP_WAIT_POLICY": "PASSIVE"}
