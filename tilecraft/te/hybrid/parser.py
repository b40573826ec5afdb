"""A hybrid script's Python source → one statement of tilecraft IR (the body of a ``HybridOp``).

The function's AST is walked once, with its arguments bound to what it was called with:

* a ``te.Tensor`` argument is an input buffer (``a[i, j]`` loads, ``a.shape``, ``a.dtype``,
  ``len(a)``); a list of tensors is a list of them; numbers, ``te.var``s, expressions, lists and
  tuples are values used as they are, as are the names the function captures (closure, globals);
* ``output_tensor(shape, dtype)`` declares an output buffer, ``allocate(shape, dtype, scope)``
  a buffer for the rest of the enclosing block (``scope``: ``global``, ``local``, ``shared``);
* a name assigned once to a value that reads no buffer (``n = a.shape[0]``, ``three = 3.0``)
  is that value; any other assigned name is a scalar variable: a one-element ``local`` buffer
  allocated around the block of its first assignment (so each iteration of a parallel loop has
  its own), dtype from its first value (a Python float is float32, as in TVM);
* ``for v in range(a, b)`` / ``unroll`` / ``parallel`` / ``vectorize`` are loops of those kinds,
  ``bind("threadIdx.x", n)`` a loop bound to a GPU thread index, ``const_range(n)`` is unrolled
  here (``v`` is a Python int, so ``lst[v]`` indexes a captured list); ``if``/``else`` and
  ``x if c else y`` whose condition is a Python value pick a branch here;
* arithmetic promotes as TVM's hybrid parser does (an integer meeting a float becomes that float;
  two floats or two integers of different widths: the wider one); a store casts to the buffer's
  dtype; ``/`` of two integer expressions is an error (write ``//``).

``assert`` statements are checked when the script runs as Python and dropped from the IR.
"""
from __future__ import annotations

import ast
import inspect
import math
import numbers
import operator
import textwrap

from ...ir import dtype as dt
from ...ir import intrinsics
from ...ir.expr import (BinOp, BufferLoad, Const, Expr, Var, binary, cast, const, convert, div,
                        logical_not, select)
from ...ir.functor import post_order_visit
from ...ir.simplify import simplify
from ...ir.stmt import Allocate, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt, seq
from ..tensor import TEError, Tensor

_LOOPS = {"range": ForKind.SERIAL, "unroll": ForKind.UNROLLED, "parallel": ForKind.PARALLEL,
          "vectorize": ForKind.VECTORIZED}
_MATH = ("sqrt", "log", "exp", "tanh", "sigmoid", "sin", "cos", "floor", "ceil", "round", "trunc",
         "exp2", "log2", "log10", "erf")
_CASTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "bool")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z", "blockIdx.x", "blockIdx.y", "blockIdx.z")


class HybridError(TEError):
    """A hybrid script uses what the hybrid language does not have; the message names the
    function, the line and the construct."""


class _Buf:
    """A buffer as the script sees it: indexed, ``.shape``, ``.dtype``, ``len()``."""

    def __init__(self, buffer: Buffer, kind: str):
        self.buffer, self.kind = buffer, kind

    @property
    def shape(self) -> tuple:
        return tuple(s.value if isinstance(s, Const) else s for s in self.buffer.shape)


class _Partial:
    """``a[i]`` of a 2-D buffer, waiting for ``[j]``."""

    def __init__(self, buf: _Buf, indices: tuple):
        self.buf, self.indices = buf, indices


class _Scalar:
    """A scalar variable of the script: a one-element local buffer."""

    def __init__(self, buffer: Buffer):
        self.buffer = buffer


class _Gone:
    """A scalar or buffer whose block has ended."""

    def __init__(self, name: str):
        self.name = name


def parse(func, args) -> tuple:
    """``(body, inputs, input_buffers, output_buffers)`` for ``func`` called with ``args``."""
    return _Parser(func).run(args)


class _Parser:
    def __init__(self, func):
        self.func = func
        try:
            src = textwrap.dedent(inspect.getsource(func))
        except (OSError, TypeError) as e:
            raise HybridError(f"hybrid script '{func.__name__}': its source is not available ({e})") from None
        self.lineno0 = func.__code__.co_firstlineno - 1
        fdefs = [n for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef,))]
        if not fdefs:
            raise HybridError(f"hybrid script '{func.__name__}': not a plain function (def)")
        self.fdef = fdefs[0]
        self.env = dict(func.__globals__)
        if func.__closure__:
            self.env.update({n: c.cell_contents for n, c in zip(func.__code__.co_freevars, func.__closure__)
                             if _cell_full(c)})
        self.names: dict = {}
        self.inputs, self.in_bufs, self.outputs = [], [], []
        self.blocks: list = []            # per open block: the buffers allocated around it
        self.counts = _assign_counts(self.fdef)
        self.line = self.fdef.lineno
        self.returned = None

    # ------------------------------------------------------------------------------------------
    def error(self, msg: str) -> HybridError:
        return HybridError(f"hybrid script '{self.func.__name__}', line {self.line + self.lineno0}: {msg}")

    def run(self, args):
        params = [a.arg for a in self.fdef.args.args]
        if self.fdef.args.vararg or self.fdef.args.kwarg or len(params) != len(args):
            raise self.error(f"called with {len(args)} argument(s); the script takes {len(params)} "
                             f"(no *args, **kwargs)")
        for name, a in zip(params, args):
            self.names[name] = self.bind_arg(name, a)
        body = self.block(self.fdef.body)
        if self.returned is None:
            raise self.error("the script must end with `return` of its output tensor(s)")
        return body, self.inputs, self.in_bufs, self.returned

    def bind_arg(self, name, a):
        if isinstance(a, Tensor):
            for t, b in zip(self.inputs, self.in_bufs):
                if t is a:
                    return _Buf(b, "input")
            buf = Buffer(a.name, tuple(a.shape), a.dtype)
            self.inputs.append(a)
            self.in_bufs.append(buf)
            return _Buf(buf, "input")
        if isinstance(a, (list, tuple)):
            return type(a)(self.bind_arg(name, x) for x in a)
        if isinstance(a, (numbers.Number, Expr, str)) or a is None:
            return a
        raise self.error(f"argument '{name}' is a {type(a).__name__}; pass tensors, numbers, te.vars "
                         f"or lists of them")

    # ------------------------------------------------------------------------------------------
    # statements
    def block(self, stmts):
        self.blocks.append([])
        out = []
        for s in stmts:
            out.append(self.stmt(s))
        allocated = self.blocks.pop()
        body = seq(*out) or Evaluate(const(0))
        for name, buf in reversed(allocated):
            body = _allocate(buf, body)
            if name is not None and isinstance(self.names.get(name), (_Scalar, _Buf)):
                self.names[name] = _Gone(name)
        return body

    def stmt(self, s):
        self.line = s.lineno
        method = getattr(self, f"stmt_{type(s).__name__}", None)
        if method is None:
            raise self.error(f"the statement `{type(s).__name__}` is not part of the hybrid language")
        return method(s)

    def stmt_Expr(self, s):
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return None                     # a docstring
        raise self.error("an expression statement has no effect here; assign its value")

    def stmt_Pass(self, s):
        return None

    def stmt_Assert(self, s):
        return None                         # checked when run as Python, not compiled

    def stmt_Return(self, s):
        if self.blocks and len(self.blocks) > 1:
            raise self.error("`return` must be the last statement of the script, outside loops and branches")
        vals = s.value.elts if isinstance(s.value, ast.Tuple) else [s.value]
        outs = []
        for v in vals:
            b = self.expr(v) if v is not None else None
            if isinstance(b, _Buf) and b.kind == "call":
                raise self.error(f"`return {ast.unparse(v)}`: the result of a hybrid script call is a temporary "
                                 f"buffer of this script; copy it into an output_tensor and return that")
            if not (isinstance(b, _Buf) and b.kind == "output"):
                raise self.error("`return` must name the output_tensor(s) of the script")
            outs.append(b.buffer)
        missing = [b.name for b in self.outputs if b not in outs]
        if missing:
            raise self.error(f"output_tensor '{missing[0]}' is not returned; return every output "
                             f"(use allocate for a temporary)")
        self.returned = outs
        return None

    def stmt_Assign(self, s):
        if len(s.targets) != 1:
            raise self.error("chained assignment (a = b = ...) is not supported")
        target = s.targets[0]
        if isinstance(target, ast.Tuple):
            raise self.error("tuple assignment is not supported; assign one name at a time")
        if isinstance(target, ast.Subscript):
            return self.store(target, self.expr(s.value))
        if not isinstance(target, ast.Name):
            raise self.error(f"cannot assign to `{ast.unparse(target)}`")
        name = target.id
        script = self.called_script(s.value)
        if script is not None:
            return self.inline_call(name, s.value, script)
        if isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name) and \
                s.value.func.id in ("output_tensor", "allocate"):
            buf = self.make_buffer(s.value, name)
            self.names[name] = buf
            if buf.kind == "alloc":
                self.blocks[-1].append((name, buf.buffer))
            return None
        value = self.expr(s.value)
        cur = self.names.get(name)
        if isinstance(cur, _Scalar):
            return BufferStore(cur.buffer, _to_dtype(value, cur.buffer.dtype), (const(0),))
        if isinstance(cur, Var):
            raise self.error(f"'{name}' is a loop variable; it cannot be assigned")
        if self.counts.get(name, 0) == 1 and not _reads_buffer(value) and \
                not isinstance(value, (_Buf, _Partial)):
            self.names[name] = value
            return None
        if isinstance(value, (_Buf, list, tuple)) or isinstance(value, str):
            if self.counts.get(name, 0) == 1:
                self.names[name] = value
                return None
            raise self.error(f"'{name}' is assigned more than once; only scalar variables may be")
        dtype = _dtype_of(value)
        buf = Buffer(name, (const(1),), dtype, "local")
        self.blocks[-1].append((name, buf))
        self.names[name] = _Scalar(buf)
        return BufferStore(buf, _to_dtype(value, dtype), (const(0),))

    def called_script(self, node):
        """The hybrid script that ``node`` calls (``outer_product(...)``), or None."""
        from . import _Script        # the package imports this module first
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in self.names:
            fn = self.env.get(node.func.id)
            if isinstance(fn, _Script):
                return fn
        return None

    def inline_call(self, name, call, script):
        """``name = other_script(args)`` (TVM's ``test_func_call``): the callee's body, parsed with
        its parameters bound to the caller's values (tensors and buffers by reference), goes here;
        its output tensors become buffers of the caller, allocated around the current block, and
        ``name`` names them (one output: the buffer; several: a list)."""
        if call.keywords:
            raise self.error(f"`{ast.unparse(call)}`: call a hybrid script with positional arguments only")
        args = [self.expr(a) for a in call.args]
        sub = _Parser(script.func)
        params = [a.arg for a in sub.fdef.args.args]
        if sub.fdef.args.vararg or sub.fdef.args.kwarg or len(params) != len(args):
            raise self.error(f"`{ast.unparse(call)}`: '{sub.fdef.name}' takes {len(params)} argument(s), "
                             f"got {len(args)}")
        for p, a in zip(params, args):
            held = a if isinstance(a, (list, tuple)) else [a]
            if any(isinstance(x, (_Partial, Tensor)) for x in held):
                raise self.error(f"`{ast.unparse(call)}`: argument '{p}' must be a whole tensor or buffer, a "
                                 f"number or a list of them")
            sub.names[p] = a if any(isinstance(x, _Buf) for x in held) else sub.bind_arg(p, a)
        body = sub.block(sub.fdef.body)
        if sub.returned is None:
            raise sub.error("the script must end with `return` of its output tensor(s)")
        for b in sub.returned:
            self.blocks[-1].append((None, b))
        outs = [_Buf(b, "call") for b in sub.returned]
        self.names[name] = outs[0] if len(outs) == 1 else outs
        return body

    def stmt_AugAssign(self, s):
        op = _BINOPS.get(type(s.op))
        if op is None:
            raise self.error(f"the operator `{type(s.op).__name__}=` is not supported")
        if isinstance(s.target, ast.Subscript):
            return self.store(s.target, self.arith(op, self.expr(s.target), self.expr(s.value)))
        if isinstance(s.target, ast.Name):
            cur = self.names.get(s.target.id)
            if not isinstance(cur, _Scalar):
                raise self.error(f"`{s.target.id} {ast.unparse(s).split()[1]} ...`: '{s.target.id}' is not a "
                                 f"scalar variable assigned earlier")
            val = self.arith(op, BufferLoad(cur.buffer, (const(0),), cur.buffer.dtype), self.expr(s.value))
            return BufferStore(cur.buffer, _to_dtype(val, cur.buffer.dtype), (const(0),))
        raise self.error(f"cannot assign to `{ast.unparse(s.target)}`")

    def store(self, target, value):
        buf, idx = self.subscript_parts(target)
        if not isinstance(buf, _Buf):
            raise self.error(f"`{ast.unparse(target)}`: only tensors and allocated buffers can be stored into")
        idx = self.indices(buf, idx, ast.unparse(target))
        return BufferStore(buf.buffer, _to_dtype(value, buf.buffer.dtype), idx)

    def subscript_parts(self, node):
        base = self.expr(node.value)
        idx = node.slice
        items = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        vals = tuple(self.expr(i) for i in items)
        if isinstance(base, _Partial):
            return base.buf, base.indices + vals
        return base, vals

    def indices(self, buf: _Buf, idx: tuple, where: str) -> tuple:
        if len(idx) != len(buf.buffer.shape):
            raise self.error(f"`{where}`: '{buf.buffer.name}' has {len(buf.buffer.shape)} dimension(s), "
                             f"indexed with {len(idx)}")
        out = []
        for i in idx:
            e = convert(i) if not isinstance(i, Expr) else i
            if not dt.is_int(e.dtype):
                raise self.error(f"`{where}`: the index `{e}` is {e.dtype}; indices must be integers")
            out.append(e)
        return tuple(out)

    def stmt_If(self, s):
        cond = self.expr(s.test)
        if not isinstance(cond, Expr):
            return self.block(s.body if cond else s.orelse) if (s.body if cond else s.orelse) else None
        then = self.block(s.body)
        other = self.block(s.orelse) if s.orelse else None
        return IfThenElse(_as_bool(cond), then, other)

    def stmt_For(self, s):
        if not isinstance(s.target, ast.Name):
            raise self.error("a loop variable must be one name")
        it = s.iter
        if s.orelse:
            raise self.error("`for ... else` is not supported")
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and
                it.func.id in (*_LOOPS, "const_range", "bind")):
            raise self.error(f"`for {s.target.id} in {ast.unparse(it)}`: loops iterate over range, const_range, "
                             f"unroll, parallel, vectorize or bind")
        kind = it.func.id
        args = [self.expr(a) for a in it.args]
        name = s.target.id
        old = self.names.get(name)
        if kind == "const_range":
            lo, hi = (0, args[0]) if len(args) == 1 else args[:2]
            if not all(isinstance(x, numbers.Integral) for x in (lo, hi)):
                raise self.error(f"const_range needs constant bounds, got {ast.unparse(it)}")
            out = []
            for v in range(int(lo), int(hi)):
                self.names[name] = v
                out.append(self.block(s.body))
            self._restore(name, old)
            return seq(*out)
        tag = ""
        if kind == "bind":
            if len(args) != 2 or args[0] not in _THREAD_TAGS:
                raise self.error(f"bind(tag, extent): tag must be one of {', '.join(_THREAD_TAGS)}, got "
                                 f"{ast.unparse(it)}")
            tag, args = args[0], args[1:]
        if len(args) not in (1, 2):
            raise self.error(f"{kind}() takes one or two bounds, got {len(args)}")
        lo, hi = (0, args[0]) if len(args) == 1 else args
        lo, hi = convert(lo), convert(hi)
        if not (dt.is_int(lo.dtype) and dt.is_int(hi.dtype)):
            raise self.error(f"the bounds of `{ast.unparse(it)}` must be integers")
        var = Var(name, "int32")
        self.names[name] = var
        body = self.block(s.body)
        self._restore(name, old)
        extent = simplify(hi - lo)
        if kind == "bind":
            return For(var, lo, extent, ForKind.THREAD_BINDING, body, thread_tag=tag)
        return For(var, lo, extent, _LOOPS[kind], body)

    def _restore(self, name, old):
        if old is None:
            self.names.pop(name, None)
        else:
            self.names[name] = old

    def stmt_While(self, s):
        raise self.error("`while` loops are not part of the hybrid language; use range")

    # ------------------------------------------------------------------------------------------
    # expressions
    def expr(self, node):
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is None:
            raise self.error(f"`{ast.unparse(node)}` ({type(node).__name__}) is not part of the hybrid language")
        return method(node)

    def expr_Constant(self, n):
        return n.value

    def expr_Name(self, n):
        if n.id in self.names:
            v = self.names[n.id]
            if isinstance(v, _Gone):
                raise self.error(f"'{n.id}' is used outside the block where it was assigned")
            if isinstance(v, _Scalar):
                return BufferLoad(v.buffer, (const(0),), v.buffer.dtype)
            return v
        if n.id in ("True", "False"):
            return n.id == "True"
        if n.id in self.env:
            return self.env[n.id]
        raise self.error(f"name '{n.id}' is not defined")

    def expr_Tuple(self, n):
        return tuple(self.expr(e) for e in n.elts)

    expr_List = expr_Tuple

    def expr_Attribute(self, n):
        base = self.expr(n.value)
        if isinstance(base, _Buf) and n.attr in ("shape", "dtype"):
            return getattr(base, n.attr) if n.attr == "shape" else base.buffer.dtype
        raise self.error(f"`{ast.unparse(n)}`: only .shape and .dtype of tensors are available")

    def expr_Subscript(self, n):
        base, idx = self.subscript_parts(n)
        if isinstance(base, _Buf):
            if len(idx) < len(base.buffer.shape):
                return _Partial(base, idx)
            idx = self.indices(base, idx, ast.unparse(n))
            return BufferLoad(base.buffer, idx, base.buffer.dtype)
        if isinstance(base, (list, tuple)):
            if len(idx) != 1 or not isinstance(idx[0], numbers.Integral):
                raise self.error(f"`{ast.unparse(n)}`: a list is indexed with one constant (a const_range "
                                 f"variable), not `{ast.unparse(n.slice)}`")
            return base[idx[0]]
        raise self.error(f"`{ast.unparse(n)}`: cannot index a {type(base).__name__}")

    def expr_BinOp(self, n):
        op = _BINOPS.get(type(n.op))
        if op is None:
            raise self.error(f"the operator in `{ast.unparse(n)}` is not supported")
        return self.arith(op, self.expr(n.left), self.expr(n.right))

    def arith(self, op, a, b):
        a, b = self.value(a), self.value(b)
        if not isinstance(a, Expr) and not isinstance(b, Expr):
            return op(a, b)
        a, b = _promote(a, b)
        if op is operator.truediv:
            if dt.is_int(_dtype_of(a)) and dt.is_int(_dtype_of(b)):
                raise self.error("`/` of two integers: write `//` (floor division) or make one a float")
            return div(a, b)
        if op is operator.pow:
            return intrinsics.call("pow", *_promote(_floaty(a), _floaty(b)))
        return op(a, b)

    def value(self, v):
        if isinstance(v, _Partial):
            raise self.error(f"'{v.buf.buffer.name}' has {len(v.buf.buffer.shape)} dimension(s) but was "
                             f"indexed with {len(v.indices)}")
        if isinstance(v, (_Buf, list, tuple, str)):
            raise self.error(f"a {type(v).__name__ if not isinstance(v, _Buf) else 'tensor'} is not a value "
                             f"in arithmetic")
        return v

    def expr_UnaryOp(self, n):
        v = self.value(self.expr(n.operand))
        if isinstance(n.op, ast.USub):
            return -v
        if isinstance(n.op, ast.UAdd):
            return v
        if isinstance(n.op, ast.Not):
            return logical_not(_as_bool(v)) if isinstance(v, Expr) else not v
        raise self.error(f"the operator in `{ast.unparse(n)}` is not supported")

    def expr_BoolOp(self, n):
        vals = [self.value(self.expr(v)) for v in n.values]
        acc = vals[0]
        for v in vals[1:]:
            if not isinstance(acc, Expr) and not isinstance(v, Expr):
                acc = (acc and v) if isinstance(n.op, ast.And) else (acc or v)
            else:
                x, y = (_as_bool(convert(w) if not isinstance(w, Expr) else w) for w in (acc, v))
                acc = x & y if isinstance(n.op, ast.And) else x | y
        return acc

    def expr_Compare(self, n):
        left = self.value(self.expr(n.left))
        acc = None
        for op, right in zip(n.ops, n.comparators):
            right = self.value(self.expr(right))
            f = _COMPARE.get(type(op))
            if f is None:
                raise self.error(f"the comparison in `{ast.unparse(n)}` is not supported")
            if isinstance(left, Expr) or isinstance(right, Expr):
                c = f(*_promote(left, right))
            else:
                c = f(left, right)
            acc = c if acc is None else (acc & c if isinstance(acc, Expr) or isinstance(c, Expr) else acc and c)
            left = right
        return acc

    def expr_IfExp(self, n):
        cond = self.value(self.expr(n.test))
        if not isinstance(cond, Expr):
            return self.expr(n.body) if cond else self.expr(n.orelse)
        t, f = _promote(self.value(self.expr(n.body)), self.value(self.expr(n.orelse)))
        t, f = (convert(x) if not isinstance(x, Expr) else x for x in (t, f))
        return select(_as_bool(cond), t, f, lazy=True)

    def expr_Call(self, n):
        if not isinstance(n.func, ast.Name):
            raise self.error(f"`{ast.unparse(n)}`: only the hybrid intrinsics can be called")
        fn = n.func.id
        args = [self.expr(a) for a in n.args]
        kw = {k.arg: self.expr(k.value) for k in n.keywords}
        if fn in ("output_tensor", "allocate"):
            raise self.error(f"{fn}(...) must be assigned to a name: `x = {fn}(...)`")
        if fn == "len":
            v = args[0]
            return v.shape[0] if isinstance(v, _Buf) else v.buf.shape[len(v.indices)] \
                if isinstance(v, _Partial) else len(v)
        if fn in _MATH:
            x = self.value(args[0])
            if not isinstance(x, Expr):
                return float(_PY_MATH[fn](x))
            return intrinsics.call(fn, _floaty(x))
        if fn in ("power", "pow"):
            return self.arith(operator.pow, args[0], args[1])
        if fn in ("min", "max"):
            vals = [self.value(a) for a in args]
            acc = vals[0]
            for v in vals[1:]:
                if not isinstance(acc, Expr) and not isinstance(v, Expr):
                    acc = min(acc, v) if fn == "min" else max(acc, v)
                else:
                    acc = binary(BinOp.MIN if fn == "min" else BinOp.MAX, *_promote(acc, v))
            return acc
        if fn in ("abs", "fabs"):
            x = self.value(args[0])
            if not isinstance(x, Expr):
                return abs(x)
            return intrinsics.call("fabs", x) if dt.is_float(x.dtype) else select(x < 0, -x, x)
        if fn in _CASTS:
            x = self.value(args[0])
            return cast(fn, x) if isinstance(x, Expr) else const(x, fn)
        if fn == "ceil_div":
            a, b = (self.value(x) for x in args)
            return (a + b - 1) // b
        if fn == "popcount":
            x = self.value(args[0])
            if not isinstance(x, Expr):
                return bin(int(x) & 0xFFFFFFFFFFFFFFFF).count("1")
            return intrinsics.call("popcount", x)
        if fn == "max_num_threads":
            return _max_num_threads(self, args)
        if self.called_script(n) is not None:
            raise self.error(f"`{ast.unparse(n)}`: assign a hybrid script's result to a name: "
                             f"`x = {fn}(...)`")
        raise self.error(f"`{ast.unparse(n)}`: '{fn}' is not a hybrid intrinsic")

    def make_buffer(self, call, name):
        fn = call.func.id
        args = [self.expr(a) for a in call.args]
        kw = {k.arg: self.expr(k.value) for k in call.keywords}
        names = ("shape", "dtype", "scope") if fn == "allocate" else ("shape", "dtype")
        if len(args) > len(names) or set(kw) - set(names):
            raise self.error(f"{fn}({', '.join(names)}): got `{ast.unparse(call)}`")
        vals = dict(zip(names, args))
        vals.update(kw)
        shape = vals.get("shape")
        if isinstance(shape, (numbers.Integral, Expr)):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not shape:
            raise self.error(f"{fn}: the shape must be a tuple, got {shape!r}")
        for d in shape:
            if _reads_buffer(d) or (isinstance(d, Expr) and not dt.is_int(d.dtype)) or \
                    not isinstance(d, (numbers.Integral, Expr)):
                raise self.error(f"{fn}: the extent `{d}` must be an integer known before the script runs")
        dtype = dt.normalize(vals.get("dtype", "float32"))
        scope = vals.get("scope", "global")
        if scope not in ("global", "local", "shared"):
            raise self.error(f"allocate: scope must be 'global', 'local' or 'shared', got {scope!r}")
        buf = Buffer(name, tuple(convert(d) for d in shape), dtype, scope)
        if fn == "output_tensor":
            if len(self.blocks) > 1:
                raise self.error("output_tensor must be declared at the top level of the script")
            self.outputs.append(buf)
            return _Buf(buf, "output")
        return _Buf(buf, "alloc")


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
def _max_num_threads(parser, args) -> int:
    """TVM's ``max_num_threads(allow_none)``: the current target's thread limit per block, a
    number when the script is parsed (CUDA: 1024 unless the target says ``-max_num_threads=``;
    LLVM: 1, as TVM's)."""
    from ...target import Target
    t = Target.current()
    if t is None:
        raise parser.error("max_num_threads() needs a current target: parse the script inside "
                           "`with tvm.target.Target(\"cuda\"):`")
    return int(t.attrs.get("max_num_threads", 1024 if t.kind == "cuda" else 1))


_PY_MATH = {"sqrt": math.sqrt, "log": math.log, "exp": math.exp, "tanh": math.tanh,
            "sigmoid": lambda x: 1 / (1 + math.exp(-x)), "sin": math.sin, "cos": math.cos,
            "floor": math.floor, "ceil": math.ceil, "round": round, "trunc": math.trunc,
            "exp2": lambda x: 2.0 ** x, "log2": math.log2, "log10": math.log10, "erf": math.erf}


def _allocate(buf: Buffer, body):
    """``Allocate(buf, body)``; a ``local`` or ``shared`` buffer allocated outside the loops bound
    to the GPU grid goes inside them, so that each kernel has its own (the GPU passes hoist a
    ``shared`` one to the block)."""
    if buf.scope == "global" or not _has_launch(body):
        return Allocate(buf, body)
    if isinstance(body, For) and body.kind is ForKind.THREAD_BINDING:
        inner = body.body
        nested = _allocate(buf, inner) if _has_launch(inner) else Allocate(buf, inner)
        return For(body.loop_var, body.min, body.extent, body.kind, nested, body.thread_tag)
    if isinstance(body, SeqStmt):
        return seq(*[_allocate(buf, x) if _has_launch(x) else x for x in body.seq])
    return Allocate(buf, body)


def _has_launch(s) -> bool:
    found = []
    post_order_visit(s, lambda n: found.append(n) if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING
                     else None)
    return bool(found)


def _cell_full(c) -> bool:
    try:
        c.cell_contents
    except ValueError:
        return False
    return True


def _assign_counts(fdef) -> dict:
    """How often each name is a target of an assignment (or a loop) in the function."""
    counts: dict = {}
    for n in ast.walk(fdef):
        targets = []
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AugAssign, ast.For)):
            targets = [n.target, n.target] if isinstance(n, ast.AugAssign) else [n.target]
        for t in targets:
            if isinstance(t, ast.Name):
                counts[t.id] = counts.get(t.id, 0) + 1
    return counts


def _reads_buffer(v) -> bool:
    if not isinstance(v, Expr):
        return False
    found = []
    post_order_visit(v, lambda n: found.append(n) if isinstance(n, BufferLoad) else None)
    return bool(found)


def _dtype_of(v) -> str:
    if isinstance(v, Expr):
        return v.dtype
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, numbers.Integral):
        return "int32"
    if isinstance(v, numbers.Real):
        return "float32"
    raise HybridError(f"{v!r} is not a number or an expression")


def _to_dtype(v, dtype: str):
    if isinstance(v, Expr):
        return v if v.dtype == dtype else cast(dtype, v)
    if isinstance(v, bool) or not isinstance(v, numbers.Number):
        v = _value_error(v) if not isinstance(v, bool) else v
    if dt.is_int(dtype) and isinstance(v, float):
        v = int(v)
    return const(v, dtype)


def _value_error(v):
    raise HybridError(f"{v!r} ({type(v).__name__}) cannot be stored in a tensor")


def _floaty(x):
    if isinstance(x, Expr) and not dt.is_float(x.dtype):
        return cast("float32", x)
    return x


def _as_bool(c):
    if isinstance(c, Expr) and not dt.is_bool(c.dtype):
        return c != 0
    return c


def _promote(a, b):
    """TVM hybrid's arithmetic promotion: an int meeting a float becomes that float; of two
    floats or two ints the wider wins. Python numbers take the other side's dtype (a float
    literal turns an integer expression to float32)."""
    if isinstance(a, Expr) and isinstance(b, Expr):
        if a.dtype == b.dtype:
            return a, b
        fa, fb = dt.is_float(a.dtype), dt.is_float(b.dtype)
        if fa and not fb:
            return a, cast(a.dtype, b)
        if fb and not fa:
            return cast(b.dtype, a), b
        if dt.is_bool(a.dtype) or dt.is_bool(b.dtype):
            return a, b
        wide = a.dtype if dt.bits(a.dtype) >= dt.bits(b.dtype) else b.dtype
        return (a if a.dtype == wide else cast(wide, a)), (b if b.dtype == wide else cast(wide, b))
    if isinstance(a, Expr) and isinstance(b, float) and not dt.is_float(a.dtype):
        return cast("float32", a), b
    if isinstance(b, Expr) and isinstance(a, float) and not dt.is_float(b.dtype):
        return a, cast("float32", b)
    return a, b
