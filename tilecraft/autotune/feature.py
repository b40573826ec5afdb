"""TVM's ``autotvm.feature`` module: the features of one schedule's loop nest, in AutoTVM's
layout, computed by the same analysis as the cost model's ``itervar``/``curve`` features
(``loop_features.py``: the loops around the *main store*, the store executed most often).

``get_itervar_feature(s, args)`` is one row per loop of that nest, outermost first; a row is a
list of ``(name, *values)``:

* ``("_attr_", length, nest_level, topdown, bottomup, *one_hot)``: the loop's extent, its depth
  (1 = outermost), the iterations from the outermost loop down to it and from it to the
  innermost, and a one-hot of its kind over ``ANNOTATIONS`` (TVM's order);
* ``(f"{buffer}_{k}", stride, mod, count, reuse, thread_count, thread_reuse)`` for the ``k``-th
  access of ``buffer`` in the main store (the store first, then loads in order): how far the
  access moves when the loop steps (0: independent of the loop), ``-1`` (no modulo, as TVM
  reports for affine indices), the elements touched by the loops from this one inward, and the
  iterations of those loops that re-touch them. ``thread_count``/``thread_reuse`` are 0 (not
  computed here).

Differences from TVM, and why: only the main store's nest has rows (TVM walks every loop of the
function: here the other stages' loops are what the cost model ignores too), and a reduction's
initialising store is not numbered, so TVM's ``C_1``, ``C_2`` of a matmul are ``C_0``, ``C_1``
here; the values of those entries are TVM's (``tests/tvm_api/test_autotvm_feature.py``).
``get_buffer_curve_sample_flatten`` samples two curves per buffer (count and reuse over loop
depth, the cost model's ``curve`` features) where TVM samples four reuse-distance curves.

>>> from tilecraft.autotune import feature
>>> rows = feature.get_itervar_feature(s, [A, B, C], take_log=False)
>>> rows[0][0]
['_attr_', 128, 1, 128, 2097152, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
"""
from __future__ import annotations

import math

import numpy as np

#: TVM's annotation kinds of a loop, in the order of the one-hot in ``_attr_``
ANNOTATIONS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "unrolled", "vectorized", "parallel", "serial", "vthread")
ATTR_FIELDS = ("length", "nest_level", "topdown", "bottomup") + ANNOTATIONS
BUFFER_FIELDS = ("stride", "mod", "count", "reuse", "thread_count", "thread_reuse")
_KIND_NAME = {"SERIAL": "serial", "PARALLEL": "parallel", "VECTORIZED": "vectorized", "UNROLLED": "unrolled"}


def _main_nest(sch, args):
    """The loops (outer first: ``(var, extent, annotation)``) around the main store of the
    lowered schedule, and that store's accesses ``(buffer name, flat index, lanes)``."""
    import tilecraft
    from tilecraft.ir import expr as E
    from tilecraft.ir import stmt as S
    from tilecraft.ir.functor import post_order_visit
    from .loop_features import _int

    stores = []

    def flat(indices):
        return indices[0] if len(indices) == 1 else indices[-1]

    def lanes(i):
        return i.lanes if isinstance(i, E.Ramp) else 1

    def walk(s, loops):
        if isinstance(s, S.For):
            if s.kind.name == "THREAD_BINDING":
                ann = "vthread" if s.thread_tag.startswith("vthread") else s.thread_tag
            else:
                ann = _KIND_NAME.get(s.kind.name, "serial")
            walk(s.body, loops + [(s.loop_var, _int(s.extent), ann)])
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                walk(x, loops)
        elif isinstance(s, S.IfThenElse):
            walk(s.then_case, loops)
            if s.else_case is not None:
                walk(s.else_case, loops)
        elif isinstance(s, (S.Allocate, S.LetStmt, S.AttrStmt)):
            walk(s.body, loops)
        elif isinstance(s, S.BufferStore):
            i = flat(s.indices)
            acc = [(s.buffer.name, i, lanes(i))]
            post_order_visit(s.value, lambda n: acc.append((n.buffer.name, flat(n.indices), lanes(flat(n.indices))))
                             if isinstance(n, E.BufferLoad) else None)
            stores.append((loops, acc))

    walk(tilecraft.lower(sch, args).body, [])
    if not stores:
        return [], []
    return max(stores, key=lambda st: (math.prod(e for _, e, _ in st[0]), len(st[0])))


def _log(x: float) -> float:
    return math.copysign(math.log2(abs(x) + 1.0), x)


def get_itervar_feature(sch, args, take_log: bool = False) -> list:
    """One row per loop around the main store, outermost first (see the module docstring).
    ``take_log``: every value becomes ``sign(v) * log2(|v| + 1)``.

    >>> [r[0][:5] for r in get_itervar_feature(s, [A, B, C])]      # a 128³ matmul
    [['_attr_', 128, 1, 128, 2097152], ['_attr_', 128, 2, 16384, 16384], ['_attr_', 128, 3, 2097152, 128]]
    """
    from .loop_features import _stride

    loops, accesses = _main_nest(sch, args)
    names, seen = [], {}
    for buf, _, _ in accesses:
        names.append(f"{buf}_{seen.get(buf, 0)}")
        seen[buf] = seen.get(buf, 0) + 1
    total = math.prod(e for _, e, _ in loops)
    rows, above = [], 1
    for depth, (var, ext, ann) in enumerate(loops):
        above *= ext
        inner = loops[depth:]
        row = [["_attr_", ext, depth + 1, above, total // (above // ext) if above else 0,
                *[int(ann == a) for a in ANNOTATIONS]]]
        for name, (_, index, lane) in zip(names, accesses):
            count, reuse = lane, 1
            for v, e, _ in inner:
                if _stride(index, v, e) > 0:
                    count *= e
                else:
                    reuse *= e
            st = _stride(index, var, ext)
            row.append([name, int(st) if float(st).is_integer() else st, -1, count, reuse, 0, 0])
        rows.append(row)
    if take_log:
        rows = [[[p[0], *(_log(v) for v in p[1:])] for p in row] for row in rows]
    return rows


def flatten_itervar_feature(fea) -> np.ndarray:
    """The values of ``get_itervar_feature``'s rows, in order, as one float32 vector."""
    return np.array([v for row in fea for pair in row for v in pair[1:]], dtype=np.float32)


def get_itervar_feature_flatten(sch, args, take_log: bool = True) -> np.ndarray:
    """``flatten_itervar_feature(get_itervar_feature(sch, args, take_log))``: schedules of one
    computation with the same loop count give vectors of the same length.

    >>> get_itervar_feature_flatten(s, [A, B, C]).shape       # 3 loops x (15 + 4 accesses x 6)
    (117,)
    """
    return flatten_itervar_feature(get_itervar_feature(sch, args, take_log))


def get_flatten_name(fea) -> list[str]:
    """Names of ``flatten_itervar_feature(fea)``'s entries: ``"<loop>.<entry>.<field>"``.

    >>> get_flatten_name(get_itervar_feature(s, [A, B, C]))[:2]
    ['0._attr_.length', '0._attr_.nest_level']
    """
    out = []
    for k, row in enumerate(fea):
        for pair in row:
            fields = ATTR_FIELDS if pair[0] == "_attr_" else BUFFER_FIELDS
            out += [f"{k}.{pair[0]}.{f}" for f in fields[:len(pair) - 1]]
    return out


def get_buffer_curve_sample_flatten(sch, args, sample_n: int = 30) -> np.ndarray:
    """Per buffer the main store touches (in order of first access), the log2 touched-element
    count and log2 reuse as curves over loop depth (innermost loop first), each sampled at
    ``sample_n`` evenly spaced depths (linear interpolation): ``sample_n * buffers * 2`` values.

    >>> len(get_buffer_curve_sample_flatten(s, [A, B, C], sample_n=30))     # 3 buffers
    180
    """
    rows = get_itervar_feature(sch, args, take_log=True)
    buffers = []
    for pair in rows[0][1:] if rows else ():
        buf = pair[0].rsplit("_", 1)[0]
        if buf not in buffers:
            buffers.append(buf)
    depth = np.arange(len(rows))[::-1]          # innermost loop at depth 0
    at = np.linspace(0, max(len(rows) - 1, 0), sample_n)
    out = []
    for buf in buffers:
        for field in (3, 4):                     # count, reuse
            ys = [max((p[field] for p in row[1:] if p[0].rsplit("_", 1)[0] == buf), default=0.0) for row in rows]
            out.append(np.interp(at, depth[::-1], ys[::-1]) if rows else np.zeros(sample_n))
    return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)
