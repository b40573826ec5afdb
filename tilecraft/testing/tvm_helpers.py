"""TVM's test helpers that TVM's own unit tests call as ``tvm.testing.X`` (re-exported by
``tilecraft.testing``): which targets can run here (``device_enabled``), the pytest decorators
that skip or mark a test by that (``requires_gpu``, ``requires_cuda``, ``requires_tensorcore``,
``uses_gpu``, ``skip_if_wheel_test``), and a finite-difference gradient check
(``check_numerical_grads``, for ``te.gradient``).

Bottom layer: nothing of tilecraft is imported (a GPU is found through pycuda directly, pytest
is imported only when a decorator is used).

    >>> device_enabled("llvm")
    True
    >>> check_numerical_grads(lambda x: float((x ** 2).sum()), [np.array([1.0, -2.0])],
    ...                       [np.array([2.0, -4.0])])
"""
from __future__ import annotations

import functools

import numpy as np

_CPU_KINDS = ("llvm", "c")


@functools.lru_cache(maxsize=None)
def _cuda_device_count() -> int:
    try:
        import pycuda.driver as drv

        drv.init()
        return drv.Device.count()
    except Exception:            # no pycuda, no driver, no device: not enabled
        return 0


def device_enabled(target) -> bool:
    """Whether code for ``target`` (a string such as ``"llvm"``, ``"cuda -arch=sm_90"``, or a
    Target) can be built and run here: the CPU always, ``cuda`` when pycuda finds a GPU; other
    kinds (``opencl``, ``rocm``, ``vulkan``, ...) never, since tilecraft has no runtime for them
    (``opencl`` builds OpenCL C source only).

    >>> device_enabled("opencl")
    False
    """
    text = str(target).strip()
    kind = text.split()[0] if text else ""
    if kind in _CPU_KINDS:
        return True
    if kind == "cuda":
        return _cuda_device_count() > 0
    return False


def _skip_unless(condition: bool, reason: str):
    import pytest

    return pytest.mark.skipif(not condition, reason=reason)


def requires_gpu(func):
    """Skip the test unless a GPU is present (decorator, as TVM's ``tvm.testing.requires_gpu``)."""
    return _skip_unless(device_enabled("cuda"), "needs a GPU (pycuda and a CUDA device)")(func)


def requires_cuda(func):
    """Skip the test unless CUDA kernels can run here (pycuda and a device)."""
    return _skip_unless(device_enabled("cuda"), "needs CUDA (pycuda and a CUDA device)")(func)


def requires_tensorcore(func):
    """Skip the test unless the GPU has tensor cores (compute capability 7.0 or newer)."""
    ok = False
    if device_enabled("cuda"):
        import pycuda.driver as drv

        ok = drv.Device(0).compute_capability() >= (7, 0)
    return _skip_unless(ok, "needs a GPU with tensor cores (sm_70 or newer)")(func)


def uses_gpu(func):
    """TVM's mark of a test that also runs on a GPU when one is present; the test itself asks
    ``device_enabled`` for each target, so it runs everywhere (identity decorator)."""
    return func


def skip_if_wheel_test(func):
    """TVM skips such tests when testing an installed wheel without its sources; tilecraft is
    always tested from its sources, so the test runs (identity decorator)."""
    return func


def check_numerical_grads(function, input_values, grad_values, function_value=None, delta=1e-3,
                          atol=1e-2, rtol=0.1) -> None:
    """Check ``grad_values`` against central differences of ``function`` (scalar-valued) at
    ``input_values`` (a list of arrays, passed positionally, or a dict, passed by name), with
    TVM's criterion for each input: the distance between the two gradients (L2 norm) at most
    ``atol * sqrt(size) + rtol * |numerical gradient|``, so a few elements where rounding hides a
    derivative do not fail the check. The AssertionError names the input, the distance, the
    bound and the first elements that differ. (``function_value`` is accepted for TVM's
    signature; central differences do not use it.)

    >>> check_numerical_grads(lambda a, b: float((a * b).sum()), [np.ones(2), np.full(2, 3.0)],
    ...                       [np.full(2, 3.0), np.ones(2)])
    """
    if isinstance(input_values, dict):
        names = list(input_values)
        values = [np.asarray(input_values[n]) for n in names]
        grads = [np.asarray(grad_values[n], dtype=np.float64) for n in names]
        call = lambda vals: function(**dict(zip(names, vals)))   # noqa: E731
    else:
        names = [str(i) for i in range(len(input_values))]
        values = [np.asarray(v) for v in input_values]
        grads = [np.asarray(g, dtype=np.float64) for g in grad_values]
        call = lambda vals: function(*vals)                      # noqa: E731
    for k, (name, value, grad) in enumerate(zip(names, values, grads)):
        if grad.shape != value.shape:
            raise AssertionError(f"the gradient with respect to input {name} has shape {grad.shape}, "
                                 f"expected {value.shape}")
        numerical = np.zeros(grad.shape, dtype=np.float64)
        for j in range(value.size):
            ends = []
            for step in (delta, -delta):
                vals = [v.copy() for v in values]
                vals[k].reshape(-1)[j] += step
                ends.append(float(call(vals)))
            numerical.reshape(-1)[j] = (ends[0] - ends[1]) / (2 * delta)
        dist = float(np.sqrt(np.sum((numerical - grad) ** 2)))
        norm = float(np.sqrt(np.sum(numerical ** 2)))
        if not (np.isfinite(dist) and np.isfinite(norm)):
            raise ValueError(f"NaN or infinity in the gradients with respect to input {name}")
        bound = atol * np.sqrt(max(value.size, 1)) + rtol * norm
        if dist > bound:
            wrong = np.argwhere(np.abs(numerical - grad) > atol + rtol * np.abs(numerical))[:5]
            raise AssertionError(
                f"gradient with respect to input {name}: distance {dist:.4g} to the numerical one "
                f"(central differences, delta {delta}) exceeds atol*sqrt(n) + rtol*|numerical| = {bound:.4g}; "
                f"first differing elements {[tuple(int(x) for x in w) for w in wrong]}: analytical "
                f"{[float(grad[tuple(w)]) for w in wrong]}, numerical {[float(numerical[tuple(w)]) for w in wrong]}")
