"""Vector add: declare, schedule, look at the loop nest, build for the CPU, run, check, time.

    python examples/vector_add.py
"""
import numpy as np

import tilecraft as tc
from tilecraft import te

# 1. What to compute: C[i] = A[i] + B[i] for a length n known only at run time.
n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.placeholder((n,), name="B")
C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")

# 2. How to compute it: chunks of 64 run on the thread pool, each chunk one vector operation.
s = te.create_schedule(C.op)
outer, inner = s[C].split(C.op.axis[0], factor=64)
s[C].parallel(outer)
s[C].vectorize(inner)
print(tc.lower(s, [A, B, C], simple_mode=True))

# 3. Compile and run. n = 1000 is not a multiple of 64: the tail is handled.
f = tc.build(s, [A, B, C], target="llvm", name="vadd")
dev = tc.cpu(0)
a = tc.nd.array(np.random.rand(1000).astype("float32"), dev)
b = tc.nd.array(np.random.rand(1000).astype("float32"), dev)
c = tc.nd.array(np.zeros(1000, "float32"), dev)
f(a, b, c)
tc.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
print("vadd(1000) matches numpy")

# 4. Time it beside numpy (plain numpy arrays are accepted too).
import timeit
big = [np.random.rand(1 << 22).astype("float32") for _ in range(3)]
t = f.time_evaluator(f.entry_name, dev, number=20, repeat=3)(*big).median
t_np = min(timeit.repeat(lambda: np.add(big[0], big[1], out=big[2]), number=20, repeat=3)) / 20
print(f"vadd(4M floats): tilecraft {t * 1e6:.0f} us, numpy.add {t_np * 1e6:.0f} us per call")
