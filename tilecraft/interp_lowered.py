"""An interpreter for lowered CPU IR: run a ``PrimFunc`` from ``lower()`` on numpy arrays.

The reference interpreter (:mod:`tilecraft.interp`) evaluates the TE graph, the specification;
this one executes the statement IR that lowering makes of it, after any pass, so a test can find
the first pass whose output computes something else (:class:`PassChecker`).

What it runs, following the semantics stated in :mod:`tilecraft.ir.expr` and
:mod:`tilecraft.ir.stmt`:

* ``For`` of every kind (serial, parallel, vectorized, unrolled) runs serially, in order; a loop
  bound to a GPU thread index is refused (GPU IR runs in ``codegen/cuda_emulate.py``);
* ``BufferLoad``/``BufferStore`` on n-dimensional buffers (before storage flattening: row-major,
  each index checked against its dimension) and on flattened ones (one element offset, checked
  against the buffer's size); a vector access has a ``Ramp`` or vector index, or a scalar index
  from which its lanes run contiguously, as in the LLVM backend;
* ``Allocate`` makes a fresh buffer each time it runs, filled with poison (NaN for floats, 0x5A
  for integers: ``tilecraft.testing.poison``), so a read of an element that was not written
  shows in the result;
* ``LetStmt``, ``IfThenElse``, ``AttrStmt`` (annotations: the body runs), ``Evaluate``;
* ``VectorReduce`` folds the lanes in halves (``v[:n/2] op v[n/2:]``), as the LLVM backend does,
  so a vectorized float sum gives the same bits in both;
* a tensorized region (``schedule/tensorize.py``) by the intrinsic's TE definition, not its
  lowering (which calls what this interpreter cannot run): a ``buffer_bind_scope`` makes the
  declared buffer a numpy view of its box (checked to lie inside the target), and each
  ``tensor_intrin`` scope runs ``interp.run_tensor_intrin`` on those views;
* ``Ramp``/``Broadcast`` vectors are numpy arrays of their lanes; ``Select(lazy=True)`` evaluates
  only the chosen side (per lane for a vector condition: a load on the other side touches only
  the lanes it selects, as ``masked.load`` does);
* arithmetic in the expression's own dtype: numpy scalars and arrays of that dtype, so integers
  wrap and float32/float16 round as the backend does; integer index arithmetic on loop
  variables is exact (Python ints); floor division and modulo round down, ``truncdiv``/
  ``truncmod`` towards zero; casts as ``interp``: float → int truncates (NaN gives 0), float64 →
  float16 rounds once; math calls use the reference interpreter's numpy functions;
* an out-of-bounds access, an integer division by zero or a loop nest longer than ``budget``
  raises :class:`LoweredInterpError`, naming the buffer, the statement and the loop variables.

It works by translating the function once into Python source (one line per statement, numpy
scalars in the arithmetic) and running that: about a microsecond per statement executed, fast
enough to run after every pass on the shapes tests use. ``python_source(func)`` shows the code.

>>> import numpy as np, tilecraft as tc
>>> from tilecraft import te, interp_lowered
>>> A = te.placeholder((10,), name="A")
>>> B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
>>> s = te.create_schedule(B.op)
>>> xo, xi = s[B].split(B.op.axis[0], factor=4)
>>> a, b = np.arange(10, dtype="float32"), np.empty(10, "float32")
>>> interp_lowered.run(tc.lower(s, [A, B]), [a, b])
>>> b[-1]
np.float32(18.0)
"""
from __future__ import annotations

import re
import sys

import numpy as np

from .interp import InterpError
from .ir import dtype as dt
from .ir import intrinsics
from .ir.expr import BinOp, Const, UnOp, Var
from .ir.printer import stmt_str
from .ir.stmt import (Allocate, AttrStmt, BUFFER_BIND_SCOPE, Buffer, BufferStore, Evaluate, For,
                      ForKind, IfThenElse, LetStmt, PrimFunc, SeqStmt, TENSOR_INTRIN_SCOPE)
from .interp_lowered_runtime import (NAMESPACE, BudgetExceeded, LoweredInterpError, _is_index,  # noqa: F401
                                     _np)
from .testing import poison

# Python refuses more than 20 nested loops and 100 indentation levels in one function: a deeper
# statement becomes a function of its own.
_MAX_LOOPS, _MAX_INDENT = 16, 60


class PassMismatch(AssertionError):
    """A pass produced IR that computes something other than the reference."""


# ------------------------------------------------------------------------------------------------
# running

def run(func: PrimFunc, arrays, scalars: dict | None = None, budget: int | None = None) -> int:
    """Run ``func`` (from ``lower()``, any pass, CPU) on numpy ``arrays`` (one per buffer
    parameter, in order; written in place, C-contiguous). ``scalars`` maps scalar parameters
    (``te.var`` objects or their names) to values; a variable that is a whole dimension of a
    buffer's shape is taken from the array. Returns the number of loop iterations run; more than
    ``budget`` raises :class:`BudgetExceeded`.

    >>> steps = run(tc.lower(s, [A, B]), [a, b], budget=10_000)
    """
    return compile_lowered(func)(arrays, scalars, budget)


def python_source(func: PrimFunc) -> str:
    """The Python code :func:`run` executes for ``func`` (for reading when a check fails).

    >>> print(python_source(tc.lower(s, [A, B])))
    """
    return compile_lowered(func).source


def compile_lowered(func: PrimFunc) -> "_Program":
    """Translate ``func`` once; the result can be called like :func:`run` many times.

    >>> prog = compile_lowered(f); prog([a, b]); prog([a2, b2])
    """
    return _Gen(func).program()


class _Program:
    def __init__(self, func, source, namespace, line_info, var_names):
        self.func, self.source, self.line_info, self.var_names = func, source, line_info, var_names
        code = compile(source, _FILENAME, "exec")
        exec(code, namespace)
        self.entry = namespace["_main"]

    def __call__(self, arrays, scalars=None, budget=None) -> int:
        bufs, values = _bind(self.func, arrays, scalars or {})
        counter = [0, budget if budget is not None else sys.maxsize]
        try:
            with np.errstate(all="ignore"):
                self.entry(bufs, values, counter)
        except BudgetExceeded:
            raise
        except (LoweredInterpError, InterpError) as err:      # InterpError: a tensorized region
            raise LoweredInterpError(self._where(err, err.args[0])) from None
        except ZeroDivisionError as err:
            raise LoweredInterpError(self._where(err, "integer division by zero")) from None
        return counter[0]

    def _where(self, err, msg: str) -> str:
        """``msg`` plus the statement that raised it and the loop variables' values there."""
        tb, frame = err.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == _FILENAME:
                frame = tb
            tb = tb.tb_next
        if frame is None:
            return msg
        stmt, names = self.line_info.get(frame.tb_lineno, (None, ()))
        local = frame.tb_frame.f_locals
        env = ", ".join(f"{self.var_names[k]}={local[k]}" for k in names
                        if isinstance(local.get(k), (int, np.integer)))
        where = f"\n  in `{_short(stmt)}`" if stmt is not None else ""
        return f"{msg} in function '{self.func.name}'{where}" + (f"\n  with {env}" if env else "")


_FILENAME = "<lowered IR>"


def _bind(func: PrimFunc, arrays, scalars: dict):
    """Arrays as flat views, in buffer-parameter order, and the scalar parameters' values."""
    buffers = [p for p in func.params if isinstance(p, Buffer)]
    if len(arrays) != len(buffers):
        raise LoweredInterpError(f"function '{func.name}' takes {len(buffers)} arrays "
                                 f"({', '.join(b.name for b in buffers)}), got {len(arrays)}")
    env = {}
    for v, x in scalars.items():
        env[v.name if isinstance(v, Var) else v] = x
    flat = []
    for b, a in zip(buffers, arrays):
        a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
        if a.dtype != _np(b.dtype):
            raise LoweredInterpError(f"'{b.name}' is {b.dtype}, got an array of {a.dtype}")
        if not a.flags.c_contiguous:
            raise LoweredInterpError(f"'{b.name}': the array must be C-contiguous")
        for d, s in zip(b.shape, a.shape):
            if isinstance(d, Var):
                env.setdefault(d.name, s)
        flat.append(a.reshape(-1))
    values = []
    for p in func.params:
        if isinstance(p, Var):
            if p.name not in env:
                raise LoweredInterpError(f"no value for the scalar parameter '{p.name}' of '{func.name}' "
                                         f"(pass it in scalars=)")
            values.append(_np(p.dtype).type(env[p.name]) if not _is_index(p.dtype) else int(env[p.name]))
    return flat, values


_BIN_SYMBOL = {
    BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.DIV: "/", BinOp.EQ: "==",
    BinOp.NE: "!=", BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=",
    BinOp.AND: "&", BinOp.OR: "|", BinOp.BITAND: "&", BinOp.BITOR: "|", BinOp.BITXOR: "^",
    BinOp.SHL: "<<", BinOp.SHR: ">>",
}
_DIV_HELPER = {BinOp.FLOORDIV: "_floordiv", BinOp.FLOORMOD: "_floormod", BinOp.TRUNCDIV: "_truncdiv",
               BinOp.TRUNCMOD: "_truncmod"}


# ------------------------------------------------------------------------------------------------
# translation to Python

class _Fn:
    """One generated Python function: its parameters and lines ((indent, text, stmt))."""

    def __init__(self, name: str, params: list):
        self.name, self.params, self.lines = name, params, []


class _Gen:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.ns = dict(NAMESPACE)
        self.names: dict = {}        # Var or Buffer -> Python name, for what is in scope
        self.scope: list = []        # (key, shadowed name or None), innermost last
        self.var_names: dict = {}    # Python name -> IR variable name (for error messages)
        self.buf_info: dict = {}     # Buffer -> (Python name, size name, stride names or None)
        self.count = 0
        self.fns: list = []
        self.fn = None
        self.indent = 0
        self.loops = 0
        self.mask = None             # Python expression of the lane mask inside a lazy vector select

    # --- names ----------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{re.sub(r'[^0-9a-zA-Z_]', '_', hint)}_{self.count}"

    def bind(self, key, hint: str) -> str:
        name = self.fresh(hint)
        self.scope.append((key, self.names.get(key)))
        self.names[key] = name
        if isinstance(key, Var):
            self.var_names[name] = key.name
        return name

    def unbind(self, saved: int):
        """Leave the scopes opened since ``len(self.scope) == saved`` (restoring shadowed names)."""
        while len(self.scope) > saved:
            key, old = self.scope.pop()
            if old is None:
                del self.names[key]
            else:
                self.names[key] = old

    def constant(self, value, dtype: str) -> str:
        if dt.is_bool(dtype):
            return "True" if value else "False"
        if _is_index(dtype):
            return repr(int(value))
        name = f"_k{len(self.ns)}"
        self.ns[name] = _np(dtype).type(value)
        return name

    def dtype_name(self, dtype: str) -> str:
        name = f"_T_{dt.element_of(dtype)}"
        self.ns[name] = _np(dtype)
        return name

    # --- emitting -------------------------------------------------------------------------
    def line(self, text: str, stmt=None):
        """Emit a line; one that runs ``stmt`` remembers it and the variables in scope, for
        error messages."""
        if stmt is not None:
            stmt = (stmt, [n for k, n in self.names.items() if isinstance(k, Var)])
        self.fn.lines.append((self.indent, text, stmt))

    def program(self) -> _Program:
        f = self.func
        self.fn = _Fn("_main", ["_bufs", "_scalars", "_ctr"])
        self.fns.append(self.fn)
        self.indent = 1
        buffers = [p for p in f.params if isinstance(p, Buffer)]
        for k, b in enumerate(buffers):
            self.line(f"{self.bind(b, b.name)} = _bufs[{k}]")
        for k, v in enumerate(p for p in f.params if isinstance(p, Var)):
            self.line(f"{self.bind(v, v.name)} = _scalars[{k}]")
        for b in buffers:
            name = self.names[b]
            self.declare_buffer(b, name, from_shape=True)
            want = " * ".join(f"({self.expr(d)})" for d in b.shape) or "1"
            self.line(f"if {name}_n != {want}: _bad_size({b.name!r}, {name}_n, {want})")
        self.stmt(f.body)
        self.line("return None")
        return self.assemble()

    def assemble(self) -> _Program:
        out, line_info = [], {}
        for fn in self.fns:
            out.append(f"def {fn.name}({', '.join(fn.params)}):")
            for indent, text, stmt in fn.lines:
                out.append("    " * indent + text)
                if stmt is not None:
                    line_info[len(out)] = stmt
        src = "\n".join(out) + "\n"
        return _Program(self.func, src, self.ns, line_info, self.var_names)

    def declare_buffer(self, b: Buffer, name: str, from_shape: bool):
        """Size and (for n-d access) row-major strides of ``b`` as Python locals."""
        size = f"{name}_n"
        if from_shape:
            self.line(f"{size} = {name}.size")
        strides = None
        if len(b.shape) > 1:
            dims = [self.expr(d) for d in b.shape]
            strides = []
            acc = "1"
            for d in range(len(dims) - 1, -1, -1):
                s = f"{name}_s{d}"
                if b.strides is not None:
                    self.line(f"{s} = {self.expr(b.strides[d])}")
                else:
                    self.line(f"{s} = {acc}")
                strides.insert(0, s)
                acc = f"{s} * ({dims[d]})"
            dim_names = []
            for d, e in enumerate(dims):
                self.line(f"{name}_d{d} = {e}")
                dim_names.append(f"{name}_d{d}")
            strides = (strides, dim_names)
        self.buf_info[b] = (name, size, strides)

    def buffer(self, b: Buffer):
        if b in self.names:
            return self.buf_info[b]
        for k in self.func.params:      # a parameter referred to by another Buffer of its name
            if isinstance(k, Buffer) and k.name == b.name:
                return self.buf_info[k]
        raise LoweredInterpError(f"buffer '{b.name}' is neither a parameter nor allocated "
                                 f"where it is used")

    # --- statements -----------------------------------------------------------------------
    def stmt(self, s):
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                self.stmt(x)
        elif t is BufferStore:
            self.store(s)
        elif t is For:
            self.loop(s)
        elif t is IfThenElse:
            if dt.lanes(s.condition.dtype) != 1:
                raise LoweredInterpError(f"an if with the vector condition `{s.condition}`")
            self.nested(s, self._if)
        elif t is LetStmt:
            saved = len(self.scope)
            value = self.expr(s.value)
            name = self.bind(s.var, s.var.name)
            self.line(f"{name} = {value}", s)
            self.stmt(s.body)
            self.unbind(saved)
        elif t is Allocate:
            saved = len(self.scope)
            b = s.buffer
            name = self.bind(b, b.name)
            if b.strides is not None and b.shape:     # explicit (padded) strides: row 0's stride
                size = f"({self.expr(b.strides[0])}) * ({self.expr(b.shape[0])})"
            else:
                size = " * ".join(f"({self.expr(d)})" for d in b.shape) or "1"
            self.line(f"{name} = _alloc({size}, {self.dtype_name(b.dtype)})", s)
            self.line(f"{name}_n = {name}.size")
            self.declare_buffer(b, name, from_shape=False)
            self.stmt(s.body)
            self.unbind(saved)
        elif t is AttrStmt:
            if s.key == "cuda_kernel":
                raise LoweredInterpError("a CUDA kernel: run GPU IR with codegen.cuda_emulate")
            if s.key == BUFFER_BIND_SCOPE:
                self.bind_view(s)
            elif s.key == TENSOR_INTRIN_SCOPE:
                self.tensor_intrin(s)
            else:
                self.stmt(s.body)
        elif t is Evaluate:
            if not isinstance(s.value, Const):
                self.line(self.expr(s.value), s)
        elif s is None:
            return
        else:
            raise LoweredInterpError(f"cannot interpret a {t.__name__} statement")

    def bind_view(self, s):
        """``buffer_bind_scope``: the declared buffer is a view of its box for the body."""
        declared, region = s.node, s.value
        name, _, strides = self.buffer(region.buffer)
        if region.strides:                      # after storage flattening: as laid out
            st = [self.expr(x) for x in region.strides]
        else:                                   # before: this interpreter's row-major strides
            st = strides[0] if strides is not None else ["1"]
        begin = [self.expr(b) for b in region.begin]
        if len(st) != len(begin):
            raise LoweredInterpError(f"the box of '{region.buffer.name}' bound to '{declared.name}' has "
                                     f"{len(begin)} dimensions, the buffer {len(st)}")
        start = len(begin) - len(declared.shape)
        offset = " + ".join(f"({b}) * ({x})" for b, x in zip(begin, st)) or "0"
        shape = ", ".join(self.expr(x) for x in region.extent[start:])
        saved = len(self.scope)
        view = self.bind(declared, declared.name)
        self.line(f"{view} = _view({name}, {offset}, ({shape},), ({', '.join(st[start:])},), "
                  f"{declared.name!r}, {region.buffer.name!r})", s)
        if declared.strides is None:
            # loads and stores (an extern stage's body) address a flat array: a flat view of the
            # same memory (None where the box is not contiguous: a tensor intrinsic's operand,
            # which only the intrinsic reads, through the n-d view)
            flat = self.fresh(f"{declared.name}_flat")
            self.line(f"{flat} = _flat_view({view})")
            self.declare_buffer(declared, flat, from_shape=False)
            self.line(f"{flat}_n = {flat}.size if {flat} is not None else 0")
        self.stmt(s.body)
        self.unbind(saved)

    def tensor_intrin(self, s):
        """``tensor_intrin``: run the intrinsic's TE definition on the bound views (the
        lowering it holds calls functions this interpreter cannot run)."""
        intrin, part = s.node, s.value
        n_in = len(intrin.inputs)
        bufs = intrin.buffers[n_in:] if part == "reset" else intrin.buffers
        missing = [b.name for b in bufs if b not in self.names]
        if missing:
            raise LoweredInterpError(f"the {part} of tensor intrinsic '{intrin.name}' runs where its "
                                     f"buffer(s) {', '.join(missing)} are bound to nothing")
        key = f"_intrin{len(self.ns)}"
        self.ns[key] = intrin
        ins = [self.names[b] for b in intrin.buffers[:n_in]] if part != "reset" else []
        outs = [self.names[b] for b in intrin.buffers[n_in:]]
        scalars = ""
        if intrin.scalar_params:          # bound by the LetStmts tensorize puts around the use
            self.ns[key + "_sp"] = intrin.scalar_params
            scalars = ", {" + ", ".join(f"{key}_sp[{k}]: {self.expr(p)}" for k, p in enumerate(intrin.scalar_params)) + "}"
        self.line(f"_run_intrin({key}, {part!r}, [{', '.join(ins)}], [{', '.join(outs)}]{scalars}); _ctr[0] += 1", s)

    def nested(self, s, emit):
        """Emit a compound statement, in a function of its own when nested too deeply."""
        if self.indent < _MAX_INDENT and self.loops < _MAX_LOOPS:
            emit(s)
            return
        outer, outer_indent, outer_loops = self.fn, self.indent, self.loops
        params = list(dict.fromkeys(["_ctr"] + self.live_names()))
        self.fn = _Fn(self.fresh("_part"), params)
        self.fns.append(self.fn)
        self.indent, self.loops = 1, 0
        emit(s)
        self.line("return None")
        inner = self.fn
        self.fn, self.indent, self.loops = outer, outer_indent, outer_loops
        self.line(f"{inner.name}({', '.join(params)})")

    def live_names(self) -> list:
        """The Python names a statement here may read: variables, buffers and their sizes."""
        names = list(self.names.values())
        for b, name in self.names.items():
            if isinstance(b, Buffer) and b in self.buf_info:
                _, size, strides = self.buf_info[b]
                names.append(size)
                if strides is not None:
                    names += strides[0] + strides[1]
        return names

    def _if(self, s):
        self.line(f"if {self.expr(s.condition)}:", s)
        self.indent += 1
        self.body(s.then_case)
        self.indent -= 1
        if s.else_case is not None:
            self.line("else:")
            self.indent += 1
            self.body(s.else_case)
            self.indent -= 1

    def body(self, s):
        n = len(self.fn.lines)
        self.stmt(s)
        if len(self.fn.lines) == n:
            self.line("pass")

    def loop(self, s: For):
        if s.kind is ForKind.THREAD_BINDING or s.thread_tag:
            raise LoweredInterpError(f"the loop '{s.loop_var.name}' is bound to {s.thread_tag or 'a thread'}: "
                                     f"this interpreter runs CPU IR (GPU IR runs in codegen.cuda_emulate)")
        self.nested(s, self._loop)

    def _loop(self, s: For):
        lo, ext = self.fresh("lo"), self.fresh("ext")
        self.line(f"{lo} = {self.expr(s.min)}; {ext} = {self.expr(s.extent)}", s)
        self.line(f"_ctr[0] += {ext} if {ext} > 0 else 0")
        self.line(f"if _ctr[0] > _ctr[1]: _budget_exceeded(_ctr)")
        saved = len(self.scope)
        v = self.bind(s.loop_var, s.loop_var.name)
        self.line(f"for {v} in range({lo}, {lo} + {ext}):", s)
        self.indent += 1
        self.loops += 1
        self.body(s.body)
        self.loops -= 1
        self.indent -= 1
        self.unbind(saved)

    def store(self, s: BufferStore):
        name, size, strides = self.buffer(s.buffer)
        value = self.expr(s.value)
        lanes = max(dt.lanes(s.value.dtype), dt.lanes(s.indices[0].dtype) if s.indices else 1)
        if lanes > 1:
            idx = self.flat_index(s.buffer, s.indices, "store")
            self.line(f"_vstore({name}, {idx}, {value}, {lanes}, {s.buffer.name!r})", s)
            return
        if strides is not None and len(s.indices) > 1:
            idx = self.nd_index(s.buffer, s.indices, "store")
            self.line(f"{name}[{idx}] = {value}", s)
            return
        idx = self.flat_index(s.buffer, s.indices, "store")
        # ``_s``, not ``_t``: the value is evaluated after the index, and its loads use ``_t``
        self.line(f"if 0 <= (_s := {idx}) < {size}: {name}[_s] = {value}", s)
        self.line(f"else: _oob('store', {s.buffer.name!r}, _s, {size})", s)

    def flat_index(self, b, indices, what) -> str:
        if len(indices) == 1:
            return self.expr(indices[0])
        if not indices:
            return "0"
        return self.nd_index(b, indices, what)

    def nd_index(self, b, indices, what) -> str:
        """Row-major offset of an n-d access, each index checked against its dimension."""
        name, size, strides = self.buffer(b)
        if strides is None or len(indices) != len(strides[0]):
            raise LoweredInterpError(f"'{b.name}' has {len(b.shape)} dimensions but is accessed with "
                                     f"{len(indices)} indices")
        if any(dt.lanes(i.dtype) != 1 for i in indices):
            raise LoweredInterpError(f"a vector index into the {len(b.shape)}-d buffer '{b.name}' "
                                     f"(vector accesses come after storage flattening)")
        idx = [self.expr(i) for i in indices]
        temps = [self.fresh("_i") for _ in idx]      # an index may itself hold an n-d load
        check = " and ".join(f"0 <= ({t} := {e}) < {d}" for t, e, d in zip(temps, idx, strides[1]))
        offset = " + ".join(f"{t} * {s}" for t, s in zip(temps, strides[0]))
        return (f"(({offset}) if ({check}) else _oob_dim({what!r}, {b.name!r}, ({', '.join(idx)},), "
                f"({', '.join(strides[1])},)))")

    # --- expressions ----------------------------------------------------------------------
    def expr(self, e) -> str:
        fn = getattr(self, "e_" + type(e).__name__, None)
        if fn is None:
            raise LoweredInterpError(f"cannot interpret a {type(e).__name__} expression: `{e}`")
        return fn(e)

    def e_Var(self, e):
        name = self.names.get(e)
        if name is None:
            raise LoweredInterpError(f"the variable '{e.name}' is used outside the loop or let that "
                                     f"binds it (and is not a parameter)")
        return name

    e_SizeVar = e_Var

    def e_Const(self, e):
        return self.constant(e.value, e.dtype)

    def e_Binary(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        d, lanes = e.a.dtype, dt.lanes(e.dtype)
        if e.op in _DIV_HELPER:
            if dt.is_float(d):
                raise LoweredInterpError(f"'{e.op.value}' on floats in `{e}`")
            if lanes == 1 and isinstance(e.b, Const) and e.b.value != 0 and e.op in (BinOp.FLOORDIV, BinOp.FLOORMOD):
                return f"({a} {'//' if e.op is BinOp.FLOORDIV else '%'} {b})"
            mask = f", {self.mask}" if self.mask and lanes > 1 else ""
            return f"{_DIV_HELPER[e.op]}({a}, {b}{mask})"
        if e.op in (BinOp.MIN, BinOp.MAX):
            if lanes > 1:
                return f"np.{'minimum' if e.op is BinOp.MIN else 'maximum'}({a}, {b})"
            if dt.is_float(d):
                return f"{'_fmin' if e.op is BinOp.MIN else '_fmax'}({a}, {b})"
            return f"{'min' if e.op is BinOp.MIN else 'max'}({a}, {b})"
        if e.op is BinOp.DIV and not dt.is_float(d):
            raise LoweredInterpError(f"'/' on integers in `{e}` (integer division is truncdiv)")
        return f"({a} {_BIN_SYMBOL[e.op]} {b})"

    def e_Unary(self, e):
        a = self.expr(e.a)
        if e.op is UnOp.NOT:
            return f"np.logical_not({a})" if dt.lanes(e.dtype) > 1 else f"(not {a})"
        return f"(-{a})"

    def e_Cast(self, e):
        v, src, dst = self.expr(e.value), e.value.dtype, e.dtype
        if dt.element_of(src) == dt.element_of(dst):
            return v
        if dt.is_bool(dst):
            return f"_to_bool({v})"
        if dt.is_float(dst):
            return f"_to_float({v}, {self.dtype_name(dst)})"
        if dt.is_float(src):
            return f"_float_to_int({v}, {self.dtype_name(dst)})"
        return f"_cast_int({v}, {self.dtype_name(dst)})"

    def e_Select(self, e):
        c = self.expr(e.condition)
        if dt.lanes(e.condition.dtype) == 1:
            return f"({self.expr(e.true_value)} if {c} else {self.expr(e.false_value)})"
        if not e.lazy:
            return f"np.where({c}, {self.expr(e.true_value)}, {self.expr(e.false_value)})"
        outer, m = self.mask, self.fresh("_m")
        self.mask = m
        t, f = self.expr(e.true_value), self.expr(e.false_value)
        self.mask = outer
        if outer is None:
            return f"_lazy_select({c}, lambda {m}: {t}, lambda {m}: {f})"
        return f"_lazy_select_masked({c}, {outer}, lambda {m}: {t}, lambda {m}: {f})"

    def e_Call(self, e):
        if e.name == "reinterpret":
            (x,) = e.args
            return f"_reinterpret({self.expr(x)}, {self.dtype_name(x.dtype)}, {self.dtype_name(e.dtype)})"
        if intrinsics.lookup(e.name) is None:
            raise LoweredInterpError(f"the interpreter does not know the intrinsic '{e.name}' in `{e}`")
        # the table's numpy reference (float16 computes in float32 and rounds once)
        call = f"_intrinsic({e.name!r}, ({''.join(self.expr(a) + ', ' for a in e.args)}), {e.dtype!r})"
        if dt.is_bool(e.dtype):
            return f"_to_bool({call})"
        return f"_to_float({call}, {self.dtype_name(e.dtype)})" if dt.is_float(e.dtype) else \
            f"np.asarray({call}).astype({self.dtype_name(e.dtype)})[()]"

    def e_Let(self, e):
        saved = len(self.scope)
        value = self.expr(e.value)
        name = self.bind(e.var, e.var.name)
        body = self.expr(e.body)
        self.unbind(saved)
        return f"(({name} := {value}), {body})[1]"

    def e_VectorReduce(self, e):
        return f"_vreduce({self.expr(e.value)}, BinOp.{e.op.name})"

    def e_Ramp(self, e):
        return f"_ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes}, {self.dtype_name(e.base.dtype)})"

    def e_Broadcast(self, e):
        return f"np.full({e.lanes}, {self.expr(e.value)}, {self.dtype_name(e.value.dtype)})"

    def e_BufferLoad(self, e):
        name, size, strides = self.buffer(e.buffer)
        if dt.element_of(e.dtype) != dt.element_of(e.buffer.dtype):
            raise LoweredInterpError(f"a {e.dtype} load from '{e.buffer.name}', a {e.buffer.dtype} buffer")
        lanes = dt.lanes(e.dtype)
        if lanes > 1 or any(dt.lanes(i.dtype) > 1 for i in e.indices):
            idx = self.flat_index(e.buffer, e.indices, "load")
            mask = f", {self.mask}" if self.mask else ""
            return f"_vload({name}, {idx}, {lanes}, {e.buffer.name!r}{mask})"
        if strides is not None and len(e.indices) > 1:
            return f"{name}[{self.nd_index(e.buffer, e.indices, 'load')}]"
        idx = self.flat_index(e.buffer, e.indices, "load")
        if self.mask:
            return f"_sload_masked({name}, {idx}, {e.buffer.name!r}, {self.mask})"
        return f"({name}[_t] if 0 <= (_t := {idx}) < {size} else _oob('load', {e.buffer.name!r}, _t, {size}))"


def _short(s) -> str:
    """The first line of a statement as printed (a loop or an if without its body)."""
    text = stmt_str(s) if not isinstance(s, str) else s
    return text.strip().splitlines()[0] if text.strip() else text


# ------------------------------------------------------------------------------------------------
# checking every pass

class PassChecker:
    """An ``after_pass`` callback for ``lower()`` that runs each pass's output and compares it
    with the reference, so a wrong pass is named with the IR before and after it.

    ``arrays``: one array per buffer parameter, in order (inputs; output values are ignored,
    each run gets fresh poisoned outputs); ``expected``: ``{position: array}`` for the outputs;
    ``budget``: the first run that exceeds it stops the checking (``self.stopped`` says so; the
    later passes are then not checked); a later pass that runs more than ten times the first
    pass's iterations (at least 10,000) is reported as wrong.

    >>> checker = PassChecker([a, b], {1: a * 2}, rtol=1e-6, atol=1e-6)
    >>> tc.lower(s, [A, B], target="llvm", after_pass=checker)
    >>> checker.checked
    ['schedule_ops', 'simplify', 'loop_partition', ...]
    """

    def __init__(self, arrays, expected: dict, scalars: dict | None = None, rtol: float = 1e-5,
                 atol: float = 1e-5, budget: int | None = None):
        self.arrays, self.expected, self.scalars = list(arrays), dict(expected), scalars or {}
        self.rtol, self.atol, self.budget = rtol, atol, budget
        self.checked: list = []
        self.stopped: str | None = None
        self.steps: int | None = None
        self._prev = None           # (pass name, PrimFunc) of the last pass run

    def __call__(self, pass_name: str, func: PrimFunc) -> None:
        if self.stopped:
            return
        prev = self._prev
        if prev is not None and func.body is prev[1].body:
            self._prev = (pass_name, prev[1])
            return                  # the pass changed nothing: its output was checked
        self._prev = (pass_name, func)
        bufs = [p for p in func.params if isinstance(p, Buffer)]
        arrays = [self._poisoned(k, a, b) for k, (a, b) in enumerate(zip(self.arrays, bufs))]
        first = self.steps is None
        budget = self.budget if first else (None if self.budget is None else max(10 * self.steps, 10_000))
        try:
            steps = run(func, arrays, self.scalars, budget)
        except BudgetExceeded as err:
            if first:
                self.stopped = f"the first run needs more than {self.budget} loop iterations"
                return
            raise PassMismatch(self._report(pass_name, func, prev, f"{err} (the first pass ran {self.steps})")) from None
        except LoweredInterpError as err:
            raise PassMismatch(self._report(pass_name, func, prev, str(err))) from None
        if first:
            self.steps = steps
        for k, want in self.expected.items():
            got = arrays[k]
            try:
                np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol, equal_nan=False)
            except AssertionError as err:
                name = bufs[k].name
                raise PassMismatch(self._report(pass_name, func, prev,
                                                f"'{name}' differs from the reference:{_mismatch(err)}")) from None
        self.checked.append(pass_name)

    def _poisoned(self, k, a, buf):
        if k not in self.expected:
            return np.array(a, copy=True)
        return poison(np.shape(self.expected[k]), _np(buf.dtype))

    def _report(self, pass_name, func, prev, what) -> str:
        before = (f"--- IR before {pass_name} (after {prev[0]}) ---\n{prev[1]}\n" if prev is not None
                  else "")
        return (f"wrong after {pass_name}: {what}\n{before}--- IR after {pass_name} ---\n{func}")


def _mismatch(err: AssertionError) -> str:
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    keep = [ln for ln in lines if ln.lstrip().startswith(("Mismatched", "Max absolute", "Max relative"))]
    return ("\n  " + "\n  ".join(keep)) if keep else "\n" + str(err)
