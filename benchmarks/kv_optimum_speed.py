"""Speed of the exact KV offline optimum: eviction-event assignment vs the min-cost-flow reference.

Target: a 2,048-token, 30-layer trace with SmolLM2's 3 KV heads per layer (90 heads)
under 60 s on a 2-core machine. :func:`memopt.cache.kv_optimum.kv_optimum` solves it exactly
(``method="assignment"``, checked schedule + matching dual bound); the reference
``method="flow"`` (OR-Tools min-cost flow) is run on ``--old-heads`` heads only and
extrapolated, since it takes minutes on the whole trace. Both must give the same optimum on
the heads where both run.

Without ``--load``, the trace is **synthetic**, shaped like a real one: per KV head,
``softmax(5 [j = 0] + 1.5 g_j - 0.8 log(1 + t - j) + noise)`` (an attention sink, per-key
importance ``g_j ~ N(0, 1)``, recency, ``N(0, 1)`` noise per cell), times ``group = 3`` query
heads, in units of ``1 / 2**24``. ``--load`` runs on a recorded ``memopt-attention`` trace
instead (``memopt cache record-attention``).

    python benchmarks/kv_optimum_speed.py                     # T=2048, 30 x 3 heads, 10/20/50 %
    python benchmarks/kv_optimum_speed.py --tokens 512 --layers 4 --old-heads 12
    python benchmarks/kv_optimum_speed.py --load TRACE.jsonl --prefill 64
    python benchmarks/kv_optimum_speed.py --record 2048 --prefill 64      # real SmolLM2 attention

Prints one row per (budget, method): T, heads, jobs, wall seconds, CPU seconds (this process
and its workers), retained attention, and whether it equals the other method's.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

from memopt.cache.kv_optimum import kv_optimum
from memopt.cache.kv_trace import load_attention, make_attention_trace


def synthetic_trace(T: int, layers: int, kv_heads: int, *, group: int = 3, scale: int = 2**24, seed: int = 0):
    """A synthetic attention trace shaped like a real one (module doc)."""
    rng = np.random.default_rng(seed)
    att = np.zeros((layers, kv_heads, T, T), dtype=np.int32)
    t = np.arange(T, dtype=np.float32)[:, None]
    j = np.arange(T, dtype=np.float32)[None, :]
    recency = -0.8 * np.log1p(np.maximum(t - j, 0))
    future = j > t
    for li in range(layers):
        for h in range(kv_heads):
            logit = recency + 1.5 * rng.standard_normal(T, dtype=np.float32)[None, :]
            logit += rng.standard_normal((T, T), dtype=np.float32)
            logit[:, 0] += 5.0
            logit[future] = -np.inf
            logit -= logit.max(axis=1, keepdims=True)
            p = np.exp(logit, dtype=np.float64)
            p /= p.sum(axis=1, keepdims=True)
            att[li, h] = np.rint(p * (group * scale)).astype(np.int32)
    correct = rng.random(T) < 0.5
    return make_attention_trace(att, correct, scale=scale, group=group, name=f"synthetic-{T}")


def recorded_trace(n_tokens: int):
    """SmolLM2-135M-Instruct's attention on the first ``n_tokens`` tokens of real text, recorded
    in memory by :func:`memopt.cache.kv_record.record_attention` (one layer's float attention
    at a time)."""
    import pydoc_data.topics as topics

    from memopt.cache.kv_record import load_smollm2, record_attention

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    model, tok = load_smollm2()
    return record_attention(model, tok, text, n_tokens, name=f"smollm2-pydoc-{n_tokens}")


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn):
    w0, c0 = time.perf_counter(), cpu_seconds()
    out = fn()
    return out, time.perf_counter() - w0, cpu_seconds() - c0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--budgets", default="0.1,0.2,0.5", help="fractions of T (comma list)")
    ap.add_argument("--prefill", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for the heads")
    ap.add_argument("--old-heads", type=int, default=2,
                    help="heads the min-cost-flow reference runs on (0: skip; -1: all)")
    ap.add_argument("--load", metavar="TRACE", help="a recorded memopt-attention trace")
    ap.add_argument("--record", type=int, metavar="N", help="record SmolLM2 on N tokens of real text")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    if args.load:
        trace = load_attention(args.load)
    elif args.record:
        trace = recorded_trace(args.record)
    else:
        trace = synthetic_trace(args.tokens, args.layers, args.kv_heads)
    T, K = trace.steps, trace.n_heads
    print(f"# {trace.name}: T={T}, {trace.layers} layers x {trace.kv_heads} KV heads = {K} heads, group "
          f"{trace.group}, prefill {args.prefill}; built/read in {time.perf_counter() - t0:.1f} s; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    # compile the numba kernels once, outside the timings (cached on disk afterwards)
    small = make_attention_trace(trace.attention[:1, :1, :8, :8], trace.correct[:8], scale=trace.scale,
                                 group=trace.group)
    kv_optimum(small, 2)

    print("| T | heads | budget | method | jobs | wall s | CPU s | retained | fraction | same optimum |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    ok = True
    for frac in (float(b) for b in args.budgets.split(",")):
        B = int(frac * T)
        new, wall, cpu = timed(lambda: kv_optimum(trace, B, prefill=args.prefill, jobs=args.jobs))
        assert new.bound == new.retained
        print(f"| {T} | {K} | {B} ({frac:.0%}) | assignment | {args.jobs} | {wall:.1f} | {cpu:.1f} | "
              f"{new.retained} | {new.fraction:.4f} | - |", flush=True)
        n_old = K if args.old_heads < 0 else min(args.old_heads, K)
        if n_old == 0:
            continue
        sub = make_attention_trace(trace.heads()[:n_old][None], trace.correct, scale=trace.scale,
                                   group=trace.group)
        old, wall, cpu = timed(lambda: kv_optimum(sub, B, prefill=args.prefill, method="flow", jobs=1))
        same = bool(np.array_equal(old.per_head, new.per_head[:n_old]))
        ok &= same
        label = f"{wall:.1f}" if n_old == K else f"{wall:.1f} on {n_old} heads (~{wall / n_old * K / args.jobs:.0f} " \
                                                 f"for {K} on {args.jobs} jobs)"
        print(f"| {T} | {n_old} | {B} ({frac:.0%}) | flow (reference) | 1 | {label} | {cpu:.1f} | "
              f"{old.retained} | {old.fraction:.4f} | {'yes' if same else 'NO'} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
