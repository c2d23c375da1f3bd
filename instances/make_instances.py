"""Writes the small instances bundled with memopt (run from this folder; deterministic).

* ``mlp_train.json``: one training step of a 4-layer MLP (batch 256, width 1024 -> 4096 ->
  4096 -> 1024 -> 10, fp32): forward, loss, backward, weight gradients. Weights are resident;
  matmuls carry a small workspace; activations saved for backward are what makes the order
  matter.
* ``unet_block.json``: a two-level U-Net style encoder/decoder forward pass with skip
  connections (fp16 activations), where running the skip branches late lowers the peak.
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


if __name__ == "__main__":
    for name, doc in (("mlp_train.json", mlp_train()), ("unet_block.json", unet_block())):
        with open(name, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        print(name, len(doc["ops"]), "ops")
