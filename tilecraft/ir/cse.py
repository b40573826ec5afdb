"""Common subexpression elimination and dead-code removal.

After :func:`common_subexpression_elimination`, no non-trivial pure scalar subexpression occurs
twice in one ``BufferStore`` (value and indices), and no load-free one occurs twice among the
stores that sit directly in one ``SeqStmt``: each is computed once by a ``LetStmt`` (``cse_v1``,
``cse_v2``, ...) placed right before its uses.

After :func:`remove_dead_code`, no ``LetStmt`` binds an unused variable, no allocation is written
without ever being read, and no loop, branch or sequence is empty.

Loads are hoisted only within one store: a store between two loads may change what they read.
Nothing is hoisted out of a lazy ``if_then_else`` branch (it may guard an out-of-bounds load),
out of a ``Let`` or ``Reduce``, or when it contains a call that is not a pure intrinsic of the
table (``ir/intrinsics.py``).
"""
from __future__ import annotations

from . import dtype as dt
from .expr import (AccessPtr, BufferLoad, BufferRegion, Call, Const, Let, Reduce, Select, SizeVar,
                   TensorLoad, Var, logical_not)
from .functor import post_order_visit
from .intrinsics import PURE_CALLS    # the pure rows of the intrinsic table
from .stmt import (Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt, PrimFunc,
                   SeqStmt, Stmt)



# ---------------------------------------------------------------------------------------------
# CSE

def common_subexpression_elimination(stmt: Stmt) -> Stmt:
    """Compute repeated subexpressions once, in ``LetStmt``\\s.

    Example::

        C[i * 64 + j] = A[i * 64 + j] + B[i * 64 + j]
        # becomes
        cse_v1 = i * 64 + j
        C[cse_v1] = A[cse_v1] + B[cse_v1]

    Returns ``stmt`` itself when there is nothing to share. A ``PrimFunc`` gets a new body.
    """
    if isinstance(stmt, PrimFunc):
        return stmt.with_body(common_subexpression_elimination(stmt.body))
    return _CSE().stmt(stmt)


class _CSE:
    def __init__(self):
        self.count = 0

    def stmt(self, s):
        t = type(s)
        if t is BufferStore:
            return self._store(s)
        if t is SeqStmt:
            return self._seq(s)
        if t is For:
            body = self.stmt(s.body)
            return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body,
                                                s.thread_tag, s.annotations)
        if t is IfThenElse:
            a = self.stmt(s.then_case)
            b = self.stmt(s.else_case) if s.else_case is not None else None
            return s if (a is s.then_case and b is s.else_case) else IfThenElse(s.condition, a, b)
        if t is LetStmt:
            body = self.stmt(s.body)
            return s if body is s.body else LetStmt(s.var, s.value, body)
        if t is Allocate:
            body = self.stmt(s.body)
            return s if body is s.body else Allocate(s.buffer, body)
        if t is AttrStmt:
            body = self.stmt(s.body)
            return s if body is s.body else AttrStmt(s.key, s.node, s.value, body)
        return s

    def _store(self, s):
        roots = (s.value,) + tuple(s.indices)
        new, lets = self._hoist(roots, allow_loads=True)
        if not lets:
            return s
        return _wrap(lets, BufferStore(s.buffer, new[0], tuple(new[1:])))

    def _seq(self, s):
        seq = [x if type(x) is BufferStore else self.stmt(x) for x in s.seq]
        # first, load-free subexpressions shared by the stores directly in this sequence
        where = [k for k, x in enumerate(seq) if type(x) is BufferStore]
        lets = []
        if len(where) > 1:
            roots, spans = [], []
            for k in where:
                x = seq[k]
                spans.append((k, len(roots), 1 + len(x.indices)))
                roots.extend((x.value,) + tuple(x.indices))
            new, lets = self._hoist(tuple(roots), allow_loads=False)
            for k, start, n in spans:
                part = new[start:start + n]
                x = seq[k]
                if part[0] is not x.value or any(a is not b for a, b in zip(part[1:], x.indices)):
                    seq[k] = BufferStore(x.buffer, part[0], tuple(part[1:]))
        # then what repeats inside each store, loads included
        for k in where:
            seq[k] = self._store(seq[k])
        if not lets and all(a is b for a, b in zip(seq, s.seq)):
            return s
        return _wrap(lets, SeqStmt(tuple(seq)))

    def _hoist(self, roots: tuple, allow_loads: bool):
        """Replace, largest first, each eligible subexpression that occurs twice or more by a
        new variable. Returns the new roots and ``[(var, value), ...]`` in binding order."""
        picked = []
        table = _Table(allow_loads)     # numbers persist; only new nodes are numbered again
        while True:
            for r in roots:
                table.number(r)
            for _, v in picked:
                table.number(v)
            counts: dict = {}
            for r in roots:
                table.count(r, counts)
            for _, v in picked:
                table.count(v, counts)
            found = [sid for sid, c in counts.items() if c >= 2 and table.eligible[sid]]
            if not found:
                break
            # largest first; in one round take every candidate that is not inside one already
            # taken (the counts of those inside change once the outer one is replaced)
            found.sort(key=lambda sid: -table.size[sid])
            chosen, covered = {}, set()
            for sid in found:
                if sid in covered:
                    continue
                chosen[sid] = Var("cse", table.node[sid].dtype)
                covered |= table.inside(sid)
            roots = tuple(table.replace(r, chosen) for r in roots)
            picked = [(v, table.replace(x, chosen)) for v, x in picked]
            picked.extend((var, table.node[sid]) for sid, var in chosen.items())
        if not picked:
            return roots, []
        # a later pick is smaller and may occur in an earlier pick's value: bind it first, and
        # number the variables in binding order so the printed IR reads top-down
        picked.reverse()
        names = {}
        for v, _ in picked:
            self.count += 1
            names[v] = Var(f"cse_v{self.count}", v.dtype)
        roots = tuple(_rename(r, names) for r in roots)
        return roots, [(names[v], _rename(x, names)) for v, x in picked]


def _rename(root, names: dict):
    """Replace the variables in ``names`` (iteratively: values can be deep)."""
    done: dict = {}
    stack = [root]
    while stack:
        e = stack[-1]
        if id(e) in done:
            stack.pop()
            continue
        kids = e.children()
        missing = [k for k in kids if id(k) not in done]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        if type(e) is Var:
            done[id(e)] = names.get(e, e)
            continue
        done[id(e)] = e.with_children(tuple(done[id(k)] for k in kids))
    return done[id(root)]


def _wrap(lets, body):
    for var, value in reversed(lets):
        body = LetStmt(var, value, body)
    return body


class _Table:
    """Structure numbers of the nodes of some expressions, with what CSE needs per structure."""

    def __init__(self, allow_loads: bool):
        self.allow_loads = allow_loads
        self.sid: dict = {}          # id(node) -> structure number
        self.keep: list = []         # keeps numbered nodes alive, so ids stay unique
        self.interned: dict = {}
        self.node: list = []         # structure number -> a node with that structure
        self.size: list = []
        self.eligible: list = []
        self.pure: list = []         # no impure call, no Let/Reduce, loads only if allowed

    def number(self, root) -> None:
        sid = self.sid
        if id(root) in sid:
            return
        stack = [(root, False)]
        while stack:
            e, ready = stack.pop()
            if id(e) in sid:
                continue
            kids = e.children()
            if not ready:
                stack.append((e, True))
                stack.extend((k, False) for k in kids if id(k) not in sid)
                continue
            ks = tuple(sid[id(k)] for k in kids)
            key = e.node_key(ks)
            n = self.interned.get(key)
            if n is None:
                n = self.interned[key] = len(self.node)
                t = type(e)
                pure = t is not Let and t is not Reduce and all(self.pure[k] for k in ks) \
                    and (t is not Call or e.name in PURE_CALLS) \
                    and (self.allow_loads or (t is not BufferLoad and t is not TensorLoad))
                self.node.append(e)
                self.size.append(1 + sum(self.size[k] for k in ks))
                self.pure.append(pure)
                self.eligible.append(pure and bool(kids) and dt.lanes(e.dtype) == 1
                                     and e.dtype != "handle")
            sid[id(e)] = n
            self.keep.append(e)

    def count(self, root, counts: dict) -> None:
        """Occurrences in the tree (a shared node counts at every place it occurs), not looking
        into lazy branches, ``Let`` or ``Reduce``."""
        stack = [root]
        while stack:
            e = stack.pop()
            n = self.sid[id(e)]
            counts[n] = counts.get(n, 0) + 1
            t = type(e)
            if t is Let or t is Reduce:
                continue
            if t is Select and e.lazy:
                stack.append(e.condition)
                continue
            stack.extend(e.children())

    def inside(self, n: int) -> set:
        """The structure numbers of every node of the expression numbered ``n``."""
        out, stack = set(), [self.node[n]]
        while stack:
            e = stack.pop()
            k = self.sid[id(e)]
            if k not in out:
                out.add(k)
                stack.extend(e.children())
        return out

    def replace(self, root, targets: dict):
        """``root`` with every node whose structure number is in ``targets`` replaced by the
        variable it maps to."""
        done: dict = {}
        sid = self.sid
        stack = [(root, False)]
        while stack:
            e, ready = stack.pop()
            if id(e) in done:
                continue
            var = targets.get(sid.get(id(e)))
            if var is not None:
                done[id(e)] = var
                continue
            kids = e.children()
            if not ready:
                stack.append((e, True))
                stack.extend((k, False) for k in kids if id(k) not in done)
                continue
            done[id(e)] = e.with_children(tuple(done[id(k)] for k in kids))
        return done[id(root)]


# ---------------------------------------------------------------------------------------------
# Dead code

def remove_dead_code(stmt: Stmt) -> Stmt:
    """Drop ``LetStmt``\\s whose variable is unused, allocations that are written but never read
    (with the stores into them), and loops, branches and sequences left empty. A statement that
    does nothing at all becomes ``Evaluate(0)``. Returns ``stmt`` itself when nothing is dead.

    Example::

        t = allocate(float32[16], "local")       # never read
        for i in range(0, 16):
          t[i] = A[i]
        cse_v1 = i * 4                            # unused
        B[0] = 1.0
        # becomes
        B[0] = 1.0
    """
    if isinstance(stmt, PrimFunc):
        return stmt.with_body(remove_dead_code(stmt.body))
    cur = stmt
    for _ in range(8):                # removing code can make more code dead; a few rounds do
        uses, read = _uses(cur)
        new = _DCE(uses, read).stmt(cur)
        if new is None:
            return stmt if _is_noop(stmt) else Evaluate(Const(0, "int32"))
        if new is cur:
            break
        cur = new
    return cur


def _uses(stmt):
    """How often each variable occurs (binding sites excluded), and the data variables of
    buffers that are read (loaded, or referred to as a variable or by an attribute)."""
    uses: dict = {}
    read: set = set()

    def f(n):
        t = type(n)
        if t is Var or t is SizeVar:
            uses[n] = uses.get(n, 0) + 1
            if n.dtype == "handle":
                read.add(n)
        elif t is BufferLoad or t is AccessPtr or t is BufferRegion:
            read.add(n.buffer.data)        # a pointer or a bound view may be read through
        elif t is AttrStmt:
            node = n.node
            read.add(getattr(node, "data", node))
    post_order_visit(stmt, f)
    return uses, read


class _DCE:
    def __init__(self, uses: dict, read: set):
        self.uses = uses
        self.read = read
        self.dead: set = set()        # data variables of allocations never read

    def stmt(self, s):
        """The statement without dead code, or None when nothing is left."""
        t = type(s)
        if t is BufferStore:
            return None if s.buffer.data in self.dead else s
        if t is Allocate:
            if s.buffer.data not in self.read:
                self.dead.add(s.buffer.data)
                return self.stmt(s.body)
            body = self.stmt(s.body)
            if body is None:
                return None
            return s if body is s.body else Allocate(s.buffer, body)
        if t is LetStmt:
            body = self.stmt(s.body)
            if body is None:
                return None
            if not self.uses.get(s.var) and _pure(s.value):
                return body
            return s if body is s.body else LetStmt(s.var, s.value, body)
        if t is For:
            body = self.stmt(s.body)
            if body is None:
                return None
            return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body,
                                                s.thread_tag, s.annotations)
        if t is IfThenElse:
            a = self.stmt(s.then_case)
            b = self.stmt(s.else_case) if s.else_case is not None else None
            if a is None and b is None:
                return None
            if a is None:
                return IfThenElse(logical_not(s.condition), b, None)
            return s if (a is s.then_case and b is s.else_case) else IfThenElse(s.condition, a, b)
        if t is SeqStmt:
            out, changed = [], False
            for x in s.seq:
                y = self.stmt(x)
                changed |= y is not x
                if y is None:
                    continue
                out.extend(y.seq if type(y) is SeqStmt else (y,))
            if not changed:
                return s
            if not out:
                return None
            return out[0] if len(out) == 1 else SeqStmt(tuple(out))
        if t is AttrStmt:
            body = self.stmt(s.body)
            if body is None:
                return None
            return s if body is s.body else AttrStmt(s.key, s.node, s.value, body)
        if t is Evaluate:
            return None if type(s.value) is Const else s
        return s


def _pure(e) -> bool:
    found = []

    def f(n):
        if type(n) is Call and n.name not in PURE_CALLS:
            found.append(n)
    post_order_visit(e, f)
    return not found


def _is_noop(s) -> bool:
    return type(s) is Evaluate and type(s.value) is Const
