"""``tvm.contrib.tedd`` (DOT views of a schedule) and the ``tvm.te.schedule`` pass API
(``InferBound``, ``ScheduleOps``, ``CreateReadGraph``, ``PostDFSOrder``, ``AutoInline*``), in
the spirit of TVM's test_tedd.py and test_te_schedule_bound_inference.py: the DOT text is checked
for structure (every edge between declared nodes) and content, bounds against hand-derived
values, auto-inlined schedules by running them against numpy."""
import re
import sys

import numpy as np
import pytest

import tilecraft as tvm
from tilecraft import te
from tilecraft.contrib import tedd


def _nodes_and_edges(dot: str):
    nodes = set(re.findall(r"^\s*(\w+) \[", dot, re.M))
    edges = re.findall(r"^\s*(\w+)(?::\w+)? -> (\w+)(?::\w+)?", dot, re.M)
    return nodes, edges


def _well_formed(dot: str) -> None:
    assert dot.startswith("digraph ") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    nodes, edges = _nodes_and_edges(dot)
    assert edges, "no edges"
    for a, b in edges:
        assert a in nodes and b in nodes, (a, b)


def _schedule():
    m = 100
    A = te.placeholder((m, 64), name="A")
    B = te.compute((m, 64), lambda i, j: A[i, j] * 2, name="B")
    k = te.reduce_axis((0, 64), "k")
    C = te.compute((m,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=32)
    s[C].parallel(xo)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[B].compute_at(s[C], xo)
    f = s[B].fuse(*s[B].op.axis)
    s[B].vectorize(f)
    return s, A, B, C, xo, xi, ko


def test_dataflow_graph(tmp_path):
    s, A, B, C, *_ = _schedule()
    path = tmp_path / "dfg.dot"
    assert tedd.viz_dataflow_graph(s, dot_file_path=str(path)) is None
    dot = path.read_text()
    _well_formed(dot)
    assert dot == tedd.viz_dataflow_graph(s, output_dot_string=True)
    assert "A<br/>(100, 64)<br/>float32" in dot and "ComputeOp" in dot


def test_schedule_tree_shows_loops_attachment_and_ranges():
    s, A, B, C, xo, xi, ko = _schedule()
    dot = tedd.viz_schedule_tree(s, output_dot_string=True)
    _well_formed(dot)
    stage_b = next(k for k, st in enumerate(s.stages) if st.op is B.op)
    stage_c = next(k for k, st in enumerate(s.stages) if st.op is C.op)
    # B hangs from C's loop 0 (xo), which is parallel with 4 iterations
    assert f"Stage_{stage_c}:IV0 -> Stage_{stage_b}:top;" in dot
    assert "i.outer</td><td>kDataPar</td><td>Parallel</td><td>range(min=0, ext=4)" in dot
    assert "k.outer</td><td>kCommReduce</td><td></td><td>range(min=0, ext=8)" in dot
    assert "Vectorized" in dot and f"ROOT -> Stage_{stage_c}:top;" in dot


def test_itervar_graph_has_every_relation():
    s, *_ = _schedule()
    dot = tedd.viz_itervar_relationship_graph(s, output_dot_string=True)
    _well_formed(dot)
    assert dot.count("label=<Split<br/>factor=32>") == 1 and dot.count("label=<Split<br/>factor=8>") == 1
    assert dot.count("label=Fuse") == 1
    assert "-1: i<br/>" in dot and "0: i.outer<br/>" in dot       # a root axis, then leaf 0


def test_inlined_stage_hangs_from_root_dashed():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    C = te.compute((16,), lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    dot = tedd.viz_schedule_tree(s, output_dot_string=True)
    assert "[style=dashed, label=inline]" in dot


def test_show_svg_without_graphviz_says_what_to_install(monkeypatch):
    s, *_ = _schedule()
    monkeypatch.setitem(sys.modules, "graphviz", None)          # as if not installed
    with pytest.raises(ImportError, match=r"show_svg=True renders with the graphviz Python package "
                                          r"\(pip install graphviz\)"):
        tedd.viz_dataflow_graph(s, show_svg=True)


def test_tedd_refuses_a_non_schedule():
    with pytest.raises(TypeError, match="tedd draws a schedule"):
        tedd.viz_schedule_tree("s")


# -- te.schedule ------------------------------------------------------------------------------

def test_infer_bound_of_split_and_compute_at():
    s, A, B, C, xo, xi, ko = _schedule()
    bounds = tvm.te.schedule.InferBound(s.normalize())
    assert bounds[xo].extent.value == 4 and bounds[xi].extent.value == 32 and bounds[ko].extent.value == 8
    # B is computed at xo: 32 of its rows per iteration, starting at xo * 32
    rb = bounds[B.op.axis[0]]
    assert rb.extent.value == 32 and str(rb.min) == "i.outer * 32"
    assert bounds[B.op.axis[1]].extent.value == 64


def test_schedule_ops_is_the_loop_nest():
    s, *_ = _schedule()
    text = str(tvm.te.schedule.ScheduleOps(s, tvm.te.schedule.InferBound(s)))
    lines = text.splitlines()
    assert lines[0] == "for i.outer in parallel(0, 4):"
    assert lines[1].strip() == 'B = allocate(float32[32, 64], "global")'     # B inside C's outer loop
    assert "for i.j.fused in vectorized(0, 2048):" in text


def test_read_graph_and_post_dfs_order():
    s, A, B, C, *_ = _schedule()
    g = tvm.te.schedule.CreateReadGraph([C.op])
    assert g[C.op] == [B] and g[B.op] == [A] and g[A.op] == []
    assert tvm.te.schedule.PostDFSOrder([C.op], g) == [A.op, B.op, C.op]


@pytest.mark.parametrize("pass_name, inlined", [("AutoInlineElemWise", {"T_add"}),
                                                ("AutoInlineBroadcast", {"T_add", "T_multiply"}),
                                                ("AutoInlineInjective", {"T_add", "T_multiply"})])
def test_auto_inline(rng, pass_name, inlined):
    A = te.placeholder((6, 5), name="A")
    V = te.placeholder((5,), name="V")
    E = A + 1.0                        # elemwise
    Bc = E * V                         # broadcast
    k = te.reduce_axis((0, 5), "k")
    R = te.compute((6,), lambda i: te.sum(Bc[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    getattr(tvm.te.schedule, pass_name)(s)
    assert {st.op.name for st in s.stages if st.attach_type == "inline"} == inlined
    a, v = rng.standard_normal((6, 5)).astype("float32"), rng.standard_normal(5).astype("float32")
    r = np.full(6, np.nan, "float32")
    tvm.build(s, [A, V, R], "llvm")(a, v, r)
    terms = (a.astype("float64") + 1) * v
    # a float32 sum of 5 terms is within a few ulps of the sum of their magnitudes, not of the
    # (possibly cancelling, near-zero) result: rtol alone failed for one seed in ~1000
    assert np.all(np.abs(r - terms.sum(1)) <= 1e-6 * np.abs(terms).sum(1)), (r, terms.sum(1))


def test_schedule_record_snapshots_each_primitive(rng):
    A = te.placeholder((40,), name="A")
    B = te.compute((40,), lambda i: A[i] + 1, name="B")
    C = te.compute((40,), lambda i: B[i] * 2, name="C")
    plain = te.create_schedule(C.op)
    plain[C].split(C.op.axis[0], factor=8)
    assert plain.schedule_record == [] and plain.primitive_record == []        # not asked for
    with tvm.transform.PassContext(config={"te.keep_schedule_record": True}):
        s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], xo)
    s[C].vectorize(xi)
    assert s.primitive_record == ["vanilla", "split", "compute_at", "vectorize"]
    record = s.schedule_record
    assert len(record) == len(s.primitive_record)
    # each snapshot lowers as the schedule did at that point
    assert str(tvm.lower(record[0], [A, C])) == str(tvm.lower(te.create_schedule(C.op), [A, C]))
    assert str(tvm.lower(record[1], [A, C])) == str(tvm.lower(plain, [A, C]))
    assert str(tvm.lower(record[-1], [A, C])) == str(tvm.lower(s, [A, C]))
    dot = tedd.viz_schedule_tree(record[2], output_dot_string=True)
    _well_formed(dot)
    a = rng.standard_normal(40).astype("float32")
    c = np.full(40, np.nan, "float32")
    tvm.build(record[2], [A, C], "llvm")(a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)
