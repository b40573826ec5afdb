"""The argument checks of the built GPU SDDMM, segment and embedding-bag functions
(``topi/sparse_ops_cuda.py``) without a GPU: fake GPU arrays (``__cuda_array_interface__``) and
a recording module in place of the compiled one, as ``test_sparse_cuda_args.py``; the real
thing runs in ``tests/cuda/test_cuda_sparse_ops.py`` on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from tilecraft.topi.sparse import split_rows
from tilecraft.topi.sparse_ops_cuda import RowsCUDAFunction, SDDMMCUDAFunction

from test_sparse_cuda_args import FakeGPUArray, FakeTorchCSR, Recorder


def test_segments_and_bags_pass_their_arrays():
    rec = Recorder()
    data, offsets, out = FakeGPUArray((40, 16)), FakeGPUArray((6,), "<i4"), FakeGPUArray((5, 16))
    assert RowsCUDAFunction(rec, "segment_sum", "float32", 16)(data, offsets, out=out) is out
    idx, table = FakeGPUArray((40,), "<i4"), FakeGPUArray((100, 16))
    RowsCUDAFunction(rec, "embedding_bag(sum)", "float32", None)(idx, table, offsets, out=out)
    assert [tuple(map(id, c)) for c in rec.calls] == [tuple(map(id, (offsets, data, out))),
                                                      tuple(map(id, (offsets, idx, table, out)))]


def test_pieces_cut_once_per_offsets_object():
    host = np.array([0, 0, 1, 9, 9, 12], np.int32)
    copies, rec = [], Recorder()
    f = RowsCUDAFunction(rec, "segment_mean", "float32", 16, piece_len=3,
                         to_host=lambda a: copies.append(a) or host, to_device=lambda a: a)
    data, offsets, out = FakeGPUArray((12, 16)), FakeGPUArray((6,), "<i4"), FakeGPUArray((5, 16))
    f(data, offsets, out=out)
    f(data, offsets, out=out)
    assert copies == [offsets]
    for call in rec.calls:
        for got, want in zip(call[:2], split_rows(host, 3)):
            np.testing.assert_array_equal(got, want)
        assert call[2] is data and call[3] is out
    f.forget(offsets)
    f(data, offsets, out=out)
    assert len(copies) == 2


def test_sddmm_passes_the_rows_of_the_nonzeros():
    host = np.array([0, 2, 2, 5], np.int32)
    rec = Recorder()
    f = SDDMMCUDAFunction(rec, "float32", 8, to_host=lambda a: host, to_device=lambda a: a)
    A = FakeTorchCSR(3, 4, 5)
    U, V, out = FakeGPUArray((3, 8)), FakeGPUArray((4, 8)), FakeGPUArray((5,))
    assert f(A, U, V, out=out) is out
    (call,) = rec.calls
    np.testing.assert_array_equal(call[0], [0, 0, 2, 2, 2])
    assert call[1] is A.col_indices() and call[2] is A.values() and call[3:] == (U, V, out)


ERRORS = [
    (lambda: (FakeGPUArray((40, 16)), FakeGPUArray((6,), "<i8")), TypeError,
     r"segment_sum: offsets has dtype int64; the GPU kernel takes int32 \(torch: .int\(\); CuPy: .astype\('int32'\)\)"),
    (lambda: (np.zeros((40, 16), "float32"), FakeGPUArray((6,), "<i4")), ValueError,
     r"segment_sum: data is not on the GPU \(a ndarray\); pass a torch / CuPy array on the GPU"),
    (lambda: (FakeGPUArray((40, 8)), FakeGPUArray((6,), "<i4")), ValueError,
     r"segment_sum: data must be 2-D with 16 columns, got the shape \(40, 8\)"),
    (lambda: (FakeGPUArray((40, 16), "<f8"), FakeGPUArray((6,), "<i4")), TypeError,
     r"segment_sum: data has dtype float64; the GPU kernel takes float32"),
    (lambda: (FakeGPUArray((40, 16)), FakeGPUArray((0,), "<i4")), ValueError,
     r"segment_sum: offsets must have \(number of parts \+ 1\) entries, got none"),
]


@pytest.mark.parametrize("make,error,message", ERRORS, ids=["int64", "host", "width", "float64", "no_offsets"])
def test_wrong_segment_arguments_are_refused(make, error, message):
    with pytest.raises(error, match=message):
        RowsCUDAFunction(Recorder(), "segment_sum", "float32", 16)(*make())


def test_wrong_sddmm_and_bag_arguments_are_refused():
    f = SDDMMCUDAFunction(Recorder(), "float32", 8, to_host=lambda a: np.zeros(4, np.int32), to_device=lambda a: a)
    A = FakeTorchCSR(3, 4, 5)
    with pytest.raises(ValueError, match=r"sddmm: U must have a row per row of the matrix \(3\) and V one per column "
                                         r"\(4\); got U \(3, 8\), V \(5, 8\)"):
        f(A, FakeGPUArray((3, 8)), FakeGPUArray((5, 8)))
    with pytest.raises(ValueError, match=r"sddmm: V must be 2-D with 8 columns, got the shape \(4, 6\)"):
        f(A, FakeGPUArray((3, 8)), FakeGPUArray((4, 6)))
    with pytest.raises(ValueError, match=r"sddmm: out must have the shape \(5,\), got \(4,\)"):
        f(A, FakeGPUArray((3, 8)), FakeGPUArray((4, 8)), out=FakeGPUArray((4,)))
    bag = RowsCUDAFunction(Recorder(), "embedding_bag(mean)", "float32", None)
    with pytest.raises(ValueError, match=r"embedding_bag\(mean\): indices must be 1-D, got the shape \(4, 10\)"):
        bag(FakeGPUArray((4, 10), "<i4"), FakeGPUArray((100, 16)), FakeGPUArray((5,), "<i4"))
