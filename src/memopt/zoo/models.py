"""Hand-written architectures with random weights (nothing downloaded), for tests and benchmarks.

Every model is small enough to compile with Inductor on CPU in seconds. Families:
microcontroller-class networks (``mcunet``, ``ds_cnn_kws``, ``resnet8_tiny``,
``squeezenet_mini``), multi-branch (``inception_mini``, ``fanout_branches``,
``shufflenet_mini``), dense (``densenet_mini``), encoder-decoder with long skips
(``unet_mini``, ``fpn_mini``), attention (``transformer_mini``, ``mlp_mixer_mini``) and
randomly wired (``randwire_mini``).
"""

from __future__ import annotations

import random

import torch
from torch import nn
import torch.nn.functional as F


def conv_bn_act(cin, cout, k=3, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- microcontroller-class
class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(conv_bn_act(cin, mid, 1), conv_bn_act(mid, mid, 3, stride, groups=mid),
                                   conv_bn_act(mid, cout, 1, act=False))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MCUNet(nn.Module):
    """MCUNet/MobileNetV2-style inverted residuals at microcontroller scale."""

    def __init__(self, num_classes=10):
        super().__init__()
        cfg = [(8, 16, 1, 3), (16, 16, 1, 3), (16, 24, 2, 4), (24, 24, 1, 4), (24, 32, 2, 4)]
        self.stem = conv_bn_act(3, 8, 3, 2)
        self.blocks = nn.Sequential(*[InvertedResidual(*c) for c in cfg])
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean((2, 3)))


class DSCNN(nn.Module):
    """Depthwise-separable CNN for keyword spotting (MLPerf Tiny KWS), MFCC input 49x10."""

    def __init__(self, ch=32, num_classes=12):
        super().__init__()
        self.stem = conv_bn_act(1, ch, 3)
        self.ds = nn.Sequential(*[nn.Sequential(conv_bn_act(ch, ch, 3, groups=ch), conv_bn_act(ch, ch, 1))
                                  for _ in range(4)])
        self.fc = nn.Linear(ch, num_classes)

    def forward(self, x):
        return self.fc(self.ds(self.stem(x)).mean((2, 3)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = conv_bn_act(cin, cout, 3, stride)
        self.c2 = conv_bn_act(cout, cout, 3, act=False)
        self.short = (nn.Identity() if stride == 1 and cin == cout else conv_bn_act(cin, cout, 1, stride, act=False))

    def forward(self, x):
        return F.relu(self.c2(self.c1(x)) + self.short(x))


class ResNet8(nn.Module):
    """ResNet-8 (MLPerf Tiny image classification) at reduced width."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = conv_bn_act(3, 8, 3)
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2), BasicBlock(16, 32, 2))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.s = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.s(x))
        return torch.cat([F.relu(self.e1(s)), F.relu(self.e3(s))], 1)


class SqueezeNetMini(nn.Module):
    """SqueezeNet fire modules (squeeze, then two parallel expand branches)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1)
        self.fires = nn.Sequential(Fire(16, 4, 16), Fire(32, 4, 16), nn.MaxPool2d(2), Fire(32, 8, 24))
        self.cls = nn.Conv2d(48, num_classes, 1)

    def forward(self, x):
        return self.cls(self.fires(F.relu(self.stem(x)))).mean((2, 3))


# ---------------------------------------------------------------- multi-branch
class InceptionBlock(nn.Module):
    def __init__(self, cin, b1, b3r, b3, b5r, b5, bp):
        super().__init__()
        self.b1 = conv_bn_act(cin, b1, 1)
        self.b3 = nn.Sequential(conv_bn_act(cin, b3r, 1), conv_bn_act(b3r, b3, 3))
        self.b5 = nn.Sequential(conv_bn_act(cin, b5r, 1), conv_bn_act(b5r, b5, 3), conv_bn_act(b5, b5, 3))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn_act(cin, bp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


class InceptionMini(nn.Module):
    """Two inception blocks: four parallel branches (1x1, 3x3, double 3x3, pool) concatenated."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = conv_bn_act(3, 16, 3, 2)
        self.i1 = InceptionBlock(16, 8, 12, 16, 4, 8, 8)
        self.i2 = InceptionBlock(40, 16, 16, 24, 8, 12, 8)
        self.fc = nn.Linear(60, num_classes)

    def forward(self, x):
        return self.fc(self.i2(self.i1(self.stem(x))).mean((2, 3)))


class FanoutBranches(nn.Module):
    """Parallel expand-then-reduce branches over one input, summed: each branch's wide
    intermediate is short-lived only if branches run one after the other."""

    def __init__(self, cin=8, wide=64, branches=4):
        super().__init__()
        self.up = nn.ModuleList([nn.Conv2d(cin, wide, 3, padding=1) for _ in range(branches)])
        self.down = nn.ModuleList([nn.Conv2d(wide, cin, 1) for _ in range(branches)])

    def forward(self, x):
        outs = [d(torch.tanh(u(x))) for u, d in zip(self.up, self.down)]
        return torch.stack(outs).sum(0)


class ShuffleUnit(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c // 2
        self.branch = nn.Sequential(conv_bn_act(h, h, 1), conv_bn_act(h, h, 3, groups=h, act=False),
                                    conv_bn_act(h, h, 1))

    def forward(self, x):
        a, b = x.chunk(2, 1)
        y = torch.cat([a, self.branch(b)], 1)
        n, c, hh, ww = y.shape
        return y.view(n, 2, c // 2, hh, ww).transpose(1, 2).reshape(n, c, hh, ww)


class ShuffleNetMini(nn.Module):
    """ShuffleNetV2 units: channel split, one branch transformed, concat, channel shuffle."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = conv_bn_act(3, 24, 3, 2)
        self.units = nn.Sequential(*[ShuffleUnit(24) for _ in range(3)])
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x):
        return self.fc(self.units(self.stem(x)).mean((2, 3)))


# ---------------------------------------------------------------- dense
class DenseNetMini(nn.Module):
    """Two dense blocks (every layer reads the concat of all earlier ones) with a transition."""

    def __init__(self, growth=8, layers=4, num_classes=10):
        super().__init__()
        c = 16
        self.stem = conv_bn_act(3, c, 3, 2)
        self.blocks = nn.ModuleList()
        self.trans = nn.ModuleList()
        for b in range(2):
            block = nn.ModuleList()
            for _ in range(layers):
                block.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, growth, 3, padding=1)))
                c += growth
            self.blocks.append(block)
            if b == 0:
                self.trans.append(nn.Sequential(nn.Conv2d(c, c // 2, 1), nn.AvgPool2d(2)))
                c //= 2
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        x = self.stem(x)
        for b, block in enumerate(self.blocks):
            feats = [x]
            for layer in block:
                feats.append(layer(torch.cat(feats, 1)))
            x = torch.cat(feats, 1)
            if b < len(self.trans):
                x = self.trans[b](x)
        return self.fc(x.mean((2, 3)))


# ---------------------------------------------------------------- encoder-decoder
class UNetMini(nn.Module):
    """Three-level U-Net: long skips from every encoder level to its decoder level."""

    def __init__(self, c=8):
        super().__init__()
        self.e1 = conv_bn_act(3, c)
        self.e2 = conv_bn_act(c, 2 * c)
        self.e3 = conv_bn_act(2 * c, 4 * c)
        self.mid = conv_bn_act(4 * c, 4 * c)
        self.d3 = conv_bn_act(8 * c, 2 * c)
        self.d2 = conv_bn_act(4 * c, c)
        self.d1 = conv_bn_act(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        s1 = self.e1(x)
        s2 = self.e2(F.max_pool2d(s1, 2))
        s3 = self.e3(F.max_pool2d(s2, 2))
        m = self.mid(F.max_pool2d(s3, 2))
        y = self.d3(torch.cat([F.interpolate(m, scale_factor=2.0), s3], 1))
        y = self.d2(torch.cat([F.interpolate(y, scale_factor=2.0), s2], 1))
        y = self.d1(torch.cat([F.interpolate(y, scale_factor=2.0), s1], 1))
        return self.out(y)


class FPNMini(nn.Module):
    """Feature pyramid: bottom-up path, top-down path with lateral 1x1 connections, one head
    per level."""

    def __init__(self, c=16):
        super().__init__()
        self.b1 = conv_bn_act(3, c, 3, 2)
        self.b2 = conv_bn_act(c, 2 * c, 3, 2)
        self.b3 = conv_bn_act(2 * c, 4 * c, 3, 2)
        self.l1, self.l2, self.l3 = nn.Conv2d(c, c, 1), nn.Conv2d(2 * c, c, 1), nn.Conv2d(4 * c, c, 1)
        self.head = nn.Conv2d(c, 4, 3, padding=1)

    def forward(self, x):
        c1 = self.b1(x)
        c2 = self.b2(c1)
        c3 = self.b3(c2)
        p3 = self.l3(c3)
        p2 = self.l2(c2) + F.interpolate(p3, scale_factor=2.0)
        p1 = self.l1(c1) + F.interpolate(p2, scale_factor=2.0)
        return self.head(p1), self.head(p2), self.head(p3)


# ---------------------------------------------------------------- attention
class TransformerMini(nn.Module):
    """Two pre-norm transformer encoder layers (multi-head attention written out, GELU MLP)."""

    def __init__(self, d=32, heads=4, layers=2, ff=4):
        super().__init__()
        self.heads = heads
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict(dict(
                n1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
                n2=nn.LayerNorm(d), fc1=nn.Linear(d, ff * d), fc2=nn.Linear(ff * d, d))))

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        for L in self.layers:
            q, k, v = L["qkv"](L["n1"](x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, -1)
            x = x + L["proj"]((att @ v).transpose(1, 2).reshape(b, t, d))
            x = x + L["fc2"](F.gelu(L["fc1"](L["n2"](x))))
        return x


class MLPMixerMini(nn.Module):
    """MLP-Mixer: token-mixing and channel-mixing MLPs over image patches."""

    def __init__(self, patch=4, d=32, tokens=64, layers=2, num_classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.layers = nn.ModuleList([nn.ModuleDict(dict(
            n1=nn.LayerNorm(d), t1=nn.Linear(tokens, 2 * tokens), t2=nn.Linear(2 * tokens, tokens),
            n2=nn.LayerNorm(d), c1=nn.Linear(d, 4 * d), c2=nn.Linear(4 * d, d))) for _ in range(layers)])
        self.fc = nn.Linear(d, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)  # b, tokens, d
        for L in self.layers:
            y = L["n1"](x).transpose(1, 2)
            x = x + L["t2"](F.gelu(L["t1"](y))).transpose(1, 2)
            x = x + L["c2"](F.gelu(L["c1"](L["n2"](x))))
        return self.fc(x.mean(1))


# ---------------------------------------------------------------- randomly wired
class RandWireMini(nn.Module):
    """A randomly wired network (Xie et al.): a seeded Watts-Strogatz-like DAG of nodes; each
    node sums its inputs, then ReLU-conv-BN; sinks are averaged."""

    def __init__(self, nodes=10, c=16, k=4, p=0.5, seed=1):
        super().__init__()
        rng = random.Random(seed)
        preds = {i: set() for i in range(nodes)}
        for i in range(nodes):  # ring lattice to the k/2 following nodes, rewired with prob p
            for j in range(1, k // 2 + 1):
                a, b = i, (i + j) % nodes
                if rng.random() < p:
                    b = rng.randrange(nodes)
                lo, hi = min(a, b), max(a, b)
                if lo != hi:
                    preds[hi].add(lo)
        self.preds = [sorted(preds[i]) for i in range(nodes)]
        used = {q for ps in self.preds for q in ps}
        self.sinks = [i for i in range(nodes) if i not in used]
        self.stem = conv_bn_act(3, c, 3, 2)
        self.ops = nn.ModuleList([nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 3, padding=1, bias=False),
                                                nn.BatchNorm2d(c)) for _ in range(nodes)])
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        outs = []
        for i, op in enumerate(self.ops):
            inp = x if not self.preds[i] else sum(outs[j] for j in self.preds[i])
            outs.append(op(inp))
        y = sum(outs[i] for i in self.sinks) / len(self.sinks)
        return self.fc(y.mean((2, 3)))


# ---------------------------------------------------------------- registry
#: name -> (class, input shape, family)
_ZOO = {
    "mcunet": (MCUNet, (1, 3, 32, 32), "microcontroller"),
    "ds_cnn_kws": (DSCNN, (1, 1, 49, 10), "microcontroller"),
    "resnet8_tiny": (ResNet8, (1, 3, 32, 32), "microcontroller"),
    "squeezenet_mini": (SqueezeNetMini, (1, 3, 32, 32), "microcontroller"),
    "inception_mini": (InceptionMini, (1, 3, 32, 32), "multi-branch"),
    "fanout_branches": (FanoutBranches, (1, 8, 16, 16), "multi-branch"),
    "shufflenet_mini": (ShuffleNetMini, (1, 3, 32, 32), "multi-branch"),
    "densenet_mini": (DenseNetMini, (1, 3, 32, 32), "dense"),
    "unet_mini": (UNetMini, (1, 3, 32, 32), "encoder-decoder"),
    "fpn_mini": (FPNMini, (1, 3, 32, 32), "encoder-decoder"),
    "transformer_mini": (TransformerMini, (2, 16, 32), "attention"),
    "mlp_mixer_mini": (MLPMixerMini, (1, 3, 32, 32), "attention"),
    "randwire_mini": (RandWireMini, (1, 3, 32, 32), "randomly-wired"),
}


def names() -> list[str]:
    """Every zoo model's name, in a fixed order."""
    return list(_ZOO)


def family(name: str) -> str:
    return _ZOO[_check(name)][2]


def _check(name: str) -> str:
    if name not in _ZOO:
        from memopt.errors import OptionError

        raise OptionError(f"unknown zoo model {name!r}; known: {', '.join(_ZOO)}")
    return name


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``(model in eval mode, example inputs)`` with weights and inputs drawn from ``seed``."""
    cls, shape, _ = _ZOO[_check(name)]
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        model = cls().eval()
        for m in model.modules():  # non-trivial batch-norm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        x = torch.randn(*shape)
    return model, (x,)
