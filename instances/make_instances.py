"""Writes the small instances bundled with memopt (run from this folder; deterministic).

* ``mlp_train.json``: one training step of a 4-layer MLP (batch 256, width 1024 -> 4096 ->
  4096 -> 1024 -> 10, fp32): forward, loss, backward, weight gradients. Weights are resident;
  matmuls carry a small workspace; activations saved for backward are what makes the order
  matter.
* ``unet_block.json``: a two-level U-Net style encoder/decoder forward pass with skip
  connections (fp16 activations), where running the skip branches late lowers the peak.
* ``late_reuse_edsr.json``, ``late_reuse_ddpm_unet.json``: networks that hold a cheap value
  for a late reuse (issue 7), where recomputing it lowers the peak below the proven
  no-recomputation optimum for well under 1% extra compute; see :func:`late_reuse_edsr` and
  :func:`late_reuse_ddpm_unet` for the shapes and costs.

Sizes are bytes (elements x 4 for fp32, x 2 for fp16). The late-reuse instances count costs
in FLOPs (a multiply-add is 2) and are built with :class:`_Net`.
"""

from __future__ import annotations

import json


def mlp_train() -> dict:
    B, F = 256, 4
    widths = [1024, 4096, 4096, 1024, 10]
    tensors, ops = [], []

    def t(name, n_elems, **flags):
        tensors.append({"name": name, "size": n_elems * F, **flags})
        return name

    def op(name, inputs, outputs, workspace=0, cost=1):
        ops.append({"name": name, "inputs": inputs, "outputs": outputs, "workspace": workspace, "cost": cost})

    x = t("x", B * widths[0])
    t("labels", B * 8)
    acts = [x]
    for i in range(4):
        w = t(f"W{i}", widths[i] * widths[i + 1], resident=True)
        h = t(f"h{i}", B * widths[i + 1])
        op(f"matmul{i}", [acts[-1], w], [h], workspace=B * widths[i + 1] * F // 4, cost=2 * B * widths[i] * widths[i + 1])
        if i < 3:
            a = t(f"relu{i}", B * widths[i + 1])
            op(f"relu{i}", [h], [a], cost=B * widths[i + 1])
            acts.append(a)
        else:
            acts.append(h)
    loss = t("loss", 1, output=True)
    g = t("dlogits", B * widths[-1])
    op("softmax_xent", [acts[-1], "labels"], [loss, g], cost=B * widths[-1])
    grad = g
    for i in reversed(range(4)):
        dW = t(f"dW{i}", widths[i] * widths[i + 1], output=True)
        op(f"grad_W{i}", [acts[i], grad], [dW], workspace=widths[i] * widths[i + 1] * F // 8,
           cost=2 * B * widths[i] * widths[i + 1])
        if i > 0:
            dx = t(f"dact{i}", B * widths[i])
            op(f"grad_x{i}", [grad, f"W{i}"], [dx], cost=2 * B * widths[i] * widths[i + 1])
            dh = t(f"dh{i - 1}", B * widths[i])
            op(f"relu_back{i - 1}", [dx, f"h{i - 1}"], [dh], cost=B * widths[i])
            grad = dh
    return {"format": "memopt-graph", "version": 1, "name": "mlp_train", "tensors": tensors, "ops": ops}


def unet_block() -> dict:
    F, B = 2, 16
    tensors, ops = [], []

    def t(name, elems, **flags):
        tensors.append({"name": name, "size": elems * F, **flags})
        return name

    def op(name, inputs, outputs, workspace=0, cost=1):
        ops.append({"name": name, "inputs": inputs, "outputs": outputs, "workspace": workspace, "cost": cost})

    t("image", B * 3 * 256 * 256)
    prev, skips = "image", []
    chans, side = [64, 128, 256], 256
    for lvl, c in enumerate(chans):
        w = t(f"enc_w{lvl}", 9 * c * c, resident=True)
        a = t(f"enc{lvl}_a", B * c * side * side)
        op(f"enc{lvl}_conv1", [prev, w], [a], workspace=B * c * side * side // 8, cost=9 * B * c * side * side)
        b = t(f"enc{lvl}_b", B * c * side * side)
        op(f"enc{lvl}_conv2", [a, w], [b], workspace=B * c * side * side // 8, cost=9 * B * c * side * side)
        skips.append((b, c, side))
        if lvl < len(chans) - 1:
            side //= 2
            p = t(f"pool{lvl}", B * c * side * side)
            op(f"pool{lvl}", [b], [p], cost=B * c * side * side)
            prev = p
        else:
            prev = b
    for lvl in reversed(range(len(chans) - 1)):
        skip, c, s = skips[lvl]
        up = t(f"up{lvl}", B * c * s * s)
        op(f"upsample{lvl}", [prev], [up], cost=B * c * s * s)
        sk = t(f"skipconv{lvl}", B * c * s * s)
        w = t(f"skip_w{lvl}", c * c, resident=True)
        op(f"skip{lvl}", [skip, w], [sk], cost=B * c * c * s * s)
        cat = t(f"cat{lvl}", B * 2 * c * s * s)
        op(f"concat{lvl}", [up, sk], [cat], cost=B * 2 * c * s * s)
        dec = t(f"dec{lvl}", B * c * s * s, output=(lvl == 0))
        op(f"dec{lvl}_conv", [cat, w], [dec], workspace=B * c * s * s // 8, cost=9 * B * 2 * c * c * s * s)
        prev = dec
    return {"format": "memopt-graph", "version": 1, "name": "unet_block", "tensors": tensors, "ops": ops}


class _Net:
    """A memopt-graph under construction: one op per layer, fp32 tensors of given shapes."""

    def __init__(self, name: str, bytes_per_elem: int = 4):
        self.name, self.F = name, bytes_per_elem
        self.tensors, self.ops = [], []

    def tensor(self, name: str, elems: int, **flags) -> str:
        self.tensors.append({"name": name, "size": elems * self.F, **flags})
        return name

    def op(self, name: str, inputs: list, out_elems: int, cost: int, **flags) -> str:
        """An op ``name`` whose one output, also called ``name``, has ``out_elems`` elements."""
        self.tensor(name, out_elems, **flags)
        self.ops.append({"name": name, "inputs": inputs, "outputs": [name], "workspace": 0, "cost": cost})
        return name

    def conv(self, name: str, x: str, c_in: int, c_out: int, k: int, pixels: int, **flags) -> str:
        """A k x k convolution over ``pixels`` output positions (batch included): weights
        resident, ``2 k^2 c_in c_out`` FLOPs per position."""
        w = self.tensor(name + ".w", k * k * c_in * c_out, resident=True)
        return self.op(name, [x, w], c_out * pixels, 2 * k * k * c_in * c_out * pixels, **flags)

    def doc(self) -> dict:
        return {"format": "memopt-graph", "version": 1, "name": self.name, "tensors": self.tensors, "ops": self.ops}


def late_reuse_edsr(batch: int = 4, side: int = 128, feats: int = 64, blocks: int = 8) -> dict:
    """An EDSR-style image-restoration CNN (Lim et al., CVPR-W 2017; denoising, scale 1):
    ``head`` (3x3 conv, 3 -> 64 channels) -> ``blocks`` residual blocks (conv 3x3, ReLU,
    conv 3x3, scaled add of the block input) -> body conv -> **global residual: add of the
    head's output** -> tail conv (64 -> 3) -> add of the input image (the noise-prediction
    residual of DnCNN / SwinIR denoising). fp32, batch 4 of 128 x 128.

    The head's output is reused only after the whole body, so the no-recomputation order
    holds it (one 64-channel map) across every block; the head is cheap (3 input channels:
    3456 FLOPs per pixel against ~1.2 MFLOPs per pixel for the body), so re-running it from
    the image (3 channels, held to the end anyway) right before the global add lowers the
    peak by about a quarter for about 0.3% extra compute. ReLU and the adds are not in
    place (each allocates its output), as in a graph capture without in-place rewriting.
    """
    n = _Net("late_reuse_edsr")
    px = batch * side * side
    img = n.tensor("image", 3 * px)
    head = n.conv("head", img, 3, feats, 3, px)
    x = head
    for b in range(blocks):
        a = n.conv(f"block{b}.conv1", x, feats, feats, 3, px)
        r = n.op(f"block{b}.relu", [a], feats * px, feats * px)
        c = n.conv(f"block{b}.conv2", r, feats, feats, 3, px)
        x = n.op(f"block{b}.scale_add", [c, x], feats * px, 2 * feats * px)
    body = n.conv("body_conv", x, feats, feats, 3, px)
    res = n.op("global_skip_add", [body, head], feats * px, feats * px)
    tail = n.conv("tail", res, feats, 3, 3, px)
    n.op("image_residual_add", [tail, img], 3 * px, 3 * px, output=True)
    return n.doc()


def late_reuse_ddpm_unet(batch: int = 32, side: int = 64, ch: int = 64, mults=(1, 2, 2), res_blocks: int = 1,
                         heads: int = 4) -> dict:
    """The denoising U-Net of DDPM (Ho et al., NeurIPS 2020; the ``UNetModel`` layout of
    openai/improved-diffusion) at a small size: fp32, batch 32 of 64 x 64 x 3, base width 64,
    channel multipliers (1, 2, 2), one residual block per level, self-attention (4 heads) at
    16 x 16; the timestep embedding is left out (it is a vector per sample).

    Every input block's output is kept for a skip (``hs``) and the output blocks concatenate
    them in reverse; the *first* one is ``conv_in`` (3x3 conv, 3 -> 64 channels: 3456 FLOPs
    per pixel), and it is concatenated by the *last* output block. The no-recomputation
    order holds it across the whole net, including the first full-resolution output block,
    which is the peak (its concat takes the 128-channel upsampled map and a 64-channel
    skip); re-running ``conv_in`` from the image (3 channels, small) right before the last
    block lowers the peak by about 11% for about 0.2% extra compute.

    Layers: ResBlock = GroupNorm+SiLU (one op, 8 FLOPs per element), 3x3 conv, GroupNorm+SiLU,
    3x3 conv, 1x1 skip conv when the width changes, add. Attention = GroupNorm, 1x1 qkv conv,
    scores ``q k^T`` (heads x T x T per sample), softmax (5 FLOPs per score), scores x v,
    1x1 projection, add. Downsample: 3x3 conv, stride 2. Upsample: nearest + 3x3 conv (one op).
    """
    n = _Net("late_reuse_ddpm_unet")
    norm_flops = 8

    def resblock(name, x, c_in, c_out, px):
        a = n.op(f"{name}.norm1", [x], c_in * px, norm_flops * c_in * px)
        a = n.conv(f"{name}.conv1", a, c_in, c_out, 3, px)
        b = n.op(f"{name}.norm2", [a], c_out * px, norm_flops * c_out * px)
        b = n.conv(f"{name}.conv2", b, c_out, c_out, 3, px)
        skip = x if c_in == c_out else n.conv(f"{name}.skip", x, c_in, c_out, 1, px)
        return n.op(f"{name}.add", [b, skip], c_out * px, c_out * px)

    def attention(name, x, c, px):
        tokens = px // batch
        h = n.op(f"{name}.norm", [x], c * px, norm_flops * c * px)
        qkv = n.conv(f"{name}.qkv", h, c, 3 * c, 1, px)
        scores = n.op(f"{name}.scores", [qkv], batch * heads * tokens * tokens, 2 * batch * tokens * tokens * c)
        probs = n.op(f"{name}.softmax", [scores], batch * heads * tokens * tokens, 5 * batch * heads * tokens * tokens)
        av = n.op(f"{name}.attend", [probs, qkv], c * px, 2 * batch * tokens * tokens * c)
        proj = n.conv(f"{name}.proj", av, c, c, 1, px)
        return n.op(f"{name}.add", [proj, x], c * px, c * px)

    px = batch * side * side
    img = n.tensor("image", 3 * px)
    h = n.conv("conv_in", img, 3, ch, 3, px)
    hs, widths, c = [h], [ch], ch
    for lvl, m in enumerate(mults):
        for i in range(res_blocks):
            h = resblock(f"down{lvl}.{i}.res", h, c, ch * m, px)
            c = ch * m
            if lvl == len(mults) - 1:
                h = attention(f"down{lvl}.{i}.attn", h, c, px)
            hs.append(h)
            widths.append(c)
        if lvl < len(mults) - 1:
            px //= 4
            h = n.conv(f"down{lvl}.downsample", h, c, c, 3, px)
            hs.append(h)
            widths.append(c)
    h = resblock("mid.res1", h, c, c, px)
    h = attention("mid.attn", h, c, px)
    h = resblock("mid.res2", h, c, c, px)
    for lvl, m in reversed(list(enumerate(mults))):
        for i in range(res_blocks + 1):
            skip, c_skip = hs.pop(), widths.pop()
            cat = n.op(f"up{lvl}.{i}.concat", [h, skip], (c + c_skip) * px, (c + c_skip) * px)
            h = resblock(f"up{lvl}.{i}.res", cat, c + c_skip, ch * m, px)
            c = ch * m
            if lvl == len(mults) - 1:
                h = attention(f"up{lvl}.{i}.attn", h, c, px)
            if i == res_blocks and lvl > 0:
                px *= 4
                h = n.conv(f"up{lvl}.upsample", h, c, c, 3, px)
    h = n.op("out.norm", [h], c * px, norm_flops * c * px)
    n.conv("conv_out", h, c, 3, 3, px, output=True)
    return n.doc()


if __name__ == "__main__":
    for name, doc in (("mlp_train.json", mlp_train()), ("unet_block.json", unet_block()),
                      ("late_reuse_edsr.json", late_reuse_edsr()), ("late_reuse_ddpm_unet.json", late_reuse_ddpm_unet())):
        with open(name, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        print(name, len(doc["ops"]), "ops")
