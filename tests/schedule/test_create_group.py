"""``Schedule.create_group`` (TVM <= 0.14), ported in spirit from TVM's ``test_te_group.py`` and
``test_te_schedule_bound_inference.py`` (group schedules, nested groups): membership, nesting,
the group's place, its stages' regions, compiled results against numpy (``check_llvm``), the
record's forms, one test per error."""
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.schedule import ScheduleError


def chain():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    x = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="x")
    x1 = te.compute(x.shape, lambda *i: x(*i) + 1.0, name="x1")
    x2 = te.compute(x.shape, lambda *i: x1(*i) * 3.0, name="x2")
    return A, x, x1, x2


def test_group_computed_at_a_loop(check_llvm, rand):
    A, x, x1, x2 = chain()
    s = te.create_schedule(x2.op)
    g = s.create_group(outputs=x1, inputs=x, include_inputs=True)
    assert s[x1].group is g and s[x].group is g and g.num_child_stages == 2 and g.group is None
    g.compute_at(s[x2], x2.op.axis[0])
    assert g.attach_stage is s[x2] and s[x].attach_stage is s[x2] and s[x1].attach_stage is s[x2]
    text = str(tc.lower(s, [A, x2], simple_mode=True))
    assert "x = allocate(float32[n]" in text and "x1 = allocate(float32[n]" in text     # one row each
    a = rand((5, 6))
    check_llvm(s, [A, x2], {A: a}, {x2: (a * 2.0 + 1.0) * 3.0})


def test_nested_groups(check_llvm, rand):
    A, x, x1, x2 = chain()
    s = te.create_schedule(x2.op)
    g1 = s.create_group(outputs=x1, inputs=x)
    g2 = s.create_group(outputs=x1, inputs=x, include_inputs=True)
    assert s[x].group is g2 and s[x1].group is g1 and g1.group is g2
    assert g2.num_child_stages == 2 and g1.num_child_stages == 1
    s = te.create_schedule(x2.op)
    g1 = s.create_group(outputs=x, inputs=x, include_inputs=True)
    g2 = s.create_group(outputs=x1, inputs=x, include_inputs=True)
    assert s[x].group is g1 and s[x1].group is g2 and g1.group is g2
    g2.compute_at(s[x2], x2.op.axis[0])
    g1.compute_at(s[x1], s[x1].op.axis[1])
    assert s[x].attach_stage is s[x1] and s[x1].attach_stage is s[x2]
    assert "x = allocate(float32[1]" in str(tc.lower(s, [A, x2], simple_mode=True))
    a = rand((4, 7))
    check_llvm(s, [A, x2], {A: a}, {x2: (a * 2.0 + 1.0) * 3.0})


def test_compute_root_inside_and_of_a_group(check_llvm, rand):
    A, x, x1, x2 = chain()
    s = te.create_schedule(x2.op)
    g = s.create_group(outputs=x1, inputs=x, include_inputs=True)
    s[x].compute_at(s[x1], s[x1].op.axis[1])
    g.compute_at(s[x2], x2.op.axis[0])
    assert s[x].attach_stage is s[x1]            # attached inside the group: stays
    s[x].compute_root()                          # back to the group's place, not the root
    assert s[x].attach_stage is s[x2] and s[x].attach_ivar is x2.op.axis[0]
    g.compute_root()
    assert s[x].attach_type == "root" and s[x1].attach_type == "root"
    a = rand((3, 5))
    check_llvm(s, [A, x2], {A: a}, {x2: (a * 2.0 + 1.0) * 3.0})


def test_group_steps_replay():
    from tilecraft.schedule.schedule import from_json
    A, x, x1, x2 = chain()
    s = te.create_schedule(x2.op)
    g = s.create_group(outputs=[x1], inputs=[x], include_inputs=True)
    io, ii = s[x2].split(x2.op.axis[0], factor=2)
    g.compute_at(s[x2], io)
    text, code = s.to_json(), s.to_python()
    assert '"step": "group_compute_at", "group": "group0"' in text
    assert "group0 = s.create_group(outputs=[x1], inputs=[x], include_inputs=True)" in code
    A2, y, y1, y2 = chain()
    s2 = from_json(text, [y2.op])
    assert str(tc.lower(s2, [A2, y2])) == str(tc.lower(s, [A, x2]))
    s3 = te.create_schedule(y2.op)
    exec(code, {"s": s3, "x": y, "x1": y1, "x2": y2})
    assert s3.to_json() == text


def test_group_errors():
    A, x, x1, x2 = chain()
    s = te.create_schedule(x2.op)
    g = s.create_group(outputs=x1, inputs=x)
    with pytest.raises(ScheduleError, match=r"compute_at of stage 'x1' into 'x': 'x1' is in group0, 'x' is not"):
        s[x1].compute_at(s[x], x.op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_at of group0 at stage 'x1', which is in the group"):
        g.compute_at(s[x1], x1.op.axis[0])
    with pytest.raises(ScheduleError, match=r"create_group: no stage lies between the inputs \(x2\) and the "
                                            r"outputs \(x\)"):
        s.create_group(outputs=x, inputs=x2)
    with pytest.raises(ScheduleError, match=r"create_group: outputs and inputs must be tensors"):
        s.create_group(outputs=x1, inputs="x")
