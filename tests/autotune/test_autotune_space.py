"""Config spaces: encoding, every define_* policy, printing, fallbacks."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilecraft.autotune as autotune
from tilecraft.autotune.space import (AnnotateEntity, ConfigEntity, ConfigSpace, FallbackConfigEntity,
                                      InstantiationError, ReorderEntity, SplitEntity, VirtualAxis,
                                      axis_extent, get_factors)

from autotune_fakes import FakeAxis, FakeSchedule


class ConstExpr:
    def __init__(self, value):
        self.value = value


class Dom:
    def __init__(self, extent):
        self.extent = ConstExpr(extent)


class IterVarLike:
    """What the core's IterVar offers: .dom.extent.value and .var.name."""

    def __init__(self, name, extent):
        self.dom = Dom(extent)
        self.var = type("Var", (), {"name": name})()


def make_space():
    cfg = ConfigSpace()
    cfg.define_split("tile_y", 64, num_outputs=3)
    cfg.define_split("tile_x", IterVarLike("x", 48), num_outputs=2, policy="power2")
    cfg.define_reorder("order", [FakeAxis("a", 1), FakeAxis("b", 1), FakeAxis("c", 1)], policy="all")
    cfg.define_annotate("ann", [FakeAxis("a", 1), FakeAxis("b", 1)], policy="try_unroll_vec")
    cfg.define_knob("auto_unroll", [0, 512, 1500])
    return cfg


def test_space_size_is_product_of_knobs():
    cfg = make_space()
    n_split3 = sum(1 for a in get_factors(64) for b in get_factors(64) if 64 % (a * b) == 0)
    assert cfg.dims == [n_split3, 6, 6, 6, 3]
    assert len(cfg) == n_split3 * 6 * 6 * 6 * 3


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_index_round_trips(data):
    cfg = make_space()
    i = data.draw(st.integers(0, len(cfg) - 1))
    entity = cfg.get(i)
    assert entity.index == i
    assert cfg.knob2point(cfg.point2knob(i)) == i
    knob = [cfg.space_map[k].index(v) for k, v in entity._entity_map.items()]
    assert cfg.knob2point(knob) == i
    back = ConfigEntity.from_json_dict(entity.to_json_dict())
    assert back == entity


def test_split_factors_policy_divides_exactly():
    cfg = ConfigSpace()
    cfg.define_split("s", 24, num_outputs=3)
    sizes = [e.size for e in cfg.space_map["s"].entities]
    assert all(s[0] == -1 and 24 % (s[1] * s[2]) == 0 for s in sizes)
    assert len(set(map(tuple, sizes))) == len(sizes)
    assert sizes[0] == [-1, 1, 1]       # the first (fallback) value does not split
    assert [-1, 4, 6] in sizes and [-1, 24, 1] in sizes


def test_split_power2_verbose_candidate_maxfactor_filter():
    cfg = ConfigSpace()
    cfg.define_split("p2", 48, policy="power2")
    assert [e.size[1] for e in cfg.space_map["p2"].entities] == [1, 2, 4, 8, 16, 32]
    cfg.define_split("vb", 12, policy="verbose")
    assert [e.size[1] for e in cfg.space_map["vb"].entities] == [1, 2, 3, 4, 6, 8, 12]
    cfg.define_split("cand", 64, policy="candidate", candidate=[[-1, 4], [-1, 16]])
    assert [e.size for e in cfg.space_map["cand"].entities] == [[-1, 4], [-1, 16]]
    cfg.define_split("mf", 64, max_factor=8)
    assert max(e.size[1] for e in cfg.space_map["mf"].entities) == 8
    cfg.define_split("fl", 64, filter=lambda e: e.size[-1] >= 4)
    assert min(e.size[1] for e in cfg.space_map["fl"].entities) == 4


def test_split_rejects_symbolic_extent_and_bad_policy():
    class Sym:
        dom = type("D", (), {"extent": object()})()
    with pytest.raises(ValueError, match="symbolic extent"):
        ConfigSpace().define_split("s", Sym())
    with pytest.raises(ValueError, match="unknown split policy"):
        ConfigSpace().define_split("s", 8, policy="nope")
    cfg = ConfigSpace(); cfg.define_knob("k", [1])
    with pytest.warns(UserWarning, match="knob 'k' is defined again with other values"):
        cfg.define_knob("k", [2])           # TVM: the last definition replaces the first
    assert cfg["k"].val == 2 and len(cfg) == 1


def test_split_apply_splits_innermost_last():
    s = FakeSchedule()
    loops = SplitEntity([-1, 4, 8]).apply(s, "C", FakeAxis("y", 64))
    assert s.log == [("split", "y", 32), ("split", "y.i", 8)]
    assert [l.name for l in loops] == ["y.o", "y.i.o", "y.i.i"]


def test_reorder_policies():
    axes = [FakeAxis(n, 1) for n in "abcd"]
    cfg = ConfigSpace()
    cfg.define_reorder("id", axes, policy="identity")
    cfg.define_reorder("all", axes, policy="all")
    cfg.define_reorder("iv", axes, policy="interval_all", interval=(1, 3))
    cfg.define_reorder("cd", axes, policy="candidate", candidate=[axes, axes[::-1]])
    assert len(cfg.space_map["id"]) == 1 and len(cfg.space_map["all"]) == 24
    assert {e.perm for e in cfg.space_map["iv"].entities} == {(0, 1, 2, 3), (0, 2, 1, 3)}
    assert [e.perm for e in cfg.space_map["cd"].entities] == [(0, 1, 2, 3), (3, 2, 1, 0)]
    s = FakeSchedule()
    out = ReorderEntity((3, 2, 1, 0)).apply(s, "C", axes)
    assert [a.name for a in out] == list("dcba") and s.log == [("reorder", tuple("dcba"))]


def test_annotate_policies_and_apply():
    axes = [FakeAxis("a", 4), FakeAxis("b", 8)]
    cfg = ConfigSpace()
    for p in ("unroll", "vec", "try_unroll", "try_vec", "try_unroll_vec", "try_parallel", "bind_gpu"):
        cfg.define_annotate(p, axes, policy=p)
    anns = {p: [e.anns for e in cfg.space_map[p].entities] for p in cfg.space_map}
    assert anns["unroll"] == [("unroll", "unroll")]
    assert anns["vec"] == [("none", "vec")]
    assert len(anns["try_unroll"]) == 4 and len(anns["try_vec"]) == 2
    assert set(anns["try_unroll_vec"]) == {(a, b) for a in ("none", "unroll") for b in ("none", "unroll", "vec")}
    assert anns["bind_gpu"] == [("blockIdx.x", "threadIdx.x")]
    s = FakeSchedule()
    AnnotateEntity(["unroll", "vec"]).apply(s, "C", axes)
    assert s.log == [("unroll", "a"), ("vectorize", "b")]


def test_annotate_flags_invalid_configs():
    axes = [FakeAxis("a", 64), FakeAxis("b", 3)]
    entity = ConfigEntity(0, None, {"ann": AnnotateEntity(["unroll", "vec"])})
    entity["ann"].apply(FakeSchedule(), "C", axes, axis_lens=[64, 3], max_unroll=16, vec_size=[4, 8], cfg=entity)
    assert not entity.valid()
    assert "max_unroll=16" in entity.errors[0] and "vector width 3" in entity.errors[1]
    with pytest.raises(InstantiationError):
        AnnotateEntity(["vec"]).apply(FakeSchedule(), "C", axes[1:], axis_lens=[3], vec_size=[4])


def test_knob_and_multi_filter():
    cfg = ConfigSpace()
    cfg.define_split("a", 16)
    cfg.define_split("b", 16)
    cfg.multi_filter(lambda e: e["a"].size[-1] * e["b"].size[-1] <= 16)
    assert cfg.range_length == 25
    assert len(cfg) == sum(1 for x in (1, 2, 4, 8, 16) for y in (1, 2, 4, 8, 16) if x * y <= 16)
    for e in cfg:
        assert e["a"].size[-1] * e["b"].size[-1] <= 16
    rng = np.random.default_rng(0)
    for p in cfg.sample_ints(10, rng):
        assert cfg.is_index_valid(p)
        assert cfg.is_index_valid(cfg.random_walk(p, rng))


def test_print_lists_every_knob_and_size():
    text = str(make_space())
    for name in ("tile_y", "tile_x", "order", "ann", "auto_unroll"):
        assert name in text
    assert f"len={len(make_space())}" in text


def test_fallback_entity():
    fb = FallbackConfigEntity()
    fb.define_split("s", 64, num_outputs=2)
    fb.define_knob("k", [7, 8])
    assert fb.is_fallback and fb["s"].size == [-1, 1] and fb["k"].val == 7
    fb.fallback_split("s", [-1, 8])
    assert fb["s"].size == [8, 8]


def test_flatten_feature_has_fixed_length_and_flop():
    cfg = make_space()
    lens = {len(cfg.get(i).get_flatten_feature()) for i in range(0, len(cfg), 97)}
    assert len(lens) == 1
    cfg.add_flop(10)
    cfg.add_flop(5)
    assert cfg.flop == 15


def test_axis_extent_accepts_ints_itervars_virtual_axes():
    assert axis_extent(5) == 5
    assert axis_extent(np.int64(6)) == 6
    assert axis_extent(IterVarLike("i", 7)) == 7
    assert axis_extent(VirtualAxis(8)) == 8
    assert ConfigSpace().axis(IterVarLike("i", 9)).length == 9


def test_a_mistyped_knob_lists_the_knobs_in_every_mode():
    """Before, a bare KeyError: 'tile_yy'."""
    from tilecraft.autotune.space import UnknownKnobError
    space = ConfigSpace()
    space.define_split("tile_y", 16, num_outputs=2)
    space.define_knob("unroll", [0, 1])
    fallback = FallbackConfigEntity()
    fallback.define_split("tile_y", 16, num_outputs=2)
    for cfg in (space, fallback):
        with pytest.raises(UnknownKnobError) as e:
            cfg["tile_yy"]
        assert isinstance(e.value, KeyError)
        assert str(e.value).startswith("no knob 'tile_yy' (did you mean 'tile_y'?); the knobs defined so far are: tile_y")
    with pytest.raises(UnknownKnobError, match=r"no knob 'x'; the knobs defined so far are: tile_y, unroll\."):
        space["x"]


def test_index_of_finds_logged_configs_knob_by_knob():
    space = ConfigSpace()
    space.define_split("tile_y", 16, num_outputs=2)
    space.define_knob("unroll", [0, 1])
    for i in range(len(space)):
        cfg = ConfigEntity.from_json_dict(space.get(i).to_json_dict())
        assert space.index_of(cfg) == i and space.mismatch(cfg) is None
    other = ConfigEntity.from_json_dict({"index": 0, "knobs": [["tile_y", "sp", [-1, 3]], ["unroll", "ot", 0]]})
    assert space.index_of(other) is None and "is not one of the values" in space.mismatch(other)
    renamed = ConfigEntity.from_json_dict({"index": 0, "knobs": [["tile_rows", "sp", [-1, 4]], ["unroll", "ot", 0]]})
    assert "another version of the template" in space.mismatch(renamed)
    unrolled = next(space.get(i).to_json_dict() for i in range(space.range_length) if space.get(i)["unroll"].val == 1)
    space.multi_filter(lambda e: e["unroll"].val == 0)
    assert "multi_filter" in space.mismatch(ConfigEntity.from_json_dict(unrolled))
