"""One test per error of ``s[C].tensorize``: at the call, and when lowering matches the loop nest
against the intrinsic (which part differs) and fits its declared buffers to the boxes they view."""
import dataclasses
import re

import pytest

import tilecraft as tc
from tilecraft import te, tir
from tilecraft.schedule import ScheduleError, from_json

from tensorize_intrins import gemv, matmul_bt, tensorized_gemv, vfma

WHERE = "tensorize of stage 'C' at axis 'j.inner' with intrinsic 'gemv': "


def raises(pattern):
    return pytest.raises(ScheduleError, match=pattern)


def split_schedule(n=4, m=32, l=24, factor=16, kfactor=None, C_of=None):
    """``C_of()`` returns the arguments, the output last (default: A B^T); returns (s, args, j.inner)."""
    args = C_of() if C_of else matmul_bt(n, m, l)
    C = args[-1]
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=factor)
    if kfactor:
        zo, zi = s[C].split(z, factor=kfactor)
        s[C].reorder(x, yo, zo, yi, zi)
    else:
        s[C].reorder(x, yo, yi, z)
    return s, tuple(args), yi


def lower_fails(s, args, pattern):
    with raises(pattern):
        tc.lower(s, list(args))


# -- at the call ----------------------------------------------------------------------------------

def test_intrinsic_with_more_scalar_params_than_output_axes():
    a = te.placeholder((4,), name="a")
    c = te.compute((4,), lambda i: a[i] * 2.0, name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs, sp: tir.Evaluate(0),
                                   scalar_params=[te.var("x"), te.var("y")], name="scaled")
    s, args, yi = split_schedule()
    with raises("tensorize on stage 'C' with intrinsic 'scaled': it has 2 scalar_params but 1 output axes; "
                "scalar parameter k is bound to the region's start along output axis k"):
        s[args[2]].tensorize(yi, intrin)


def test_a_second_tensorized_axis():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 24))
    with raises("tensorize on stage 'C': the stage is already tensorized at axis 'j.inner' \\(with 'gemv'\\); "
                "a stage has at most one tensorized loop"):
        s[C].tensorize(s[C].leaf_iter_vars[1], gemv(16, 24))


def test_the_same_axis_tensorized_again_takes_the_new_intrinsic():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 24, name="first"))
    s[C].tensorize(yi, gemv(16, 24, name="second"))
    assert "tensor_intrin(second)" in str(tc.lower(s, [A, B, C]))


def test_tensorized_axis_split_afterwards():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 24))
    s[C].split(yi, factor=4)
    lower_fails(s, (A, B, C), "tensorize of stage 'C': axis 'j.inner' was tensorized and then split or "
                              "fused; tensorize one of the axes that replaced it")


# -- the loops under the axis ------------------------------------------------------------------------

def test_thread_bound_loop_inside_the_region():
    s, (A, B, C), yi = split_schedule()
    s[C].bind(C.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[C].tensorize(yi, gemv(16, 24))
    lower_fails(s, (A, B, C), WHERE + "loop 'k' inside the tensorized region is bound to threadIdx.x")


def test_stage_computed_inside_the_region():
    A, B, C = matmul_bt(4, 32, 24)
    B2 = te.compute(B.shape, lambda i, j: B[i, j] * 2.0, name="B2")
    k = te.reduce_axis((0, 24), name="k")
    C = te.compute((4, 32), lambda i, j: te.sum(A[i, k] * B2[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    s[B2].compute_at(s[C], C.op.reduce_axis[0])
    s[C].tensorize(yi, gemv(16, 24))
    lower_fails(s, (A, B, C), WHERE + "stage 'B2' is computed at loop 'k', inside the tensorized region")


def test_guard_inside_the_region():
    s, (A, B, C), yi = split_schedule(m=40)          # 40 = 16 + 16 + 8: a tail
    s[C].tensorize(yi, gemv(16, 24))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the guard `j.outer * 16 + j.inner < 40`") +
                ".* depends on loop 'j.inner' inside the tensorized region")


def test_loops_that_do_not_cover_a_box():
    A, B, C = matmul_bt(4, 16, 24)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    jo, ji = s[C].split(y, factor=4)
    s[C].reorder(ji, x, jo, z)
    s[C].tensorize(x, gemv(16, 24))
    lower_fails(s, (A, B, C), re.escape("tensorize of stage 'C' at axis 'i' with intrinsic 'gemv': the loops "
                                        "from 'i' inwards (i: 4 × j.outer: 4 × k: 24) do not run once per "
                                        "point of the box they cover (i: 4, j: 13, k: 24)"))


# -- axes -------------------------------------------------------------------------------------------

def test_intrinsic_with_more_output_axes():
    a = te.placeholder((16,), name="a")
    c = te.compute((4, 4), lambda i, j: a[i * 4 + j], name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.Evaluate(0), name="gemv")
    A = te.placeholder((16,), name="A")
    C = te.compute((16,), lambda j: A[j], name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[0], factor=4)
    s[C].tensorize(ji, intrin)
    lower_fails(s, (A, C), re.escape(WHERE + "the intrinsic has 2 output axes (i, j) but the stage has 1"))


def test_leading_output_axis_not_a_single_point():
    A, B, C = matmul_bt(4, 16, 24)
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[0], gemv(16, 24))
    lower_fails(s, (A, B, C), re.escape("tensorize of stage 'C' at axis 'i' with intrinsic 'gemv': output "
                                        "axis 'i' covers 4 points in the region, but the intrinsic has no axis "
                                        "for it"))


def test_output_axis_extent_differs():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(8, 24))
    lower_fails(s, (A, B, C), re.escape(WHERE + "output axis 'j' covers 16 points in the region but the "
                                                "intrinsic's axis 'i' has extent 8"))


def test_reduction_axis_extent_differs():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 32))
    lower_fails(s, (A, B, C), re.escape(WHERE + "reduction axis 'k' covers 24 points in the region but the "
                                                "intrinsic's axis 'k' has extent 32"))


def test_intrinsic_with_more_reduction_axes():
    a = te.placeholder((4, 4), name="a")
    r1, r2 = te.reduce_axis((0, 4), name="r1"), te.reduce_axis((0, 4), name="r2")
    c = te.compute((1,), lambda i: te.sum(a[r1, r2], axis=[r1, r2]), name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.Evaluate(0), name="gemv")
    A = te.placeholder((16,), name="A")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16,), lambda j: te.sum(A[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[0], factor=1)
    s[C].tensorize(ji, intrin)
    lower_fails(s, (A, C), re.escape(WHERE + "the intrinsic has 2 reduction axes (r1, r2) but the stage has 1"))


# -- inputs -----------------------------------------------------------------------------------------

def test_number_of_inputs_differs():
    def three():
        A, B, _ = matmul_bt(4, 32, 24)
        D = te.placeholder((32, 24), name="D")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, D, te.compute((4, 32), lambda i, j: te.sum(A[i, k] * B[j, k] + D[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=three)
    s[args[-1]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "the stage reads 3 tensor(s) (A, B, D) but the intrinsic 2 (a, b)"))


def test_input_dtype_differs():
    def half():
        A = te.placeholder((4, 24), "float16", name="A")
        B = te.placeholder((32, 24), name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[i, k].astype("float32") * B[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=half)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "input 0 of the stage, 'A', is float16 but the intrinsic's input "
                                           "'a' is float32"))


def test_input_with_fewer_dimensions_than_the_intrinsics():
    b = te.placeholder((16, 24), name="b")
    a = te.placeholder((24,), name="a")
    kk = te.reduce_axis((0, 24), name="k")
    c = te.compute((16,), lambda i: te.sum(b[i, kk] * a[kk], axis=kk), name="c")   # b is read first
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.Evaluate(0), name="gemv")

    def vector_a():
        A = te.placeholder((24,), name="A")
        B = te.placeholder((32, 24), name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[k] * B[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=vector_a)
    s[args[2]].tensorize(yi, intrin)
    lower_fails(s, args, re.escape(WHERE + "input 0: the intrinsic's 'b' has 2 dimensions but the stage's "
                                           "'A' has 1"))


def test_input_leading_dimension_not_a_single_point():
    def strided():
        A = te.placeholder((4, 24), name="A")
        B = te.placeholder((32, 24), name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[j // 8, k] * B[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=strided)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "the region reads A[j.outer * 2:+2, 0:+24]; the intrinsic's "
                                           "input 'a' has 1 dimension(s), so the leading 1 must be single points"))


def test_input_box_differs_from_the_intrinsic_buffer():
    def doubled():
        A = te.placeholder((4, 24), name="A")
        B = te.placeholder((32, 48), name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[i, k] * B[j, k * 2], axis=k), name="C")
    s, args, yi = split_schedule(C_of=doubled)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "the region reads B[j.outer * 16:+16, 0:+47] (extents 16, 47) but "
                                           "the intrinsic's buffer 'B' has shape (16, 24)"))


def test_input_index_the_region_cannot_bound():
    def squared():
        A = te.placeholder((4, 24), name="A")
        B = te.placeholder((32, 24), name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[i, k] * B[j, (k * k) % 24], axis=k), name="C")
    s, args, yi = split_schedule(C_of=squared)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "cannot tell which part of 'B' the region covers (the index "
                                           "`k * k % 24` is not an affine function of the loops)"))


# -- the computation --------------------------------------------------------------------------------

def test_computation_differs():
    def added():
        A, B, _ = matmul_bt(4, 32, 24)
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[i, k] + B[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=added)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, "(?s)" + re.escape(WHERE + "the stage does not compute what the intrinsic does.") +
                ".*" + re.escape("They differ at `a[k] + b[i, k]` versus `a[k] * b[i, k]`"))


def test_index_pattern_differs():
    def transposed():
        A = te.placeholder((4, 24), name="A")
        B = te.placeholder((24, 32), name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s, args, yi = split_schedule(C_of=transposed)
    sq = gemv(16, 16)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "the region reads B[0:+24, j.outer * 16:+16] (extents 24, 16) but "
                                           "the intrinsic's buffer 'B' has shape (16, 24)"))
    A = te.placeholder((16, 16), name="A")
    B = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], sq)
    with raises(re.escape("They differ at `b[k, i]` versus `b[i, k]`")):
        tc.lower(s, [A, B, C])


def test_reducer_differs():
    def maxed():
        A, B, _ = matmul_bt(4, 32, 24)
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.max(A[i, k] * B[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=maxed)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape("They differ at `max(a[k] * b[i, k], axis=[k])` versus "
                                   "`sum(a[k] * b[i, k], axis=[k])`"))


def test_output_dtype_differs():
    def wide():
        A = te.placeholder((4, 24), "float64", name="A")
        B = te.placeholder((32, 24), "float64", name="B")
        k = te.reduce_axis((0, 24), name="k")
        return A, B, te.compute((4, 32), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s, args, yi = split_schedule(C_of=wide)
    s[args[2]].tensorize(yi, gemv(16, 24))
    lower_fails(s, args, re.escape(WHERE + "output 0 of the stage, 'C', is float64 but the intrinsic's 'c' is "
                                           "float32"))


def test_split_reduction_needs_update():
    s, (A, B, C), yi = split_schedule(kfactor=8)
    s[C].tensorize(yi, gemv(16, 8, "body"))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the region needs the intrinsic's 'update', which its "
                                                "fcompute did not return"))


def test_whole_reduction_needs_body():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 24, "update_only"))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the region needs the intrinsic's 'body', which its "
                                                "fcompute did not return"))


# -- declared buffers against their boxes -----------------------------------------------------------

def test_buffer_scope_differs():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 24, c_scope="local"))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the intrinsic's buffer 'C' viewing 'C': it is declared in "
                                                "scope 'local' but 'C' is in 'global'"))


def test_compact_buffer_on_a_strided_box():
    s, (A, B, C), yi = split_schedule(kfactor=8)
    s[C].tensorize(yi, gemv(16, 8, "all", b_strides="compact"))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the intrinsic's buffer 'B' viewing 'B': it is declared "
                                                "compact (no strides), but the box B[j.outer * 16:+16, k.outer * "
                                                "8:+8] is not contiguous: its strides are (24, 1)"))


def test_constant_stride_differs():
    s, (A, B, C), yi = split_schedule(kfactor=8)
    s[C].tensorize(yi, gemv(16, 8, "all", b_strides=[32, 1]))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the intrinsic's buffer 'B' viewing 'B': its stride 0 is "
                                                "declared 32 but the box B[j.outer * 16:+16, k.outer * 8:+8] has "
                                                "stride 24 there"))


def test_buffer_without_offset_on_a_box_that_has_one():
    s, (A, B, C), yi = split_schedule()
    s[C].tensorize(yi, gemv(16, 24, offset_factor=0))
    lower_fails(s, (A, B, C), re.escape(WHERE + "the intrinsic's buffer 'A' viewing 'A': it starts at element "
                                                "0 (declared without offset_factor or elem_offset), but the box "
                                                "A[i:+1, 0:+24] starts at element i * 24 of 'A'; declare it with "
                                                "offset_factor=1"))


def test_offset_not_a_multiple_of_the_offset_factor():
    A, B, C = (te.placeholder((3, 40), name=x) for x in "ABC")
    D = te.compute((3, 40), lambda i, j: A[i, j] * B[i, j] + C[i, j], name="D")
    s = te.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=8)
    s[D].tensorize(ji, vfma(8, offset_factor=16))
    lower_fails(s, (A, B, C, D), re.escape("tensorize of stage 'D' at axis 'j.inner' with intrinsic 'vfma': the "
                                           "intrinsic's buffer 'a' viewing 'A': its offset_factor is 16, but the "
                                           "box A[i:+1, j.outer * 8:+8] starts at element i * 40 + j.outer * 8, "
                                           "which is not provably a multiple of 16"))


def test_one_stride_variable_for_two_values_is_refused():
    """Two declared buffers sharing a stride variable must view boxes with that same stride."""
    s, (A, B, C), yi = split_schedule()
    g = gemv(16, 24)
    s1 = g.buffers[1].strides[0]
    a = tir.decl_buffer((24,), "float32", "A2", offset_factor=1, strides=[s1])
    intrin = te.decl_tensor_intrin(g.op, lambda ins, outs: tir.Evaluate(0), name="gemv",
                                   binds={g.inputs[0]: a, g.inputs[1]: g.buffers[1], g.op.output(0): g.buffers[2]})
    s[C].tensorize(yi, intrin)
    lower_fails(s, (A, B, C), re.escape(WHERE + "the variable 's1' stands for 1 in buffer 'A2' and for 24 in "
                                                "buffer 'B'"))


# -- the record -------------------------------------------------------------------------------------

def test_json_replay_without_the_intrinsic():
    s, args, intrin = tensorized_gemv()
    with raises("replay of step 2 \\(tensorize of 'C'\\): tensorize of stage 'C': the tensor intrinsic 'gemv' is "
                "not given; pass it by name"):
        from_json(s.to_json(), list(s.outputs))
    with raises("replay of step 2: the tensor intrinsic 'gemv' is not among those given \\(other\\)"):
        from_json(s.to_json(), list(s.outputs), intrins=[gemv(16, 24, name="other")])


def test_two_intrinsics_of_one_name_have_no_record():
    s, args, intrin = tensorized_gemv()
    s.steps.append(dataclasses.replace(s.steps[-1], tensor_intrin=gemv(16, 24)))   # the same name
    with raises("two different tensor intrinsics are named 'gemv' in this schedule; the record refers to "
                "them by name"):
        s.to_json()
    with raises("two different tensor intrinsics are named 'gemv' in this schedule"):
        s.to_python()
