"""The structure every IR node class declares (``child_fields``, ``ref_fields``; see
``tilecraft/ir/node.py``) and what is derived from it: ``children``, ``with_children``,
``node_key``, ``structural_equal``, ``expr_key`` and the mutator's defaults.

Random trees hold every node class. Each is built twice from one recipe (equal structure,
distinct objects; variables, buffers and tensors shared), and the derived functions are checked
against each other and against a reference equality written here from the dataclass fields.
"""
import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tilecraft.ir import expr as ir_expr, stmt as ir_stmt
from tilecraft.ir import (AccessPtr, Allocate, AttrStmt, Binary, BinOp, Broadcast, Buffer, BufferLoad,
                          BufferRegion, BufferStore, Call, Cast, CommReducer, Const, Evaluate, For,
                          ForKind, IfThenElse, IRMutator, IterVar, Let, LetStmt, Ramp, Range, Reduce,
                          Select, SeqStmt, SizeVar, StringImm, TensorLoad, Unary, UnOp, Var,
                          VectorReduce, structural_equal)
from tilecraft.ir.functor import children, expr_key, post_order_visit
from tilecraft.ir.node import EXPR, Node, ir_node, node_source


def node_classes():
    """Every Expr and Stmt class of the IR modules."""
    out = []
    for mod in (ir_expr, ir_stmt):
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Node) and dataclasses.is_dataclass(obj) \
                    and obj.__module__ == mod.__name__:
                out.append(obj)
    return out


# -- declarations ----------------------------------------------------------------------------

@pytest.mark.parametrize("cls", node_classes(), ids=lambda c: c.__name__)
def test_every_node_class_declares_its_structure(cls):
    assert "child_fields" in vars(cls), f"{cls.__name__} must declare child_fields (see ir/node.py)"
    fields = {f.name for f in dataclasses.fields(cls)}
    names = [f for f, _ in cls.child_fields]
    assert set(names) <= fields and set(cls.ref_fields) <= fields - set(names)
    for derived in ("children", "with_children", "node_key"):
        assert derived in vars(cls), derived
    assert f"visit_{cls.__name__}" in vars(IRMutator)
    assert "def children(self)" in node_source(cls)


def test_the_strategy_builds_every_node_class():
    assert set(BUILDERS) == set(node_classes())


def test_a_declaration_naming_a_missing_field_is_refused():
    with pytest.raises(TypeError, match=r"Bad.child_fields names 'b', which is not one of its fields \['a'\]"):
        @ir_node
        @dataclasses.dataclass(frozen=True)
        class Bad(ir_expr.Expr):
            a: object
            child_fields = (("b", EXPR),)


def test_a_declaration_with_an_unknown_kind_is_refused():
    with pytest.raises(TypeError, match=r"Bad.child_fields: the kind of 'a' is 'node', not one of"):
        @ir_node
        @dataclasses.dataclass(frozen=True)
        class Bad(ir_expr.Expr):
            a: object
            child_fields = (("a", "node"),)


def test_with_children_refuses_a_wrong_number_of_children():
    x = Var("x")
    with pytest.raises(ValueError):
        Binary(BinOp.ADD, x, x, "int32").with_children((x,))
    with pytest.raises(ValueError, match="Var has no children, got 1"):
        x.with_children((x,))
    r = _reduce(x, (x,))
    with pytest.raises(ValueError, match=r"Reduce.with_children: expected 3 children, got 2"):
        r.with_children((x, x))


def test_children_of_something_that_is_no_node():
    with pytest.raises(TypeError, match="not an IR node: 3"):
        children(3)


# -- random trees ----------------------------------------------------------------------------

X, Y, N = Var("x"), Var("y"), SizeVar("n")
VARS = (X, Y, N)
BUF = Buffer("B", (Const(64, "int32"),), "float32")
BUF2 = Buffer("C", (N,), "float32", "local")       # allocated: its shape is visited too
K = IterVar(Range(Const(0, "int32"), Const(8, "int32")), Var("k"), )
COMBINER = CommReducer((Var("a", "float32"),), (Var("b", "float32"),), (Var("a", "float32"),),
                       (Const(0.0, "float32"),), "sum")


class _Tensor:
    """Stands in for a te.Tensor (TensorLoad only needs its dtype)."""
    dtype = "float32"


TENSOR = _Tensor()


# 0.0 and -0.0, 1 and 1.0 (as float32), int32 and int64: equal in Python, different constants
CONSTS = [(0, "int32"), (1, "int32"), (1, "int64"), (0.0, "float32"), (-0.0, "float32"),
          (1, "float32"), (1.0, "float32")]


def _unnested(s):
    """A sequence is never directly inside another (``seq()`` flattens them)."""
    return AttrStmt("item", "", "", s) if type(s) is SeqStmt else s


def _reduce(src, init=()):
    return Reduce(COMBINER, (src,), (K,), Const(True, "bool"), 0, init)


# Each builder takes recipes (callables that build a fresh subtree) and returns a recipe.
E, S = "expr", "stmt"
BUILDERS = {
    Var: ((), lambda pick: (lambda: VARS[pick % 2])),
    SizeVar: ((), lambda pick: (lambda: N)),
    Const: ((), lambda pick: (lambda: Const(*CONSTS[pick]))),
    Binary: ((E, E), lambda pick, a, b: (lambda: Binary((BinOp.ADD, BinOp.MUL, BinOp.MIN)[pick % 3], a(), b(), "int32"))),
    Unary: ((E,), lambda pick, a: (lambda: Unary(UnOp.NEG, a(), "int32"))),
    Cast: ((E,), lambda pick, a: (lambda: Cast(("int64", "float32")[pick % 2], a()))),
    Select: ((E, E, E), lambda pick, c, a, b: (lambda: Select(c(), a(), b(), bool(pick % 2)))),
    Call: ((E, E), lambda pick, a, b: (lambda: Call("max", (a(), b())[:1 + pick % 2], "int32"))),
    TensorLoad: ((E, E), lambda pick, a, b: (lambda: TensorLoad(TENSOR, (a(), b())[:1 + pick % 2]))),
    BufferLoad: ((E,), lambda pick, a: (lambda: BufferLoad((BUF, BUF2)[pick % 2], (a(),), "float32"))),
    Ramp: ((E, E), lambda pick, a, b: (lambda: Ramp(a(), b(), 4 + 4 * (pick % 2)))),
    Broadcast: ((E,), lambda pick, a: (lambda: Broadcast(a(), 4 + 4 * (pick % 2)))),
    Let: ((E, E), lambda pick, a, b: (lambda: Let(VARS[pick % 2], a(), b()))),
    # a float32 vector whatever the subtree's dtype (a handle, a vector) is
    VectorReduce: ((E,), lambda pick, a: (lambda: VectorReduce((BinOp.ADD, BinOp.MAX)[pick % 2],
                                                               Broadcast(Cast("float32", a()), 4)))),
    Reduce: ((E, E), lambda pick, a, b: (lambda: Reduce(COMBINER, (a(),) if pick % 2 else (a(), b()), (K,),
                                                            Const(True, "bool"), 0,
                                                            (b(),) if pick % 2 else ()))),
    For: ((E, S), lambda pick, a, body: (lambda: For(VARS[pick % 2], Const(0, "int32"), a(),
                                                      (ForKind.SERIAL, ForKind.PARALLEL)[pick % 2], body()))),
    BufferStore: ((E, E), lambda pick, v, i: (lambda: BufferStore((BUF, BUF2)[pick % 2], v(), (i(),)))),
    Allocate: ((S,), lambda pick, body: (lambda: Allocate(BUF2, body()))),
    SeqStmt: ((S, S), lambda pick, a, b: (lambda: SeqStmt((_unnested(a()), _unnested(b()))))),
    IfThenElse: ((E, S, S), lambda pick, c, a, b: (lambda: IfThenElse(c(), a(), b() if pick % 2 else None))),
    LetStmt: ((E, S), lambda pick, v, body: (lambda: LetStmt(VARS[pick % 2], v(), body()))),
    Evaluate: ((E,), lambda pick, v: (lambda: Evaluate(v()))),
    AttrStmt: ((E, S), lambda pick, v, body: (lambda: AttrStmt("pragma_x", "C", v() if pick % 2 else "tag", body()))),
    StringImm: ((), lambda pick: (lambda: StringImm(("f", "g", "")[pick % 3]))),
    AccessPtr: ((E, E), lambda pick, a, b: (lambda: AccessPtr((BUF, BUF2)[pick % 2], a(), b(), 1 + pick % 3))),
    # a box whose begin and strides trade places: (x,) + () and () + (x,) differ
    BufferRegion: ((E, E), lambda pick, a, b: (lambda: BufferRegion((BUF, BUF2)[pick % 2], (a(),) * (pick % 2),
                                                                    (b(),), (a(),) * (1 - pick % 2)))),
}


def _recipes(kind, depth):
    classes = [c for c, (args, _) in BUILDERS.items()
               if issubclass(c, ir_expr.Expr if kind == E else ir_stmt.Stmt) and (depth > 0 or not args)]
    if kind == S and depth == 0:
        return st.builds(lambda pick: (lambda: Evaluate(VARS[pick])), st.integers(0, len(VARS) - 1))

    def one(cls):
        args, make = BUILDERS[cls]
        return st.builds(make, st.integers(0, len(CONSTS) - 1), *[_recipes(a, depth - 1) for a in args])
    return st.one_of([one(c) for c in classes])


trees = st.one_of(_recipes(E, 3), _recipes(S, 3))
pairs = st.tuples(trees, trees)


def fields_equal(a, b) -> bool:
    """Reference structural equality, straight from the dataclass fields: nodes field by field,
    variables and referenced objects by identity, constants by value, dtype and sign."""
    if a is b:
        return True
    if isinstance(a, Node) or isinstance(b, Node):
        if type(a) is not type(b) or isinstance(a, Var):
            return False
        if isinstance(a, Const):
            return (a.dtype == b.dtype and type(a.value) is type(b.value) and a.value == b.value
                    and math.copysign(1, a.value) == math.copysign(1, b.value))
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name in type(a).ref_fields:
                if x is not y:
                    return False
            elif not fields_equal(x, y):
                return False
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(fields_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, IterVar) or isinstance(b, IterVar):
        return a is b
    return type(a) is type(b) and a == b


def all_nodes(root):
    out = []
    post_order_visit(root, out.append)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_children_are_exactly_the_node_valued_fields(recipe):
    for n in all_nodes(recipe()):
        expected = []
        for f, _ in type(n).child_fields:
            v = getattr(n, f)
            expected.extend(v if isinstance(v, tuple) else [v] if isinstance(v, Node) else [])
        assert list(n.children()) == expected
        for f in dataclasses.fields(n):
            v = getattr(n, f.name)
            holds_nodes = isinstance(v, Node) or (isinstance(v, tuple) and any(isinstance(x, Node) for x in v))
            if holds_nodes and f.name not in dict(type(n).child_fields):
                assert f.name in type(n).ref_fields, f"{type(n).__name__}.{f.name} holds nodes but is no child"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_rebuild_with_the_same_children_is_the_same_node(recipe):
    for n in all_nodes(recipe()):
        assert n.with_children(n.children()) is n
        assert n.with_children(list(n.children())) is n


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_rebuild_with_equal_copies_is_an_equal_new_node(recipe):
    a, b = recipe(), recipe()
    for x, y in zip(all_nodes(a), all_nodes(b)):        # the same shape, so the same order
        kids = y.children()
        r = x.with_children(kids)
        assert type(r) is type(x)
        assert all(p is q for p, q in zip(r.children(), kids)) and len(r.children()) == len(kids)
        assert (r is x) == all(p is q for p, q in zip(x.children(), kids))
        assert fields_equal(r, x) and structural_equal(r, x) and r.node_key() == x.node_key()
        for f in dataclasses.fields(x):                   # what is no child is kept as it is
            if f.name not in dict(type(x).child_fields):
                assert getattr(r, f.name) is getattr(x, f.name)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs)
def test_structural_equal_agrees_with_the_fields(two):
    ra, rb = two
    a, a2, b = ra(), ra(), rb()
    assert structural_equal(a, a2) and fields_equal(a, a2)
    assert structural_equal(a, b) == fields_equal(a, b) == structural_equal(b, a)
    if isinstance(a, ir_expr.Expr) and isinstance(b, ir_expr.Expr):
        # the nested node key is what hash-consing and linear forms go by
        assert expr_key(a) == expr_key(a2) and hash(expr_key(a)) == hash(expr_key(a2))
        assert (expr_key(a) == expr_key(b)) == fields_equal(a, b)


class _Renew(IRMutator):
    """Replaces every constant by an equal new one, so every ancestor must be rebuilt."""

    def visit_Const(self, e):
        return Const(e.value, e.dtype)


class _Order(IRMutator):
    def __init__(self):
        self.seen = []

    def visit_expr(self, e):
        self.seen.append(e)
        return super().visit_expr(e)

    def visit_stmt(self, s):
        self.seen.append(s)
        return super().visit_stmt(s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_mutator_defaults_visit_the_children_and_rebuild_only_what_changed(recipe):
    t = recipe()
    assert IRMutator().visit(t) is t
    r = _Renew().visit(t)
    assert fields_equal(r, t)
    has_const = any(type(n) is Const for n in all_nodes(t))
    assert (r is not t) == has_const
    for x, y in zip(all_nodes(t), all_nodes(r)):
        if type(x) is not SeqStmt:            # SeqStmt's default flattens; the rest rebuild alike
            assert (x is y) == (not any(type(n) is Const for n in all_nodes(x)))
    order = _Order()
    order.visit(t)
    pre = []
    stack = [t]
    while stack:                                # pre-order, children in children() order
        n = stack.pop()
        pre.append(n)
        stack.extend(reversed(n.children()))
        if type(n) is Allocate:                 # and an allocation's shape before its body
            stack.extend(reversed(n.buffer.shape))
    assert [id(n) for n in order.seen] == [id(n) for n in pre]


def test_constants_differ_by_sign_of_zero_and_dtype():
    assert not structural_equal(Const(0.0, "float32"), Const(-0.0, "float32"))
    assert not structural_equal(Const(1, "int32"), Const(1, "int64"))
    assert structural_equal(Const(-0.0, "float32"), Const(-0.0, "float32"))
    assert not Const(0.0, "float32").equal(Const(-0.0, "float32"))


def test_statements_compare_structurally():
    a = For(X, Const(0, "int32"), N, ForKind.SERIAL, BufferStore(BUF, Const(1.0, "float32"), (X,)))
    b = For(X, Const(0, "int32"), N, ForKind.SERIAL, BufferStore(BUF, Const(1.0, "float32"), (X,)))
    c = For(Y, Const(0, "int32"), N, ForKind.SERIAL, BufferStore(BUF, Const(1.0, "float32"), (Y,)))
    assert structural_equal(a, b) and not structural_equal(a, c)
    assert not structural_equal(IfThenElse(X < 1, a, None), IfThenElse(X < 1, a, b))


def test_structural_equal_on_a_very_deep_tree():
    def chain(n):
        e = X
        for k in range(n):
            e = Binary(BinOp.ADD, e, Const(k, "int32"), "int32")
        return e
    assert structural_equal(chain(20000), chain(20000))
    assert not structural_equal(chain(20000), Binary(BinOp.ADD, chain(19999), Const(0, "int32"), "int32"))


def test_reduce_keeps_source_and_init_apart():
    x, y, true = X, Y, Const(True, "bool")
    one = Reduce(COMBINER, (x, y), (K,), true, 0, ())
    other = Reduce(COMBINER, (x,), (K,), true, 0, (y,))
    assert all(p is q for p, q in zip(one.children(), other.children()))
    assert not structural_equal(one, other) and expr_key(one) != expr_key(other)
