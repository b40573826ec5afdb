"""One test per documented error message: tensor-expression definitions (``te``), dtype rules
(``ir.expr``), schedule primitives, bound inference and lowering. Each asserts the exception
type and that the message names what is wrong: the tensor, the stage, the axis.
"""
import re

import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.ir import DTypeError
from tilecraft.schedule import ScheduleError, from_json, replay
from tilecraft.te import TEError


def raises(exc, pattern):
    return pytest.raises(exc, match=pattern)


# ----------------------------------------------------------------------------------------------
# tensor expressions

A2 = te.placeholder((8, 8), name="A")
I1 = te.placeholder((8,), dtype="int32", name="I")
k8 = te.reduce_axis((0, 8), name="k")


def test_wrong_number_of_indices():
    with raises(TEError, r"tensor 'A' has 2 dimension\(s\) but was indexed with 1 index\(es\): A\[i\]"):
        te.compute((8,), lambda i: A2[i], name="B")


def test_slice_index():
    with raises(TEError, r"tensor 'A': slices are not supported as indices \(position 1\)"):
        A2[0, 1:3]


def test_index_of_wrong_python_type():
    with raises(TEError, r"tensor 'A': index 1 must be an integer expression, got float 1.5"):
        A2[0, 1.5]


def test_index_of_float_dtype():
    with raises(TEError, r"tensor 'A': index 0 `A\[i, 0\]` has dtype float32; indices must be integers"):
        te.compute((8,), lambda i: A2[A2[i, 0], 0], name="B")


def test_shape_not_integral():
    with raises(TEError, r"placeholder 'P': dimension 1 of the shape is 2.5 \(float\); shapes must be integral"):
        te.placeholder((4, 2.5), name="P")


def test_shape_expression_not_integral():
    x = te.var("x", dtype="float32")
    with raises(TEError, r"compute 'C': dimension 0 of the shape `x` has dtype float32"):
        te.compute((x,), lambda i: 1.0, name="C")


def test_negative_shape():
    with raises(TEError, r"placeholder 'P': dimension 0 of the shape is negative \(-3\)"):
        te.placeholder((-3,), name="P")


def test_shape_not_a_tuple():
    with raises(TEError, r"placeholder 'P': shape must be a tuple"):
        te.placeholder("4x4", name="P")


def test_reduce_axis_bounds_not_integers():
    with raises(TEError, r"reduce_axis 'r': bounds must be integers, got `1.5` \(float32\)"):
        te.reduce_axis((0, 1.5), name="r")


def test_reduce_axis_bad_domain():
    with raises(TEError, r"reduce_axis 'r': expected \(lo, hi\), got 5"):
        te.reduce_axis(5, name="r")


def test_thread_axis_unknown_tag():
    with raises(TEError, r"thread_axis: unknown tag 'threadIdx.w'"):
        te.thread_axis("threadIdx.w")


def test_compute_lambda_arity():
    with raises(TEError, r"the compute function takes 1 argument\(s\) but the shape has 2 dimension\(s\)"):
        te.compute((8, 8), lambda i: A2[i, i], name="C")


def test_compute_body_is_a_whole_tensor():
    with raises(TEError, r"compute 'C': the body is a whole tensor 'A'; index it"):
        te.compute((8,), lambda i: A2, name="C")


def test_compute_body_not_an_expression():
    with raises(TEError, r"compute 'C': the body must be an expression, got str"):
        te.compute((8,), lambda i: "x", name="C")


def test_tuple_body_mixing_reduction_and_not():
    with raises(TEError, r"compute 'C': either every output of a tuple body is a reduction or none is"):
        te.compute((8,), lambda i: (te.sum(A2[i, k8], axis=k8), A2[i, 0]), name="C")


def test_tuple_reduction_from_two_calls():
    with raises(TEError, r"compute 'C': the outputs of a tuple reduction must come from one reducer call"):
        te.compute((8,), lambda i: (te.sum(A2[i, k8], axis=k8), te.max(A2[i, k8], axis=k8)), name="C")


def test_reduction_inside_an_expression():
    with raises(TEError, r"compute 'C': a reduction \(te.sum/max/min\) must be the whole body"):
        te.compute((8,), lambda i: te.sum(A2[i, k8], axis=k8) * 2.0, name="C")


def test_reduce_axis_outside_a_reduction():
    with raises(TEError, r"compute 'C': the reduce axis 'k' is used outside a reduction"):
        te.compute((8,), lambda i: A2[i, k8], name="C")


def test_reduce_axis_used_but_not_reduced():
    r = te.reduce_axis((0, 8), name="r")
    with raises(TEError, r"compute 'C': the reduce axis 'r' is used .*wrap the expression in te.sum"):
        te.compute((8,), lambda i: te.sum(A2[i, k8] * A2[r, 0], axis=k8), name="C")


def test_reducer_wrong_number_of_values():
    bad = te.comm_reducer(lambda x, y: (x[0] + y[0],), lambda t0, t1: (te.const(0, t0), te.const(0, t1)), name="bad")
    with raises(TEError, r"reducer 'bad': combine and identity must give 2 value\(s\)"):
        te.compute((8,), lambda i: bad((A2[i, k8], A2[i, k8]), axis=k8), name="C")


def test_reducer_combined_dtype():
    bad = te.comm_reducer(lambda x, y: (x + y).astype("float64"), lambda t: te.const(0, t), name="bad")
    with raises(DTypeError, r"reducer 'bad': the combined value .* is float64, expected float32"):
        te.compute((8,), lambda i: bad(A2[i, k8], axis=k8), name="C")


def test_reduction_over_a_data_axis():
    with raises(TEError, r"te.sum: axis must be reduce axes made by te.reduce_axis"):
        te.compute((8,), lambda i: te.sum(A2[i, 0], axis=i), name="C")


def test_where_not_bool():
    with raises(DTypeError, r"te.sum: `where` must be a bool condition, got int32"):
        te.compute((8,), lambda i: te.sum(A2[i, k8], axis=k8, where=k8 + 1), name="C")


# ----------------------------------------------------------------------------------------------
# dtype rules

H = te.placeholder((8,), dtype="float16", name="H")


def test_mismatched_dtypes():
    with raises(DTypeError, r"mismatched dtypes in '\+': `A\[i, i\]` is float32 but `H\[i\]` is float16; "
                            r"convert one side explicitly"):
        te.compute((8,), lambda i: A2[i, i] + H[i], name="C")


def test_float_literal_with_integer_expression():
    with raises(DTypeError, r"cannot combine the float literal 0.5 with the int32 expression `I\[i\]`"):
        te.compute((8,), lambda i: I1[i] * 0.5, name="C")


def test_integer_only_operator_on_floats():
    with raises(DTypeError, r"'%' needs integer operands, got float32"):
        te.compute((8,), lambda i: A2[i, i] % A2[i, 0], name="C")


def test_logical_operator_on_integers():
    with raises(DTypeError, r"'and' needs bool operands, got int32"):
        te.all(I1[0], I1[1])


def test_select_condition_not_bool():
    with raises(DTypeError, r"a select condition must be bool, got int32 in `I\[0\]`"):
        te.select(I1[0], 1, 2)


def test_not_of_a_non_bool():
    from tilecraft.ir.expr import logical_not
    with raises(DTypeError, r"'not' needs a bool operand, got int32"):
        logical_not(I1[0])


def test_truth_value_of_a_symbolic_expression():
    with raises(TypeError, r"the symbolic expression `A\[0, 0\] > 0.0f?` has no truth value; use te.all"):
        if A2[0, 0] > 0.0:
            pass


def test_float_intrinsic_on_integers():
    with raises(DTypeError, r"te.exp needs a float argument, got `I\[0\]` of dtype int32"):
        te.exp(I1[0])


def test_power_of_mixed_dtypes():
    with raises(DTypeError, r"te.power needs two float arguments of one dtype, got float32 and float16"):
        te.power(A2[0, 0], H[0])


def test_constant_of_a_non_number():
    with raises(DTypeError, r"cannot make a constant of 'abc'"):
        te.const("abc")


def test_fractional_integer_constant():
    with raises(DTypeError, r"the constant 1.5 is not an integer but the dtype is int32"):
        te.const(1.5, "int32")


def test_operand_that_is_not_an_expression():
    with raises(TypeError, r"expected an expression or a number, got str: 'x'"):
        A2[0, 0] + "x"


def test_unsupported_dtype():
    with raises(DTypeError, r"unsupported dtype 'float8': expected one of bool, int8"):
        te.placeholder((3,), dtype="float8", name="P")


# ----------------------------------------------------------------------------------------------
# schedule primitives

def matmul():
    A = te.placeholder((16, 16), name="A")
    B = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    return A, B, C, D


def test_split_by_zero():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"split of axis 'i' in stage 'D': the factor must be positive, got 0"):
        s[D].split(D.op.axis[0], factor=0)


def test_split_nparts_negative():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"split of axis 'j' in stage 'D': the nparts must be positive, got -2"):
        s[D].split(D.op.axis[1], nparts=-2)


def test_split_factor_and_nparts():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"split of axis 'i' in stage 'D': give exactly one of factor= or nparts="):
        s[D].split(D.op.axis[0], factor=2, nparts=2)
    with raises(ScheduleError, r"give exactly one of factor= or nparts="):
        s[D].split(D.op.axis[0])


def test_split_factor_not_an_integer():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"split of axis 'i' in stage 'D': the factor must be a positive integer, got 2.5"):
        s[D].split(D.op.axis[0], factor=2.5)


def test_reorder_axis_of_another_stage():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"reorder on stage 'D': axis 'k' belongs to stage 'C', not 'D'"):
        s[D].reorder(D.op.axis[1], C.op.reduce_axis[0])


def test_axis_already_split():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    i = D.op.axis[0]
    s[D].split(i, factor=4)
    with raises(ScheduleError, r"vectorize on stage 'D': axis 'i' was already split or fused; use the axes "
                               r"that replaced it \(i.outer, i.inner, j\)"):
        s[D].vectorize(i)


def test_axis_not_of_this_schedule():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    other = te.compute((4,), lambda q: 1.0, name="E")
    with raises(ScheduleError, r"unroll on stage 'D': 'q' is not an axis of this stage \(its axes are i, j\)"):
        s[D].unroll(other.op.axis[0])


def test_primitive_given_a_non_axis():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"parallel on stage 'D': expected an axis \(IterVar\), got 3"):
        s[D].parallel(3)


def test_fuse_not_adjacent():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    i, j = D.op.axis
    with raises(ScheduleError, r"fuse on stage 'D': axes j, i must be adjacent and in order, outer first "
                               r"\(current order: i, j\)"):
        s[D].fuse(j, i)


def test_fuse_reduction_with_data_axis():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    j, k = C.op.axis[1], C.op.reduce_axis[0]
    with raises(ScheduleError, r"fuse on stage 'C': cannot fuse reduction and data-parallel axes \(j, k\)"):
        s[C].fuse(j, k)


def test_reorder_axis_twice():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    i, j = D.op.axis
    with raises(ScheduleError, r"reorder on stage 'D': an axis appears twice"):
        s[D].reorder(i, i)


def test_vectorized_reduction_axis_in_a_cross_thread_reduction():
    """A vectorized reduction axis keeps one accumulator per lane; a reduction that also runs
    across GPU threads (its own all-reduce) cannot have that as well."""
    A = te.placeholder((64, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    C = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=32)
    kvo, kv = s[C].split(ko, factor=4)
    s[C].reorder(C.op.axis[0], ki, kvo, kv)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(ki, te.thread_axis("threadIdx.x"))
    s[C].vectorize(kv)
    with raises(ScheduleError, r"vectorize on stage 'C': the reduction axis 'k.outer.inner' is vectorized, "
                               r"but the reduction also runs across GPU threads \(threadIdx.x\); vectorize a "
                               r"data-parallel axis instead, or leave the reduction axis serial"):
        tc.lower(s, [A, C], target="cuda")


def test_parallel_reduction_axis():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    with raises(ScheduleError, r"parallel on stage 'C': axis 'k.outer' is a reduction axis; only "
                               r"data-parallel axes can run in parallel \(use rfactor to make the partial "
                               r"results of a reduction axis data-parallel\)"):
        s[C].parallel(ko)


def test_bind_to_a_non_thread_axis():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"bind on stage 'D': the second argument must be te.thread_axis"):
        s[D].bind(D.op.axis[0], D.op.axis[1])


def test_compute_at_not_a_stage():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"compute_at of stage 'C': the first argument must be a stage \(s\[T\]\)"):
        s[C].compute_at(D, D.op.axis[0])


def test_compute_at_itself():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"compute_at of stage 'C' into itself"):
        s[C].compute_at(s[C], C.op.axis[0])


def test_compute_at_axis_of_another_stage():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"compute_at of stage 'C' on stage 'D': axis 'i' belongs to stage 'C', not 'D'"):
        s[C].compute_at(s[D], C.op.axis[0])


def test_compute_at_of_an_output():
    A, B, C, D = matmul()
    s = te.create_schedule([C.op, D.op])
    with raises(ScheduleError, r"compute_at of stage 'C': it is an output of the schedule"):
        s[C].compute_at(s[D], D.op.axis[0])


def test_compute_inline_of_a_placeholder():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"compute_inline: stage 'A' is not a compute stage"):
        s[A].compute_inline()


def test_compute_inline_of_a_reduction():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"compute_inline: stage 'C' is a reduction and cannot be inlined"):
        s[C].compute_inline()


def test_compute_inline_of_an_output():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"compute_inline: stage 'D' is an output of the schedule"):
        s[D].compute_inline()


def test_storage_align_bad_factor():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"storage_align on stage 'C': factor must be positive"):
        s[C].storage_align(C.op.axis[0], 0, 0)


def test_storage_align_not_an_op_axis():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"storage_align on stage 'C': axis must be one of op.axis \(i, j\)"):
        s[C].storage_align(C.op.reduce_axis[0], 16, 1)


def test_tensorize_needs_a_tensor_intrinsic():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"tensorize on stage 'D': expected a tensor intrinsic from "
                               r"te.decl_tensor_intrin, got None"):
        s[D].tensorize(D.op.axis[1], None)


def test_stage_lookup_by_unknown_name():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"no stage named 'X' \(stages: A, B, C, D\)"):
        s["X"]


def test_stage_lookup_of_foreign_tensor():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    other = te.placeholder((2,), name="Z")
    with raises(ScheduleError, r"'Z' is not part of this schedule \(stages: A, B, C, D\)"):
        s[other]


def test_create_schedule_of_a_non_operation():
    with raises(ScheduleError, r"create_schedule expects operations \(C.op\) or tensors, got 3"):
        te.create_schedule([3])


def test_cache_read_of_a_non_tensor():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"cache_read: expected a tensor, got 'A'"):
        s.cache_read("A", "shared", [C])


def test_cache_read_for_a_non_reader():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"cache_read of 'A': stage 'D' does not read it"):
        s.cache_read(A, "shared", [D])


def test_cache_write_of_several_tensors():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"cache_write of several tensors: 'D' is not an output of stage 'C'; the tensors "
                               r"must be the outputs of one stage"):
        s.cache_write([C, D], "local")


def test_cache_write_of_a_placeholder():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"cache_write: stage 'A' is not a compute stage"):
        s.cache_write(A, "local")


def test_cache_write_of_a_multi_output_stage():
    X = te.placeholder((4, 4), name="X")
    k = te.reduce_axis((0, 4), name="k")
    am = te.comm_reducer(lambda x, y: (te.select(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
                         lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    I, V = te.compute((4,), lambda i: am((k, X[i, k]), axis=k), name="AM")
    s = te.create_schedule(I.op)
    with raises(ScheduleError, r"cache_write: stage 'AM' has 2 outputs \(AM.v0, AM.v1\); cache them together: "
                               r"s.cache_write\(\[AM.v0, AM.v1\], 'local'\)"):
        s.cache_write(I, "local")


def test_cache_write_after_splitting_the_reduction():
    # after data-parallel splits it is TVM's re-layout (tests/schedule/test_cache_write_relayout.py)
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    s[C].split(C.op.reduce_axis[0], factor=4)
    with raises(ScheduleError, r"cache_write of 'C': its loop 'k.outer' comes from a split or fuse of a "
                               r"reduction axis"):
        s.cache_write(C, "local")


def test_rfactor_of_a_non_reduction():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"rfactor of 'D': the stage is not a reduction"):
        s.rfactor(D, D.op.axis[0])


def test_rfactor_of_a_data_axis():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"rfactor of 'C': axis 'i' is not a reduction axis"):
        s.rfactor(C, C.op.axis[0])


def test_rfactor_after_fuse():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    s[C].fuse(*C.op.axis)
    with raises(ScheduleError, r"rfactor of 'C': rfactor after fuse is not supported"):
        s.rfactor(C, C.op.reduce_axis[0])


def test_rfactor_factor_axis_out_of_range():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"rfactor of 'C': factor_axis must be between 0 and 2"):
        s.rfactor(C, C.op.reduce_axis[0], factor_axis=3)


# ----------------------------------------------------------------------------------------------
# bound inference (reported by lower)

def test_compute_at_cycle():
    """C inside D's loop, then D inside C's: refused when the second compute_at closes the cycle."""
    A, B, C, D = matmul()
    E = te.compute((16, 16), lambda i, j: D[i, j] * 2.0, name="E")
    s = te.create_schedule(E.op)
    s[C].compute_at(s[D], D.op.axis[0])
    with raises(ScheduleError, r"compute_at of stage 'D' at loop 'i' of stage 'C' makes a cycle of "
                               r"attachments \('C' is itself computed inside 'D'\)"):
        s[D].compute_at(s[C], C.op.axis[0])


def test_compute_at_longer_cycle():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: C[i] - 1.0, name="D")
    E = te.compute((8,), lambda i: D[i] * 3.0, name="E")
    s = te.create_schedule(E.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].compute_at(s[D], D.op.axis[0])
    with raises(ScheduleError, r"compute_at of stage 'D' at loop 'i' of stage 'B' makes a cycle"):
        s[D].compute_at(s[B], B.op.axis[0])


def test_compute_at_axis_fused_as_outer_afterwards():
    # split, or fused as the inner loop, the attach point follows (tests/schedule/test_te_features.py)
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    i, j = D.op.axis
    s[C].compute_at(s[D], i)
    s[D].fuse(i, j)
    with raises(ScheduleError, r"compute_at of stage 'C': axis 'i' is no longer a loop of stage 'D' "
                               r"\(it was fused with the loop inside it after compute_at\); compute_at "
                               r"the fused loop instead"):
        tc.lower(s, [A, B, D])


def test_compute_at_an_inlined_stage():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: C[i] - 1.0, name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].compute_inline()
    with raises(ScheduleError, r"compute_at of stage 'B': the target stage 'C' is inlined"):
        tc.lower(s, [A, D])


def test_compute_at_a_stage_that_does_not_read_it():
    A, B, C, D = matmul()
    E = te.compute((16,), lambda i: A[i, 0], name="E")
    s = te.create_schedule([D.op, E.op])
    s[C].compute_at(s[E], E.op.axis[0])
    with raises(ScheduleError, r"compute_at of stage 'C' at loop 'i' of stage 'E': that loop does not "
                               r"enclose its consumer 'D'|nothing in 'E' reads it"):
        tc.lower(s, [A, B, D, E])


def test_compute_at_a_loop_that_does_not_enclose_the_consumer():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] * 2.0, name="C")
    D = te.compute((8, 8), lambda i, j: B[i, j] + C[i, j], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[1])     # but D reads B too, outside C's loops
    with raises(ScheduleError, r"compute_at of stage 'B' at loop 'j' of stage 'C': that loop does not "
                               r"enclose its consumer 'D'"):
        tc.lower(s, [A, D])


# ----------------------------------------------------------------------------------------------
# lower and build arguments

def test_lower_of_a_non_schedule():
    with raises(TypeError, r"lower expects a schedule from te.create_schedule, got list"):
        tc.lower([], [])


def test_lower_without_arguments():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"lower needs the list of argument tensors, e.g. \[A, B, C\]"):
        tc.lower(s, [])


def test_lower_argument_not_in_schedule():
    """A computed tensor outside the schedule's graph is refused; an unused placeholder is an
    unused parameter, as in TVM (tests/tvm_api/test_tvm_testing_helpers.py)."""
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    Z = te.compute((3,), lambda i: A[i, 0] * 2, name="Z")
    with raises(ScheduleError, r"argument 3 'Z' is not part of the schedule \(a tensor computed outside the graph"):
        tc.lower(s, [A, B, D, Z])


def test_lower_argument_of_a_wrong_kind():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"argument 2 must be a tensor or a te.var, got 3"):
        tc.lower(s, [A, B, 3, D])


def test_lower_missing_input():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"the input 'B' is read by stage 'C' but is not in the argument list"):
        tc.lower(s, [A, D])


def test_lower_missing_output():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"the output 'D' is not in the argument list"):
        tc.lower(s, [A, B])


def test_lower_free_scalar_variable():
    m = te.var("m")
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * m.astype("float32"), name="B")
    s = te.create_schedule(B.op)
    with raises(ScheduleError, r"the scalar variable\(s\) m are used but are neither in the argument list "
                               r"nor in any argument's shape"):
        tc.lower(s, [A, B])


def test_build_without_arguments():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(tc.BuildError, r"build\(s, args\): give the argument tensors"):
        tc.build(s, target="llvm")


def test_build_of_something_else():
    with raises(tc.BuildError, r"build expects a schedule or a lowered function, got int"):
        tc.build(3, target="llvm")


# ----------------------------------------------------------------------------------------------
# replaying records

def test_replay_unknown_primitive():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0: unknown primitive 'twist' \(known: split, tile, fuse, "):
        replay([{"step": "twist", "stage": "D"}], [D.op])
    with raises(ScheduleError, r"replay of step 1: unknown primitive 'twist'"):
        replay([["parallel", "D", ["i"]], ["twist", "D", ["i"]]], [D.op])     # the untyped format


def test_replay_unknown_field():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0: split has no field\(s\) by \(its fields: stage, axis, "
                               r"factor, nparts\)"):
        replay([{"step": "split", "stage": "D", "axis": "i", "by": 4}], [D.op])


def test_replay_missing_field():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0: split needs the field\(s\) axis"):
        replay([{"step": "split", "stage": "D", "factor": 4}], [D.op])


def test_replay_unreadable_step():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0: cannot read \['split', 'D'\] as a recorded step"):
        replay([["split", "D"]], [D.op])
    with raises(ScheduleError, r"replay of step 0: expected an object with a \"step\" key, got 3"):
        replay([3], [D.op])


def test_replay_unknown_axis():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0 \(vectorize of 'D'\): stage 'D' has no axis named 'q' "
                               r"\(axes: i, j\)"):
        replay([{"step": "vectorize", "stage": "D", "axis": "q"}], [D.op])


def test_replay_unknown_tensor():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0 \(cache_write of 'Q'\): the schedule has no tensor named 'Q' "
                               r"\(tensors: A, B, C, D\)"):
        replay([{"step": "cache_write", "tensor": "Q", "scope": "local"}], [D.op])


def test_replay_on_a_different_schedule():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0 \(cache_read of 'A'\): cache_read made the stage 'A.shared' "
                               r"where the record says 'A.local' \(the schedule differs from the one recorded\)"):
        replay([{"step": "cache_read", "tensor": "A", "scope": "shared", "readers": ["C"], "result": "A.local"}],
               [D.op])


def test_replay_symbolic_split_factor():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"replay of step 0 \(split of 'D'\): split of axis 'i' in stage 'D': the factor "
                               r"must be a positive integer, got 'n'"):
        replay([["split", "D", ["i", "factor", "n"]]], [D.op])


def test_record_of_a_symbolic_split_factor():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    s[D].split(D.op.axis[0], factor=te.var("n"))
    msg = (r"the split of axis 'i' in stage 'D' has the symbolic factor `n`: the schedule record "
           r"\(to_json, to_python\) holds integer factors only")
    with raises(ScheduleError, msg):
        s.to_json()
    with raises(ScheduleError, msg):
        s.to_python()


def test_from_json_of_something_else():
    A, B, C, D = matmul()
    with raises(ScheduleError, r"from_json: not JSON \(Expecting"):
        from_json("[{", [D.op])
    with raises(ScheduleError, r"from_json: expected a list of steps, got dict"):
        from_json('{"step": "split"}', [D.op])


def test_stage_name_shared_by_two_stages():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0)
    C = te.compute((8,), lambda i: B[i] + 1.0)
    s = te.create_schedule(C.op)
    with raises(ScheduleError, r"the schedule: 2 stages are named 'compute'; say which with 'compute#0' ... "
                               r"'compute#1' \(in the schedule's current order\)"):
        s["compute"]
    assert s["compute#0"].op is B.op and s["compute#1"].op is C.op
    with raises(ScheduleError, r"the schedule has no stage named 'compute#2' \(stages: A, compute\)"):
        s["compute#2"]


def test_pragma_value_that_is_not_a_number_or_string():
    A, B, C, D = matmul()
    s = te.create_schedule(D.op)
    with raises(ScheduleError, r"pragma on stage 'D', axis 'i': the key must be a string and the value a number, "
                               r"a string or None, got 'auto_unroll_max_step' = \[16\]"):
        s[D].pragma(D.op.axis[0], "auto_unroll_max_step", [16])
