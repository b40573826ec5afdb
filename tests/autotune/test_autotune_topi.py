"""The ready templates in tilecraft.topi: sampled configs compile and match numpy (outputs
poisoned first)."""
import numpy as np
import pytest

import tilecraft.autotune as autotune
from tilecraft.testing import poison


def _np_conv2d(x, w, stride, pad):
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow), np.float64)
    for r in range(kh):
        for c in range(kw):
            patch = xp[:, :, r:r + stride * oh:stride, c:c + stride * ow:stride]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, r, c])
    return out


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(x, gamma, beta):
    x = x.astype("float64")
    mean = x.mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * gamma + beta


CASES = [
    ("tilecraft.topi.matmul", "topi/matmul.llvm", (32, 48, 16, "float32"), lambda a, b: a @ b),
    ("tilecraft.topi.batch_matmul", "topi/batch_matmul.llvm", (2, 16, 32, 8, "float32"), lambda a, b: a @ b),
    ("tilecraft.topi.conv2d", "topi/conv2d_nchw.llvm", (1, 8, 10, 10, 8, 3, 3, 1, 1, "float32"),
     lambda x, w: _np_conv2d(x, w, 1, 1)),
    ("tilecraft.topi.conv2d", "topi/conv2d_nchw_direct.llvm", (1, 8, 10, 10, 8, 3, 3, 1, 1, "float32"),
     lambda x, w: _np_conv2d(x, w, 1, 1)),
    ("tilecraft.topi.softmax", "topi/softmax.llvm", (8, 64, "float32"), _softmax),
    ("tilecraft.topi.softmax", "topi/softmax.llvm", (6, 75, "float32"), _softmax),       # tails
    ("tilecraft.topi.layer_norm", "topi/layer_norm.llvm", (6, 75, "float32"), _layer_norm),
    ("tilecraft.topi.pooling", "topi/global_pool.llvm", (2, 12, 7, 9, "avg", "float32"),
     lambda x: x.astype("float64").mean(axis=(2, 3))),
    ("tilecraft.topi.pooling", "topi/global_pool.llvm", (2, 12, 7, 9, "max", "float32"),
     lambda x: x.max(axis=(2, 3))),
]


@pytest.mark.parametrize("module,name,args,ref", CASES, ids=[f"{c[1]}{list(c[2])}" for c in CASES])
def test_topi_template_configs_match_numpy(module, name, args, ref, rng):
    """Three random configs (a fresh draw each run: the seed is printed) on random inputs."""
    import importlib
    import tilecraft

    importlib.import_module(module)
    task = autotune.task.create(name, args=args, target="llvm")
    assert task.flop > 0 and len(task.config_space) > 1
    for i in rng.choice(len(task.config_space), size=3, replace=False):
        sch, tensors = task.instantiate(task.config_space.get(task.config_space.valid_index(int(i))))
        mod = tilecraft.build(sch, tensors, target="llvm")
        ins = [rng.uniform(-1, 1, [int(getattr(d, "value", d)) for d in t.shape]).astype("float32")
               for t in tensors[:-1]]
        want = ref(*ins)
        for variant in (0, 1):      # two poisons: an element the kernel does not write shows
            out = poison([int(getattr(d, "value", d)) for d in tensors[-1].shape], "float32", variant)
            mod(*ins, out)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, equal_nan=False,
                                       err_msg=f"config {int(i)}, poison {variant}")


@pytest.mark.parametrize("name,args", [("topi/softmax.llvm", (64, 1000)), ("topi/layer_norm.llvm", (64, 1000)),
                                       ("topi/global_pool.llvm", (2, 8, 28, 28, "avg"))])
def test_row_reduction_templates_fall_back_to_vector_reductions(name, args):
    """Without a tuned configuration the templates still schedule themselves: rows in parallel,
    row reductions in vector registers (not the unscheduled nest)."""
    import tilecraft
    import tilecraft.topi  # noqa: F401

    task = autotune.task.create(name, args=args, target="llvm")
    with pytest.warns(UserWarning, match="no tuned configuration"), tilecraft.target.Target("llvm"):
        sch, tensors = task.func(*args)
    text = str(tilecraft.lower(sch, tensors, simple_mode=True))
    assert "parallel(" in text and "vector_reduce_" in text and ".vacc" in text


@pytest.mark.slow
def test_cuda_matmul_template_generates_cuda_for_sampled_configs():
    import tilecraft
    import tilecraft.topi.matmul  # noqa: F401
    from tilecraft.autotune.space import ConfigEntity
    from tilecraft.codegen.cuda import for_gpu, generate_cuda

    task = autotune.task.create("topi/matmul.cuda", args=(256, 256, 256, "float32"), target="cuda")
    space = task.config_space
    assert 0 < len(space) < space.range_length      # the multi_filter removed ill-formed tiles
    for i in np.random.default_rng(0).choice(len(space), 3, replace=False):
        cfg = space.get(space.valid_index(int(i)))
        again = ConfigEntity.from_json_dict(__import__("json").loads(__import__("json").dumps(cfg.to_json_dict())))
        assert again == cfg                           # tuple-valued knobs survive the log
        sch, args = task.instantiate(cfg)
        src = generate_cuda([for_gpu(tilecraft.lower(sch, args, target="cuda"))])
        assert "__global__" in src and "__shared__" in src
