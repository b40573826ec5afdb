"""TVM's ``tvm.contrib.tedd`` (Tensor Expression Debug Display): three views of a schedule as
Graphviz DOT text.

* ``viz_dataflow_graph``: a node per stage (name, scope, kind of operation) and per tensor
  (name, shape, dtype); edges from each tensor to the stages that read it and from each stage to
  the tensors it writes.
* ``viz_schedule_tree``: ROOT, and a block per stage: its name and scope on top, a row per loop
  (leaf iteration variable) from outer to inner with its index, name, kind (``kDataPar``,
  ``kCommReduce``, ``kOrdered``), annotation (``Parallel``, ``Vectorized``, ``Unrolled``, the
  thread it is bound to) and range (from ``te.schedule.InferBound``), the operation's body at the
  bottom; an edge from ROOT, or from the loop a stage is computed at, to the stage. Inlined stages
  hang from ROOT on a dashed edge.
* ``viz_itervar_relationship_graph``: per stage, every iteration variable and every split /
  fuse / singleton relation between them (leaves carry their loop index, others -1).

The DOT text needs nothing: ``dot_file_path=`` writes it, ``output_dot_string=True`` returns
it. ``show_svg=True`` renders it with the ``graphviz`` Python package (an optional dependency:
``pip install graphviz``, plus Graphviz's ``dot`` program) and shows the SVG in a notebook.

>>> tedd.viz_dataflow_graph(s, dot_file_path="/tmp/dfg.dot")
>>> text = tedd.viz_schedule_tree(s.normalize(), output_dot_string=True)
"""
from __future__ import annotations

import html

from ..ir.expr import IterKind
from ..ir.stmt import ForKind
from ..schedule.schedule import Fuse, Schedule, Singleton, Split
from ..te.tensor import PlaceholderOp

_KIND = {IterKind.DATA_PAR: "kDataPar", IterKind.REDUCE: "kCommReduce", IterKind.THREAD: "kThreadIndex",
         IterKind.ORDERED: "kOrdered", IterKind.OPAQUE: "kOpaque"}
_ANNOTATION = {ForKind.PARALLEL: "Parallel", ForKind.VECTORIZED: "Vectorized", ForKind.UNROLLED: "Unrolled"}
_COLOR = {"kDataPar": "#FFFFFF", "kCommReduce": "#E6E6FA", "kThreadIndex": "#FFDAB9", "kOrdered": "#E0FFFF",
          "kOpaque": "#DCDCDC"}


def _check(sch) -> None:
    if not isinstance(sch, Schedule):
        raise TypeError(f"tedd draws a schedule (te.create_schedule), got {type(sch).__name__}")


def _q(text) -> str:
    """``text`` escaped for a DOT HTML-like label."""
    return html.escape(str(text), quote=True)


def _id(kind: str, k: int) -> str:
    return f"{kind}_{k}"


def _emit(dot: str, show_svg: bool, dot_file_path: str, output_dot_string: bool):
    if dot_file_path:
        with open(dot_file_path, "w") as f:
            f.write(dot)
    if show_svg:
        try:
            import graphviz
        except ImportError:
            raise ImportError("tedd: show_svg=True renders with the graphviz Python package (pip install "
                              "graphviz) and Graphviz's dot program; without them, write the DOT text with "
                              "dot_file_path= or get it with output_dot_string=True") from None
        svg = graphviz.Source(dot).pipe(format="svg").decode("utf-8")
        try:
            from IPython.display import SVG, display
            display(SVG(svg))
        except ImportError:
            pass
    return dot if output_dot_string else None


def viz_dataflow_graph(sch, show_svg: bool = False, dot_file_path: str = "", output_dot_string: bool = False):
    """The dataflow graph of ``sch`` as DOT (see the module docstring): written to
    ``dot_file_path``, returned with ``output_dot_string=True``, shown with ``show_svg=True``."""
    _check(sch)
    lines = ['digraph "Dataflow Graph" {', "  rankdir=LR;", '  node [fontname="Courier"];']
    tensor_ids: dict = {}
    for k, st in enumerate(sch.stages):
        op = st.op
        for t in op.outputs:
            tid = tensor_ids.setdefault(t, _id("Tensor", len(tensor_ids)))
            shape = ", ".join(str(d) for d in t.shape)
            lines.append(f'  {tid} [shape=oval, label=<{_q(t.name)}<br/>({_q(shape)})<br/>{_q(t.dtype)}>];')
    for k, st in enumerate(sch.stages):
        op = st.op
        if isinstance(op, PlaceholderOp):
            continue
        sid = _id("Stage", k)
        inline = " (inlined)" if st.attach_type == "inline" else ""
        lines.append(f'  {sid} [shape=box, label=<{_q(st.name)}<br/>Scope: {_q(st.scope)}{inline}<br/>'
                     f'{_q(type(op).__name__)}>];')
        for t in op.input_tensors:
            if t in tensor_ids:
                lines.append(f"  {tensor_ids[t]} -> {sid};")
        for t in op.outputs:
            lines.append(f"  {sid} -> {tensor_ids[t]};")
    lines.append("}")
    return _emit("\n".join(lines) + "\n", show_svg, dot_file_path, output_dot_string)


def _ranges(sch) -> dict:
    from ..schedule.te_passes import InferBound
    try:
        return InferBound(sch)
    except Exception:            # a schedule that does not lower yet: draw it without ranges
        return {}


def _loop_row(st, k: int, iv, ranges: dict) -> str:
    kind = _KIND.get(iv.kind, str(iv.kind))
    attr = st.iter_var_attrs.get(iv)
    notes = []
    if attr is not None:
        if attr.bind is not None:
            notes.append(attr.bind.thread_tag or attr.bind.var.name)
        elif attr.kind in _ANNOTATION:
            notes.append(_ANNOTATION[attr.kind])
        if attr.tensor_intrin is not None:
            notes.append("Tensorized")
    r = ranges.get(iv)
    rng = f"range(min={r.min}, ext={r.extent})" if r is not None else "range(n/a)"
    return (f'<tr><td port="IV{k}" bgcolor="{_COLOR.get(kind, "#FFFFFF")}">{k}</td><td>{_q(iv.var.name)}</td>'
            f"<td>{kind}</td><td>{_q(', '.join(notes))}</td><td>{_q(rng)}</td></tr>")


def viz_schedule_tree(sch, show_svg: bool = False, dot_file_path: str = "", output_dot_string: bool = False):
    """The schedule tree of ``sch`` as DOT (see the module docstring)."""
    _check(sch)
    ranges = _ranges(sch)
    lines = ['digraph "Schedule Tree" {', '  node [shape=plaintext, fontname="Courier"];',
             "  ROOT [shape=oval, label=ROOT];"]
    stage_id = {st: _id("Stage", k) for k, st in enumerate(sch.stages)}
    for st in sch.stages:
        op = st.op
        if isinstance(op, PlaceholderOp):
            continue
        rows = [f'<tr><td colspan="5" port="top"><b>{_q(st.name)}</b> Scope: {_q(st.scope)}</td></tr>']
        for k, iv in enumerate(st.leaf_iter_vars):
            rows.append(_loop_row(st, k, iv, ranges))
        body = "; ".join(str(b) for b in getattr(op, "body", ())) or type(op).__name__
        rows.append(f'<tr><td colspan="5">{_q(body[:200])}</td></tr>')
        lines.append(f"  {stage_id[st]} [label=<<table border=\"0\" cellborder=\"1\" cellspacing=\"0\">"
                     f"{''.join(rows)}</table>>];")
        if st.attach_type == "scope" and st.attach_stage is not None:
            parent = st.attach_stage
            k = parent.leaf_iter_vars.index(st.attach_ivar) if st.attach_ivar in parent.leaf_iter_vars else 0
            lines.append(f"  {stage_id[parent]}:IV{k} -> {stage_id[st]}:top;")
        elif st.attach_type == "inline":
            lines.append(f"  ROOT -> {stage_id[st]}:top [style=dashed, label=inline];")
        else:
            lines.append(f"  ROOT -> {stage_id[st]}:top;")
    lines.append("}")
    return _emit("\n".join(lines) + "\n", show_svg, dot_file_path, output_dot_string)


def viz_itervar_relationship_graph(sch, show_svg: bool = False, dot_file_path: str = "",
                                   output_dot_string: bool = False):
    """The iteration-variable relations of every stage of ``sch`` as DOT (see the module
    docstring)."""
    _check(sch)
    ranges = _ranges(sch)
    lines = ['digraph "IterVar Relationship Graph" {', "  rankdir=TB;", '  node [fontname="Courier"];']
    for k, st in enumerate(sch.stages):
        if isinstance(st.op, PlaceholderOp):
            continue
        lines.append(f'  subgraph cluster_{k} {{\n    label=<{_q(st.name)}>;')
        ids: dict = {}

        def node(iv):
            if iv not in ids:
                ids[iv] = f"S{k}_IV{len(ids)}"
                index = st.leaf_iter_vars.index(iv) if iv in st.leaf_iter_vars else -1
                r = ranges.get(iv)
                rng = f"range(min={r.min}, ext={r.extent})" if r is not None else "range(n/a)"
                kind = _KIND.get(iv.kind, str(iv.kind))
                lines.append(f'    {ids[iv]} [shape=box, style=filled, fillcolor="{_COLOR.get(kind, "#FFFFFF")}", '
                             f"label=<{index}: {_q(iv.var.name)}<br/>{kind}<br/>{_q(rng)}>];")
            return ids[iv]
        for iv in st.all_iter_vars:
            node(iv)
        for r, rel in enumerate(st.relations):
            rid = f"S{k}_R{r}"
            if isinstance(rel, Split):
                how = f"factor={rel.factor}" if rel.factor is not None else f"nparts={rel.nparts}"
                lines.append(f"    {rid} [shape=ellipse, label=<Split<br/>{_q(how)}>];")
                lines.append(f"    {node(rel.parent)} -> {rid};")
                lines.append(f'    {rid} -> {node(rel.outer)} [label="outer"];')
                lines.append(f'    {rid} -> {node(rel.inner)} [label="inner"];')
            elif isinstance(rel, Fuse):
                lines.append(f"    {rid} [shape=ellipse, label=Fuse];")
                lines.append(f'    {node(rel.outer)} -> {rid} [label="outer"];')
                lines.append(f'    {node(rel.inner)} -> {rid} [label="inner"];')
                lines.append(f"    {rid} -> {node(rel.fused)};")
            elif isinstance(rel, Singleton):
                lines.append(f"    {rid} [shape=ellipse, label=Singleton];")
                lines.append(f"    {rid} -> {node(rel.iv)};")
        for iv in st.leaf_iter_vars:
            node(iv)
        lines.append("  }")
    lines.append("}")
    return _emit("\n".join(lines) + "\n", show_svg, dot_file_path, output_dot_string)
