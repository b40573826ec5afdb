"""Failure returns of generated CPU code: a local buffer that cannot be allocated makes the function
return STATUS_OUT_OF_MEMORY with a message naming the buffer and the bytes (in the JIT, from a
parallel loop, from another thread, and from an exported library), after freeing what it held.

Before the status mechanism existed every one of these calls died of SIGSEGV (aligned_alloc's NULL
was written through)."""
import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.codegen.llvm import build_llvm
from tilecraft.ir import Allocate, ForKind, Var, const, seq
from tilecraft.runtime import load_module
from tilecraft.runtime.status import (STATUS_OUT_OF_MEMORY, KernelError, KernelMemoryError,
                                      raise_for_status)

sys.path.insert(0, os.path.dirname(__file__))
from llvm_ir_helpers import buf, func, ld, loop, poisoned, rand, st  # noqa: E402

pytestmark = pytest.mark.usefixtures("seeded_ir_helpers")   # rand() replays with the seed

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HUGE = 1 << 44          # elements: 64 TiB of float32, more than any machine's memory


def _oom(name, nbytes, function):
    return re.escape(f"out of memory: could not allocate {nbytes} bytes for buffer '{name}' "
                     f"in function '{function}'")


def scratch_module():
    """C[i] = A[i] * 2 through a heap scratch buffer T of m floats (m is a scalar argument)."""
    n, m = Var("n"), Var("m", "int64")
    A, C = buf("A", (n,)), buf("C", (n,))
    T = buf("T", (m,), scope="local")
    i, j = Var("i"), Var("j", "int64")
    body = Allocate(T, seq(loop(j, m, st(T, j, const(2.0))),
                           loop(i, n, st(C, i, ld(A, i) * ld(T, 0)))))
    return build_llvm(func("scaled", (A, C, n, m), body))


def parallel_module():
    """rows in parallel, each with its own heap buffer `row` of m floats, inside a 80 KB heap
    buffer `Big` of the caller: C[i] = A[i] + Big[i]."""
    n, m = Var("n"), Var("m", "int64")
    A, C = buf("A", (n,)), buf("C", (n,))
    big, row = buf("Big", (20000,), scope="local"), buf("row", (m,), scope="local")
    i, i2, j = Var("i"), Var("i2"), Var("j", "int64")
    rows = loop(i, n, Allocate(row, seq(loop(j, m, st(row, j, ld(A, i))),
                                        st(C, i, ld(row, 0) + ld(big, i)))), ForKind.PARALLEL)
    body = Allocate(big, seq(loop(i2, n, st(big, i2, const(1.5))), rows))
    return build_llvm(func("rows", (A, C, n, m), body))


def test_out_of_memory_in_a_serial_function_is_an_error_and_the_function_still_works():
    mod = scratch_module()
    a = rand(300)
    with pytest.raises(KernelMemoryError, match=_oom("T", HUGE * 4, "scaled")) as info:
        mod(a, poisoned(300), HUGE)
    assert isinstance(info.value, MemoryError) and info.value.status == STATUS_OUT_OF_MEMORY
    assert info.value.function == "scaled"
    c = poisoned(300)
    mod(a, c, 7)
    np.testing.assert_array_equal(c, a * 2)


@pytest.mark.parametrize("threads", [1, 2])
def test_out_of_memory_inside_a_parallel_loop_reaches_the_caller(threads):
    mod = parallel_module()
    old = tc.runtime.get_num_threads()
    tc.set_num_threads(threads)
    try:
        a = rand(97)
        with pytest.raises(KernelMemoryError, match=_oom("row", HUGE * 4, "rows")):
            mod(a, poisoned(97), HUGE)
        c = poisoned(97)
        mod(a, c, 5)
        np.testing.assert_array_equal(c, a + np.float32(1.5))
    finally:
        tc.set_num_threads(old)


def test_messages_are_per_thread():
    """Two threads fail at once with different sizes; each reads its own message."""
    mod = scratch_module()
    a = rand(50)
    seen = {}

    def work(k):
        got = set()
        for _ in range(200):
            try:
                mod(a, poisoned(50), HUGE * k)
            except KernelMemoryError as e:
                got.add(str(e))
        seen[k] = got
    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in (1, 2):
        assert seen[k] == {f"out of memory: could not allocate {HUGE * k * 4} bytes for buffer 'T' "
                           "in function 'scaled'"}


def test_a_failure_frees_what_the_function_held(tmp_path):
    """Under an address-space limit, 40 failing calls that each held a 64 MiB buffer would
    exhaust it if the failure path leaked: the message would then name 'Big', not 'row'."""
    script = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import numpy as np
        from llvm_ir_helpers import buf, func, ld, loop, st
        from tilecraft.codegen.llvm import build_llvm
        from tilecraft.ir import Allocate, ForKind, Var, const, seq
        n, m = Var("n"), Var("m", "int64")
        A, C = buf("A", (n,)), buf("C", (n,))
        big, row = buf("Big", (1 << 24,), scope="local"), buf("row", (m,), scope="local")
        i, j = Var("i"), Var("j", "int64")
        rows = loop(i, n, Allocate(row, seq(loop(j, m, st(row, j, ld(A, i))),
                                            st(C, i, ld(row, 0) + ld(big, i)))), ForKind.PARALLEL)
        mod = build_llvm(func("rows", (A, C, n, m), Allocate(big, seq(st(big, 0, const(1.0)), rows))))
        a, c = np.ones(8, "float32"), np.zeros(8, "float32")
        mod(a, c, 4)
        size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), resource.RLIM_INFINITY))
        messages = set()
        for _ in range(40):
            try:
                mod(a, c, 1 << 27)      # 512 MiB per row: over the limit
            except MemoryError as e:
                messages.add(str(e).split(" for buffer ")[1])
        print(json.dumps(sorted(messages)))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=REPO, TILECRAFT_NUM_THREADS="2"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["'row' in function 'rows'"]


def test_exported_library_reports_the_same_error(tmp_path):
    path = parallel_module().export_library(str(tmp_path / "rowops.so"))
    mod = load_module(path)
    a = rand(64)
    with pytest.raises(KernelMemoryError, match=_oom("row", HUGE * 4, "rows")):
        mod(a, poisoned(64), HUGE)
    c = poisoned(64)
    mod(a, c, 3)
    np.testing.assert_array_equal(c, a + np.float32(1.5))


def test_functions_without_failure_points_are_unchanged():
    """No heap buffer, no failure point: the code references no error machinery (hot path)."""
    n = Var("n")
    A, C = buf("A", (n,)), buf("C", (n,))
    i = Var("i")
    mod = build_llvm(func("twice", (A, C, n), loop(i, n, st(C, i, ld(A, i) * 2.0), ForKind.PARALLEL)))
    raw = mod.get_source("ll-raw")
    assert "tilecraft_error_buffer" not in raw and "snprintf" not in raw and "cmpxchg" not in raw


def test_a_status_without_a_message():
    """Libraries written before messages existed have no getter: the code alone is reported."""
    with pytest.raises(KernelMemoryError, match=re.escape("f returned the error code 1 (out of memory) "
                                                          "without a message")):
        raise_for_status("f", STATUS_OUT_OF_MEMORY, None)
    with pytest.raises(KernelError, match=re.escape("g returned the error code 77 (an unknown failure)")):
        raise_for_status("g", 77, b"")


def test_time_evaluator_reports_a_failure_after_the_warm_up():
    """The warm-up call succeeds; from the 3rd call on the scratch size is huge: reported."""
    mod = scratch_module()
    f = mod["scaled"]
    real, calls = f._cfunc, []

    def growing(a, c, n, m):
        calls.append(1)
        return real(a, c, n, HUGE if len(calls) >= 3 else m)
    f._cfunc = growing
    with pytest.raises(KernelMemoryError, match=_oom("T", HUGE * 4, "scaled")):
        f.time_evaluator(number=5)(rand(16), poisoned(16), 4)
