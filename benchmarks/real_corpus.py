"""The real-network corpus: every model of :mod:`memopt.zoo.real` as memopt-graph JSON, and one table.

Each model (batch 1, its documented small resolution, random weights) is exported with the
TorchScript ONNX exporter and read by memopt's ONNX importer (op costs: multiply-accumulates
for Conv/ConvTranspose/MatMul/Gemm, element counts for the rest); the graph is written to
``OUT/<model>.json`` and scheduled without recomputation by :func:`memopt.schedule`.

Columns: the set the model belongs to (``tuning`` or ``held-out``, :data:`memopt.zoo.real.TUNING`
— tune methods on the first, report on the second), the input shape, ops and tensors of the
graph, the multiply-accumulates of its Conv/ConvTranspose/MatMul/Gemm nodes, the sum of all op
costs, the resident bytes (weights and the input), the peak of the exporter's node order, and
memopt's peak, that peak less the resident bytes (activations), its lower bound, status and
wall time (the whole ``schedule`` call, numba kernels compiled beforehand).

    python benchmarks/real_corpus.py [OUT] [--models M ...] [--time-limit 10] [--keep-onnx]

``OUT`` defaults to ``benchmarks/corpus/`` (git-ignored: the files are large). Needs torch and
torchvision (``pip install --no-deps torchvision==0.28.0``) and the onnx extra.

``--training`` writes training graphs instead: one step (forward, cross-entropy loss against
fixed random labels, backward) captured by :func:`memopt.adapters.training.capture` (ATen
joint graph, FLOP costs) as ``OUT/train_<model>.json``, for the models of :data:`TRAIN_SIZES`
(train mode; batches and images at which the activations, not the parameters and their
gradients, dominate the step, as in training practice; capture time grows with the ops, not
the sizes: the traces run on fake tensors) and ``gpt2``, a decoder-only transformer of :data:`GPT2_CONFIG` with random
weights (``transformers``). Columns: the input, ops (forward / backward), tensors, the FLOPs
of the ops with a ``torch.utils.flop_counter`` formula, the sum of all op costs, resident bytes
(parameters, buffers, inputs), the peak of the captured order (no recomputation) and that peak
less the resident bytes, and the capture's wall time.

    python benchmarks/real_corpus.py --training [OUT] [--models M ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "corpus")
MAC_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def corpus_row(name: str, out_dir: str, onnx_dir: str, time_limit: float) -> dict:
    """Export, import, write and schedule one model; its table row."""
    import onnx

    import memopt
    from memopt.adapters.onnx import load
    from memopt.core import peak
    from memopt.io import save_graph
    from memopt.zoo import real

    onnx_path = real.export_onnx(name, os.path.join(onnx_dir, f"{name}.onnx"))
    g, mapping = load(onnx_path, name=name)
    save_graph(g, os.path.join(out_dir, f"{name}.json"))
    nodes = onnx.load(onnx_path, load_external_data=False).graph.node
    cost = g.op_cost.tolist()
    macs = sum(int(cost[v]) for v, f in enumerate(mapping.op_node) if nodes[f].op_type in MAC_OPS)
    t0 = time.perf_counter()
    res = memopt.schedule(g, time_limit=time_limit)
    secs = time.perf_counter() - t0
    shape = "x".join(map(str, real.input_shape(name)))
    return {"model": name, "set": "tuning" if name in real.TUNING else "held-out", "input": shape,
            "ops": g.num_ops, "tensors": g.num_tensors, "MACs": macs, "total cost": sum(int(c) for c in cost),
            "resident": mapping.resident_bytes, "file-order peak": int(peak(g, list(range(g.num_ops)))),
            "memopt peak": int(res.peak), "activations": int(res.peak) - mapping.resident_bytes,
            "lower bound": int(res.lower_bound), "status": res.status,
            "seconds": round(secs, 1)}


#: training corpus: model -> (batch, size) (size: image side; frames for ``speaker``);
#: vit_b_16's forward is written for batch 1
TRAIN_SIZES = {"resnet50": (8, 128), "densenet121": (8, 128), "googlenet": (8, 128), "mobilenet_v3_large": (8, 128),
               "efficientnet_b0": (8, 128), "vit_b_16": (1, 128), "unet": (8, 128), "speaker": (8, 200), "gpt2": (8, 128)}
#: the decoder-only transformer of the training corpus (GPT-2 layout, smaller; dropout off so
#: that the step is deterministic)
GPT2_CONFIG = dict(n_layer=4, n_embd=256, n_head=4, vocab_size=8192, n_positions=128, bos_token_id=0, eos_token_id=0,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def _gpt2(batch: int, seq: int):
    """``(module returning logits, (token ids,), labels)`` for the GPT-2 config, seed 0."""
    import torch

    from memopt._torchvision import allow_import

    allow_import()
    import transformers

    import transformers.masking_utils as mu

    # the packed-sequence check reads the position ids' values (data-dependent: not traceable);
    # the corpus never packs sequences
    mu.find_packed_sequence_indices = lambda position_ids: None
    torch.manual_seed(0)
    # positions: at least the sequence (the corpus's 128; longer sequences get their own table)
    config = dict(GPT2_CONFIG, n_positions=max(GPT2_CONFIG["n_positions"], seq))
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            return self.lm(input_ids=ids, use_cache=False).logits

    ids = torch.randint(0, GPT2_CONFIG["vocab_size"], (batch, seq))
    return Logits(), (ids,), torch.roll(ids, -1, 1)


def train_model(name: str):
    """``(model in train mode, inputs, labels)`` of the training corpus."""
    import torch

    from memopt.zoo import real

    batch, size = TRAIN_SIZES[name]
    if name == "gpt2":
        model, inputs, labels = _gpt2(batch, size)
        return model.train(), inputs, labels
    model, (x,) = real.build(name, size=size)
    x = torch.cat([x] * batch)
    with torch.no_grad():
        out = model(x)
    g = torch.Generator().manual_seed(1)
    shape = (batch,) + tuple(out.shape[2:])
    return model.train(), (x,), torch.randint(0, out.shape[1], shape, generator=g)


def cross_entropy(out, labels):
    """The corpus loss: cross-entropy of logits ``(B, C, ...)``, or ``(B, T, V)`` for ``gpt2``."""
    import torch

    if out.dim() == 3 and labels.dim() == 2:  # language model: (B, T, V) against (B, T)
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), labels.flatten())
    return torch.nn.functional.cross_entropy(out, labels)


def training_row(name: str, out_dirs: list[str]) -> dict:
    """Capture one model's training step, write ``train_<name>.json`` to each folder; its row."""
    from memopt.adapters import training
    from memopt.io import save_graph

    model, inputs, labels = train_model(name)
    t0 = time.perf_counter()
    tg = training.capture(model, inputs, cross_entropy, targets=(labels,), name=f"train_{name}")
    secs = time.perf_counter() - t0
    for d in out_dirs:
        save_graph(tg.graph, os.path.join(d, f"train_{name}.json"))
    g = tg.graph
    flops = sum(int(c) for nm, c in zip(g.op_names, g.op_cost_exact)
                if training.op_flops(tg.nodes[nm].target, *training._meta_args(tg.nodes[nm]),
                                     tg.nodes[nm].meta.get("val")) is not None)
    peak = tg.modelled_peak() + g.resident_bytes
    return {"model": name, "input": "x".join(map(str, inputs[0].shape)),
            "ops": f"{len(tg.forward_ops)} / {len(tg.backward_ops)}", "tensors": g.num_tensors, "FLOPs": flops,
            "total cost": sum(int(c) for c in g.op_cost_exact), "resident": g.resident_bytes,
            "peak (no remat)": peak, "activations": peak - g.resident_bytes, "capture s": round(secs, 1)}


def training_main(args) -> int:
    names = args.models or list(TRAIN_SIZES)
    unknown = [n for n in names if n not in TRAIN_SIZES]
    if unknown:
        print(f"real_corpus: unknown training model(s) {', '.join(unknown)}; known: {', '.join(TRAIN_SIZES)}",
              file=sys.stderr)
        return 2
    dirs = [args.out] + list(args.also or [])
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    rows = []
    for n in names:
        rows.append(training_row(n, dirs))
        r = rows[-1]
        print(f"  {n}: {r['ops']} ops, peak {r['peak (no remat)']:,} ({r['capture s']} s)", file=sys.stderr, flush=True)
    print(markdown(rows))
    return 0


def markdown(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if isinstance(rows[0][c], (int, float)) else "---"
                                                          for c in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:,}" if isinstance(r[c], int) else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=DEFAULT_OUT, help="folder for the graph JSON files")
    ap.add_argument("--models", nargs="*", help="a subset of memopt.zoo.real.names()")
    ap.add_argument("--time-limit", type=float, default=10.0, help="memopt.schedule's limit per model (seconds)")
    ap.add_argument("--keep-onnx", action="store_true", help="also keep the exported ONNX files in OUT")
    ap.add_argument("--training", action="store_true", help="write training-step graphs train_<model>.json")
    ap.add_argument("--also", nargs="*", help="more folders to write the training graphs to")
    args = ap.parse_args(argv)
    if args.training:
        return training_main(args)

    from memopt.errors import MemoptError
    from memopt.zoo import real

    try:
        names = args.models or real.names()
        for n in names:
            real.family(n)   # an unknown name is an OptionError before any export
        os.makedirs(args.out, exist_ok=True)
        # compile the numba kernels once, outside the timings (as benchmarks/schedule_table.py)
        from memopt import _jit
        from memopt.io import load_instance
        from memopt.schedule import schedule_instance

        with _jit.mode("compiled"):
            schedule_instance(load_instance(os.path.join(HERE, "..", "instances", "mlp_train.json")), time_limit=1.0)
        rows = []
        with tempfile.TemporaryDirectory(prefix="memopt-corpus-") as tmp:
            for n in names:
                rows.append(corpus_row(n, args.out, args.out if args.keep_onnx else tmp, args.time_limit))
                r = rows[-1]
                print(f"  {n}: {r['ops']} ops, peak {r['memopt peak']:,} ({r['status']}, {r['seconds']} s)",
                      file=sys.stderr, flush=True)
    except MemoptError as exc:
        print(f"real_corpus: {exc}", file=sys.stderr)
        return 2
    print(markdown(rows))
    print(f"\ntuning set: {', '.join(real.TUNING)}; held-out: {', '.join(real.HELD_OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
