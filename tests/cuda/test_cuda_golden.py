"""Golden files for the GPU lowering and the CUDA C (``tests/cuda/golden/``); refresh them with
``pytest tests/cuda --update-golden`` and read the diff."""
from __future__ import annotations

import pathlib

import pytest

import tilecraft
from tilecraft.topi import cuda_schedules as cs
from tilecraft.codegen.cuda import generate_cuda

from .test_allreduce_any_threads import row_reduce
from .test_gpu_correctness import row_sum_tail

pytestmark = pytest.mark.cuda
HERE = pathlib.Path(__file__).parent / "golden"


@pytest.fixture
def cuda_golden(request):
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str):
        path = HERE / f"{name}.txt"
        if update:
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}; create it with `pytest tests/cuda --update-golden`")
        assert text == path.read_text(), f"output differs from {path} (refresh with --update-golden)"
    return check


CASES = {
    "elementwise_vec4": lambda: cs.elementwise(4096),
    "softmax_block": lambda: cs.softmax(64, 1024, threads=128),
    "matmul_vthread_db": lambda: cs.matmul(256, 256, 64, block=(64, 64), threads=(8, 8)),
    "transpose_padded": lambda: cs.transpose(64, 64),
    # split tails of thread-bound reductions: the tail is folded before the all-reduce (issue 8)
    "row_sum_tail": lambda: row_sum_tail(4, 1000, 128),
    "softmax_tail": lambda: cs.softmax(2, 1000, threads=256),
    # 48 threads per row, 2 rows: the all-reduce for rows that start inside a warp
    "row_sum_48x2": lambda: row_reduce(5, 100, 48, rows_per_block=2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_ir_and_cuda_c(name, cuda_golden):
    s, args = CASES[name]()
    func = tilecraft.lower(s, args, name=name, target="cuda")
    cuda_golden(f"{name}.ir", str(func) + "\n")
    src = generate_cuda(func)
    cuda_golden(f"{name}.cu", src[src.index('extern "C"'):])
