"""A schedule is a record: ``s.to_json()`` → ``json.loads`` → ``replay`` on the same outputs
gives the same printed loop nest, and the replayed schedule records the same steps again."""
import json

import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.schedule import replay

from test_llvm_ops import blocked_matmul, conv2d_nchw, softmax


def vadd():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo)
    s[C].vectorize(xi)
    return s, [A, B, C], [C.op]


def matmul_blocked():
    s, args = blocked_matmul(64, 64, 64)
    return s, args, [args[-1].op]


def softmax_rows():
    s, A, out = softmax(16, 32)
    return s, [A, out], [out.op]


def conv2d_inline_fuse_unroll():
    A, Wt, Apad, Out = conv2d_nchw(1, 2, 8, 8, 2, 3, stride=2, pad=1)
    s = te.create_schedule(Out.op)
    s[Apad].compute_inline()
    n, f, y, x = Out.op.axis
    rc, ry, rx = Out.op.reduce_axis
    s[Out].reorder(n, f, y, rc, ry, rx, x)
    s[Out].parallel(s[Out].fuse(n, f))
    s[Out].unroll(rx)
    return s, [A, Wt, Out], [Out.op]


def cache_read_align_pragma_nparts():
    A = te.placeholder((24, 30), name="A")
    B = te.compute((24, 30), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "global", [B])
    s[AA].storage_align(AA.op.axis[0], 16, 1)
    io, ii = s[B].split(B.op.axis[0], nparts=4)
    s[B].pragma(io, "auto_unroll_max_step", 16)
    s[AA].compute_at(s[B], io)
    return s, [A, B], [B.op]


def rfactor_parallel():
    A = te.placeholder((1024,), name="A")
    k = te.reduce_axis((0, 1024), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, nparts=8)
    SF = s.rfactor(S, ko)
    s[SF].parallel(SF.op.axis[0])
    return s, [A, S], [S.op]


def tile_compute_root():
    A = te.placeholder((20, 20), name="A")
    B = te.compute((20, 20), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((20, 20), lambda i, j: B[j, i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    s[B].compute_at(s[C], yo)
    s[B].compute_root()
    s[B].compute_at(s[C], xo)
    return s, [A, C], [C.op]


SCHEDULES = [vadd, matmul_blocked, softmax_rows, conv2d_inline_fuse_unroll,
             cache_read_align_pragma_nparts, rfactor_parallel, tile_compute_root]


@pytest.mark.parametrize("make", SCHEDULES, ids=lambda f: f.__name__)
def test_json_round_trip_gives_the_same_loop_nest(make):
    s, args, outputs = make()
    text = s.to_json()
    steps = json.loads(text)
    assert steps, "the schedule recorded no steps"
    s2 = replay(steps, outputs)
    assert str(tc.lower(s2, args, simple_mode=True)) == str(tc.lower(s, args, simple_mode=True))
    assert s2.to_json() == text


@pytest.mark.parametrize("make", SCHEDULES, ids=lambda f: f.__name__)
def test_python_form_has_one_line_per_step(make):
    s, args, outputs = make()
    lines = s.to_python().splitlines()
    assert len(lines) == len(json.loads(s.to_json()))
    assert all(line.startswith("s[") or line.startswith("s.") for line in lines)


def test_replay_on_fresh_tensors_of_the_same_definition():
    """Steps name axes and stages by name, so they apply to an identical, separately built graph
    (what a tuning log relies on)."""
    s1, args1, _ = matmul_blocked()
    s2, args2, out2 = matmul_blocked()
    r = replay(json.loads(s1.to_json()), out2)
    assert str(tc.lower(r, args2, simple_mode=True)) == str(tc.lower(s1, args1, simple_mode=True))


def test_replayed_schedule_runs(check_llvm, rand):
    s, (A, B, C), outputs = matmul_blocked()
    r = replay(json.loads(s.to_json()), outputs)
    a, b = rand((64, 64)), rand((64, 64))
    check_llvm(r, [A, B, C], {A: a, B: b}, {C: a @ b}, rtol=1e-4, atol=1e-4)
