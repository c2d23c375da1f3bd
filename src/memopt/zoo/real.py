"""Real architectures at batch 1 and a small resolution, random weights (nothing downloaded),
exported to memopt graphs through memopt's own ONNX importer.

Nine torchvision models (``weights=None``) and two networks written here (``UNet`` and
``SpeakerStackNet``, defined in ``_modules`` so that torch is imported only when needed):

============================  ============  ==========================================
name                          input         notes
============================  ============  ==========================================
``resnet50``                  1x3x128x128
``densenet121``               1x3x128x128
``googlenet``                 1x3x128x128   no auxiliary heads
``inception_v3``              1x3x128x128   no auxiliary heads; size >= 96 (the network needs 75 px)
``unet``                      1x3x128x128   U-Net, 4 levels, 16..256 channels
``deeplabv3``                 1x3x128x128   ResNet-50 backbone, output ``"out"`` only
``fcn``                       1x3x128x128   ResNet-50 backbone, output ``"out"`` only
``mobilenet_v3_large``        1x3x128x128
``efficientnet_b0``           1x3x128x128
``vit_b_16``                  1x3x64x64     ViT-B/16, ``image_size=64``, static-shape forward
``speaker``                   1x1x64x100    ReDimNet-style, stacking head; log-mel, 100 frames
============================  ============  ==========================================

``build(name, size=...)`` takes another square resolution (a multiple of 32, of 16 for
``vit_b_16``; the speaker network's ``size`` is its number of frames).

:func:`export_onnx` uses the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``,
opset 17, constant folding on: eval-mode batch norms are folded into the convolutions);
:func:`graph` reads the file with :func:`memopt.adapters.onnx.load`, whose op costs are
multiply-accumulates for convolutions and matrix products and element counts for the rest
(:mod:`memopt.adapters.onnx_costs`).

The corpus is split once, here, so that a method is judged on models it was not tuned on:
:data:`TUNING` (tune heuristics and limits on these) and :data:`HELD_OUT` (report on these).

torchvision 0.28's wheel carries CUDA-built operators whose meta registrations fail to load
beside a CPU torch; :func:`torchvision` stubs ``torchvision._meta_registrations`` before the
import (the classification and segmentation models are pure Python). torch and torchvision are
imported lazily; a missing one is an :class:`~memopt.errors.OptionError`.
"""

from __future__ import annotations

import os
import tempfile
import warnings

from memopt.errors import OptionError
from memopt._optional import import_torch

__all__ = ["HELD_OUT", "TUNING", "build", "export_onnx", "family", "graph", "input_shape", "names", "torchvision"]

#: name -> (default input shape, family)
_MODELS = {
    "resnet50": ((1, 3, 128, 128), "residual"),
    "densenet121": ((1, 3, 128, 128), "dense"),
    "googlenet": ((1, 3, 128, 128), "multi-branch"),
    "inception_v3": ((1, 3, 128, 128), "multi-branch"),
    "unet": ((1, 3, 128, 128), "encoder-decoder"),
    "deeplabv3": ((1, 3, 128, 128), "segmentation"),
    "fcn": ((1, 3, 128, 128), "segmentation"),
    "mobilenet_v3_large": ((1, 3, 128, 128), "mobile"),
    "efficientnet_b0": ((1, 3, 128, 128), "mobile"),
    "vit_b_16": ((1, 3, 64, 64), "attention"),
    "speaker": ((1, 1, 64, 100), "speech"),
}

#: The tuning set: tune a method's heuristics, limits and constants on these models only.
TUNING = ("resnet50", "densenet121", "unet", "speaker")
#: The held-out set: a method is judged on these, which it was not tuned on.
HELD_OUT = tuple(n for n in _MODELS if n not in TUNING)


def names() -> list[str]:
    """Every model's name, in a fixed order (tuning and held-out together)."""
    return list(_MODELS)


def family(name: str) -> str:
    return _MODELS[_check(name)][1]


def _check(name: str) -> str:
    if name not in _MODELS:
        raise OptionError(f"unknown real model {name!r}; known: {', '.join(_MODELS)}")
    return name


def _torch():
    return import_torch("the real-model zoo")


def torchvision():
    """The ``torchvision`` module, imported with its CUDA-only meta registrations stubbed out."""
    _torch()
    from memopt._torchvision import allow_import

    allow_import()
    try:
        import torchvision as tv
    except ImportError:
        raise OptionError("the real-model zoo needs torchvision: pip install --no-deps torchvision==0.28.0 "
                          "(beside torch==2.13.0)") from None
    return tv


def _modules():
    """The two networks written here (defined once torch is imported)."""
    torch = _torch()
    from torch import nn

    def conv_bn_relu(cin, cout, k=3, stride=1, dims=2):
        conv = nn.Conv2d if dims == 2 else nn.Conv1d
        bn = nn.BatchNorm2d if dims == 2 else nn.BatchNorm1d
        return nn.Sequential(conv(cin, cout, k, stride, k // 2 if isinstance(k, int) else tuple(x // 2 for x in k),
                                  bias=False), bn(cout), nn.ReLU())

    class UNet(nn.Module):
        """U-Net (Ronneberger et al.): four down levels of two 3x3 conv-BN-ReLU and a 2x2 max
        pool, a bottleneck, four up levels of a 2x2 transposed conv, concatenation with the
        skip of the same level and two convs, a 1x1 classifier. Channels ``base * 2**level``."""

        def __init__(self, base=16, levels=4, classes=2):
            super().__init__()
            ch = [base * 2 ** i for i in range(levels + 1)]
            self.down = nn.ModuleList()
            cin = 3
            for c in ch[:-1]:
                self.down.append(nn.Sequential(conv_bn_relu(cin, c), conv_bn_relu(c, c)))
                cin = c
            self.bottom = nn.Sequential(conv_bn_relu(ch[-2], ch[-1]), conv_bn_relu(ch[-1], ch[-1]))
            self.up = nn.ModuleList(nn.ConvTranspose2d(ch[i + 1], ch[i], 2, 2) for i in reversed(range(levels)))
            self.dec = nn.ModuleList(nn.Sequential(conv_bn_relu(2 * ch[i], ch[i]), conv_bn_relu(ch[i], ch[i]))
                                     for i in reversed(range(levels)))
            self.head = nn.Conv2d(base, classes, 1)

        def forward(self, x):
            skips = []
            for d in self.down:
                x = d(x)
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
            x = self.bottom(x)
            for up, dec, s in zip(self.up, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), s], 1))
            return self.head(x)

    class SpeakerStackNet(nn.Module):
        """A ReDimNet-style speaker-embedding network with a stacking head.

        Input: a log-mel spectrogram ``(1, 1, F=64, T)``. Stages ``s = 0..3`` hold ``8 * 2**s``
        channels at ``64 / 2**s`` frequency bins, so channels x bins = 512 everywhere; each
        stage (after the first) starts with a stride-(2, 1) conv, then ``blocks`` residual 2-D
        blocks (two 3x3 conv-BN, ReLU) each followed by a residual 1-D block on the
        ``(512, T)`` view (depthwise 3-tap conv, pointwise conv). Every 1-D block's output is
        unsqueezed to ``(1, 1, 512, T)`` as soon as it exists; the head concatenates all of
        them (one stack built early, read together late), takes a softmax-weighted sum over
        the stack, a 1x1 conv to 768 channels, mean and standard deviation over time, and a
        linear layer to a 192-dimensional embedding."""

        def __init__(self, freq=64, c0=8, stages=4, blocks=3, emb=192):
            super().__init__()
            self.width = c0 * freq
            self.stages = nn.ModuleList()
            for s in range(stages):
                c = c0 * 2 ** s
                layers = nn.ModuleList()
                layers.append(conv_bn_relu(1 if s == 0 else c // 2, c, 3, (1, 1) if s == 0 else (2, 1)))
                for _ in range(blocks):
                    layers.append(nn.ModuleDict(dict(
                        b2=nn.Sequential(conv_bn_relu(c, c), nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)),
                        b1=nn.Sequential(nn.Conv1d(self.width, self.width, 3, 1, 1, groups=self.width, bias=False),
                                         nn.BatchNorm1d(self.width), nn.Conv1d(self.width, self.width, 1),
                                         nn.ReLU()))))
                self.stages.append(layers)
            depth = stages * blocks
            self.mix = nn.Parameter(torch.linspace(-1.0, 1.0, depth))
            self.proj = conv_bn_relu(self.width, 768, 1, dims=1)
            self.fc = nn.Linear(2 * 768, emb)

        def forward(self, x):
            stack = []
            for layers in self.stages:
                x = layers[0](x)
                for blk in layers[1:]:
                    x = torch.relu(x + blk["b2"](x))
                    b, c, f, t = x.shape
                    y = x.reshape(b, c * f, t)
                    y = y + blk["b1"](y)
                    stack.append(y.unsqueeze(1))
                    x = y.reshape(b, c, f, t)
            h = torch.cat(stack, 1)                       # (1, depth, 512, T)
            w = torch.softmax(self.mix, 0).reshape(1, -1, 1, 1)
            h = self.proj((h * w).sum(1))                 # (1, 768, T)
            mu = h.mean(2)
            sd = torch.sqrt(((h - mu.unsqueeze(2)) ** 2).mean(2) + 1e-5)
            return self.fc(torch.cat([mu, sd], 1))

    class SegmentationOut(nn.Module):
        """A torchvision segmentation model's ``"out"`` tensor (its forward returns a dict)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"]

    class ViTBatch1(nn.Module):
        """torchvision's VisionTransformer at batch 1, with the same modules and weights and a
        forward whose every shape is a constant: the original reads the batch size and the
        attention's shapes from the tensors at run time (a class-token ``Expand``,
        ``Shape``-fed reshapes in ``multi_head_attention_forward``), which leaves the exported
        graph without static shapes. Attention is written out: one input projection, the
        query/key/value slices, per-head ``softmax(q k^T / sqrt(d)) v``, the output projection."""

        def __init__(self, vit):
            super().__init__()
            self.vit = vit

        def forward(self, x):
            vit = self.vit
            d = vit.hidden_dim
            x = vit.conv_proj(x).reshape(1, d, -1).permute(0, 2, 1)
            x = torch.cat([vit.class_token, x], 1) + vit.encoder.pos_embedding
            for blk in vit.encoder.layers:
                att = blk.self_attention
                heads, t = att.num_heads, vit.seq_length
                qkv = nn.functional.linear(blk.ln_1(x), att.in_proj_weight, att.in_proj_bias)
                q, k, v = (qkv[:, :, i * d:(i + 1) * d].reshape(1, t, heads, d // heads).transpose(1, 2)
                           for i in range(3))
                a = torch.softmax(q @ k.transpose(2, 3) * (d // heads) ** -0.5, -1) @ v
                x = x + att.out_proj(a.transpose(1, 2).reshape(1, t, d))
                x = x + blk.mlp(blk.ln_2(x))
            return vit.heads(vit.encoder.ln(x)[:, 0])

    return UNet, SpeakerStackNet, SegmentationOut, ViTBatch1


def input_shape(name: str, size: int | None = None) -> tuple:
    """The input shape of ``name`` at ``size`` (default: its documented resolution)."""
    shape = _MODELS[_check(name)][0]
    if size is None:
        return shape
    step = 16 if name == "vit_b_16" else 32
    if name == "speaker":
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100_000:
            raise OptionError(f"speaker: size (frames) must be an integer in [1, 100000], got {size!r}")
        return shape[:3] + (size,)
    if not isinstance(size, int) or isinstance(size, bool) or size < step or size % step or size > 4096:
        raise OptionError(f"{name}: size must be a multiple of {step} in [{step}, 4096], got {size!r}")
    if name == "inception_v3" and size < 96:
        raise OptionError(f"inception_v3: size must be at least 96 (the network needs >= 75 px), got {size}")
    return shape[:2] + (size, size)


def _make(name: str, shape: tuple):
    unet, speaker, seg_out, vit_batch1 = _modules()
    if name == "unet":
        return unet()
    if name == "speaker":
        return speaker()
    m = torchvision().models
    if name == "googlenet":
        return m.googlenet(weights=None, aux_logits=False, init_weights=False)
    if name == "inception_v3":
        return m.inception_v3(weights=None, aux_logits=False, init_weights=False)
    if name == "deeplabv3":
        return seg_out(m.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None, aux_loss=False))
    if name == "fcn":
        return seg_out(m.segmentation.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=False))
    if name == "vit_b_16":
        return vit_batch1(m.vit_b_16(weights=None, image_size=shape[-1]))
    return getattr(m, name)(weights=None)


def build(name: str, seed: int = 0, size: int | None = None):
    """``(model in eval mode, (example input,))`` with weights and input drawn from ``seed``;
    ``size`` overrides the default resolution (frames for ``speaker``)."""
    torch = _torch()
    shape = input_shape(name, size)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = _make(name, shape).eval()
        for mod in model.modules():  # non-trivial batch-norm statistics
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        x = torch.randn(*shape)
    return model, (x,)


def export_onnx(name: str, path, seed: int = 0, size: int | None = None) -> str:
    """Write the model as an ONNX file (TorchScript exporter, opset 17); returns the path."""
    torch = _torch()
    model, inputs = build(name, seed, size)
    path = os.fspath(path)
    # grad mode stays on: under no_grad, eval-mode attention takes a fused fast path
    # (aten::_native_multi_head_attention) that the TorchScript exporter cannot export
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(model, inputs, path, dynamo=False, opset_version=17, do_constant_folding=True,
                          input_names=["input"], output_names=["output"])
    return path


def graph(name: str, seed: int = 0, size: int | None = None, onnx_path=None):
    """The model as a :class:`~memopt.core.TensorGraph` named ``name``: exported with
    :func:`export_onnx` (to ``onnx_path`` if given, else a temporary file) and read by
    :func:`memopt.adapters.onnx.load`."""
    from memopt.adapters.onnx import load

    if onnx_path is not None:
        return load(export_onnx(name, onnx_path, seed, size), name=name)[0]
    with tempfile.TemporaryDirectory(prefix="memopt-real-") as d:
        return load(export_onnx(name, os.path.join(d, f"{name}.onnx"), seed, size), name=name)[0]
