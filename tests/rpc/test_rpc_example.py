"""examples/rpc_pool.py runs: a tracker, a server and a short tuning run through RPCRunner."""
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_rpc_pool_example_tunes_through_the_pool():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "rpc_pool.py"), "2"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert r.stdout.count("config ") == 2 and "best:" in r.stdout
    assert "llvm:example" in r.stdout
