"""relay.frontend.from_torch (torch.export) against PyTorch's own outputs: a ResNet-style block,
a MobileNetV2 inverted residual and a GPT-2 block, built here (no torchvision, no downloads),
each exported as is and decomposed to the core ATen set; random weights and inputs, kernel
outputs poisoned before the run."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: from_torch is not tested")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft import relay  # noqa: E402
from relay_helpers import run_lib  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:no tuned configuration", "ignore::FutureWarning",
                                        "ignore::UserWarning")


def _randomize_bn(m):
    for mm in m.modules():
        if isinstance(mm, (nn.BatchNorm2d, nn.LayerNorm)):
            with torch.no_grad():
                mm.weight.uniform_(0.5, 1.5)
                mm.bias.uniform_(-0.5, 0.5)
                if isinstance(mm, nn.BatchNorm2d):
                    mm.running_mean.uniform_(-0.5, 0.5)
                    mm.running_var.uniform_(0.5, 2.0)
    return m.eval()


class ResBlock(nn.Module):
    """ResNet's basic block, a stride-2 stem before it and the classifier after it."""

    def __init__(s, c=8):
        super().__init__()
        s.stem = nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False)
        s.bn0 = nn.BatchNorm2d(c)
        s.pool = nn.MaxPool2d(3, stride=2, padding=1)
        s.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        s.bn1 = nn.BatchNorm2d(c)
        s.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        s.bn2 = nn.BatchNorm2d(c)
        s.fc = nn.Linear(c, 5)

    def forward(s, x):
        x = s.pool(F.relu(s.bn0(s.stem(x))))
        y = F.relu(s.bn1(s.conv1(x)))
        y = F.relu(s.bn2(s.conv2(y)) + x)
        return s.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depth-wise convolution, 1x1 projection (ReLU6)."""

    def __init__(s, c=8, t=4):
        super().__init__()
        h = c * t
        s.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6())
        s.dw = nn.Sequential(nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6())
        s.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(s, x):
        return x + s.project(s.dw(s.expand(x)))


class GPT2Block(nn.Module):
    """Token and position embeddings, then a GPT-2 block: pre-LN causal self-attention
    (scaled_dot_product_attention) and an MLP with tanh-GELU, both residual."""

    def __init__(s, vocab=50, d=32, heads=4, T=7):
        super().__init__()
        s.heads = heads
        s.wte, s.wpe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.c_attn, s.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc, s.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        s.register_buffer("pos", torch.arange(T), persistent=False)

    def forward(s, ids):
        B, T = ids.shape
        x = s.wte(ids) + s.wpe(s.pos[:T])
        q, k, v = s.c_attn(s.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (t.view(B, T, s.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.c_proj(a.transpose(1, 2).reshape(B, T, -1))
        return x + s.proj(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


def _check(module, inputs, decompose: bool, rtol=1e-4, atol=1e-5):
    torch.manual_seed(0)
    ep = torch.export.export(module, inputs)
    if decompose:
        ep = ep.run_decompositions()
    mod, params = relay.frontend.from_torch(ep)
    names = [v.name_hint for v in mod["main"].params[:len(inputs)]]
    with tc.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    (got,) = run_lib(lib, {n: t.numpy() for n, t in zip(names, inputs)})
    with torch.no_grad():
        expected = module(*inputs).numpy()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    return mod, params


@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core_aten"])
def test_resnet_block(decompose):
    torch.manual_seed(1)
    m = _randomize_bn(ResBlock())
    mod, params = _check(m, (torch.randn(1, 3, 19, 17),), decompose)
    assert [v.name_hint for v in mod["main"].params][:2] == ["x", "stem.weight"]
    assert "bn0.num_batches_tracked" not in params and params["fc.weight"].shape == (5, 8)


@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core_aten"])
def test_mobilenet_v2_inverted_residual(decompose):
    torch.manual_seed(2)
    m = _randomize_bn(InvertedResidual())
    mod, _ = _check(m, (torch.randn(1, 8, 11, 9) * 2,), decompose)
    text = str(mod)
    assert "clip(" in text and "groups=32" in text


@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core_aten"])
def test_gpt2_block(decompose):
    torch.manual_seed(3)
    m = _randomize_bn(GPT2Block())
    ids = torch.randint(0, 50, (2, 7))
    _check(m, (ids,), decompose)


def test_linear_and_matmul_shapes():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.lin = nn.Linear(6, 3)
            s.w = nn.Parameter(torch.randn(3, 5))

        def forward(s, x, v):
            y = s.lin(x) @ s.w                        # [2, 4, 5]
            z = v @ s.lin.weight                      # 1-d @ 2-d: [6]
            return (y.sum(-1) + z[:4].mean()).amax(0) + torch.clamp(y, -0.5, 0.5).mean() * y.max()
    torch.manual_seed(4)
    _check(M().eval(), (torch.randn(2, 4, 6), torch.randn(3)), False)


def test_unsupported_operator_is_one_error_naming_it():
    class M(nn.Module):
        def forward(s, x):
            return torch.cumsum(x, 1)
    with pytest.raises(relay.RelayError, match=r"from_torch: operator 'aten.cumsum' \(node 'cumsum'\) "
                                               r"is not supported; supported: .*aten.addmm"):
        relay.frontend.from_torch(M(), (torch.randn(2, 3),))


def test_training_mode_batch_norm_is_refused():
    with pytest.raises(relay.RelayError, match=r"call module.eval\(\) before exporting"):
        relay.frontend.from_torch(nn.BatchNorm2d(3).train(), (torch.randn(1, 3, 4, 4),))


def test_torchscript_and_from_pytorch_point_to_from_torch():
    traced = torch.jit.trace(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    with pytest.raises(relay.RelayError, match=r"TorchScript module .* relay.frontend.from_torch\(module, "
                                               r"example_inputs\)"):
        relay.frontend.from_torch(traced, (torch.randn(1, 4),))
    with pytest.raises(relay.RelayError, match=r"from_pytorch \(TorchScript\) is not supported: call "
                                               r"relay.frontend.from_torch"):
        relay.frontend.from_pytorch(traced, [("x", (1, 4))])


def test_missing_example_inputs():
    with pytest.raises(relay.RelayError, match="give example_inputs"):
        relay.frontend.from_torch(nn.Linear(4, 2))
