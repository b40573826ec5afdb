"""The steps of TVM's tedd tutorial (gallery/how_to/work_with_schedules/tedd.py, TVM <= 0.14) with
`tvm` imported from tilecraft: conv2d_hwcn + bias + relu from topi with the generic schedule, and
the three TEDD views (dataflow graph, schedule tree before and after normalize, itervar
relationship graph) written as DOT files. Run by tests/test_tvm_scripts.py as `python tedd.py`
in a temporary folder; prints OK.

Changed beyond the imports: the DOT files go to the working folder instead of /tmp, and the script
then checks what they hold and builds the schedule against numpy at a small size (the tutorial
only draws). Rendering (the tutorial's commented-out show_svg=True) needs the graphviz package."""
import os

import numpy as np

import tilecraft as tvm
import tilecraft.testing
from tilecraft import te
from tilecraft import topi
from tilecraft.contrib import tedd
from tilecraft.topi.testing import conv2d_nchw_python

batch = 1
in_channel = 256
in_size = 32
num_filter = 256
kernel = 3
stride = 1
padding = "SAME"
dilation = 1

A = te.placeholder((in_size, in_size, in_channel, batch), name="A")
W = te.placeholder((kernel, kernel, in_channel, num_filter), name="W")
B = te.placeholder((1, num_filter, 1), name="bias")

with tvm.target.Target("llvm"):
    t_conv = topi.nn.conv2d_hwcn(A, W, stride, padding, dilation)
    t_bias = topi.add(t_conv, B)
    t_relu = topi.nn.relu(t_bias)
    s = topi.generic.schedule_conv2d_hwcn([t_relu])

tedd.viz_dataflow_graph(s, dot_file_path="dfg.dot")
tedd.viz_schedule_tree(s, dot_file_path="scheduletree.dot")
s = s.normalize()
tedd.viz_schedule_tree(s, dot_file_path="scheduletree2.dot")
tedd.viz_itervar_relationship_graph(s, dot_file_path="itervar.dot")

# -- what the files hold -----------------------------------------------------------------------
for name in ("dfg.dot", "scheduletree.dot", "scheduletree2.dot", "itervar.dot"):
    text = open(name).read()
    assert text.startswith("digraph ") and text.rstrip().endswith("}"), name
    print(name, os.path.getsize(name), "bytes")
dfg = open("dfg.dot").read()
for stage in ("PaddedInput", "Conv2dOutput", "add", "relu"):
    assert stage in dfg
tree = open("scheduletree2.dot").read()
assert "ROOT -> " in tree and "kCommReduce" in tree and "range(min=0, ext=32)" in tree

# -- the schedule computes the tutorial's operator (checked at a smaller size) ------------------
a = np.random.uniform(-1, 1, (8, 8, 4, 1)).astype("float32")
w = np.random.uniform(-1, 1, (3, 3, 4, 5)).astype("float32")
bias = np.random.uniform(-1, 1, (1, 5, 1)).astype("float32")
A = te.placeholder(a.shape, name="A")
W = te.placeholder(w.shape, name="W")
B = te.placeholder(bias.shape, name="bias")
with tvm.target.Target("llvm"):
    out = topi.nn.relu(topi.add(topi.nn.conv2d_hwcn(A, W, stride, padding, dilation), B))
    s = topi.generic.schedule_conv2d_hwcn([out])
got = np.full((8, 8, 5, 1), np.nan, "float32")
tvm.build(s, [A, W, B, out], "llvm")(a, w, bias, got)
nchw = conv2d_nchw_python(a.transpose(3, 2, 0, 1), w.transpose(3, 2, 0, 1), stride, padding)
want = np.maximum(nchw.transpose(2, 3, 1, 0) + bias, 0)
tvm.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
print("OK")
