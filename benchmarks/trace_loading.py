"""Load speed of real traces: MoE routing logs against a plain json.loads loop, KV attention traces in JSON lines against .npz.

**Routes.** :func:`memopt.cache.load_routes` on the five Qwen1.5-MoE layer logs of
``../shared/data/moe-routes`` (``drop_warmup=True``: 87,140 requests) against a plain loop
``[json.loads(line) for line in file]`` over the same files, which reads and validates nothing.
Both run in the same process, alternately, ``--repeat`` times; the minimum of each is kept
(the machine is shared: compare the ratio). CPU seconds of the process are shown as well.

**Attention.** A synthetic ``memopt-attention`` trace shaped like SmolLM2's (``--tokens``
1,024 steps, ``--layers`` 30, 3 KV heads, group 3; as ``benchmarks/kv_optimum_speed.py``) is
written in the binary ``.npz`` form (``docs/formats.md``) and read back with
:func:`memopt.cache.load_attention`; ``--json`` also writes and reads the JSON-lines form.

Measured 2026-12-02 on the shared 2-core machine (load average 11-14, so wall times are
about 4x the CPU times): routes ``load_routes`` 2.27 s wall / 0.57 s CPU against the plain
loop's 3.27 s / 0.80 s (ratio 0.69 wall, 0.71 CPU; the line-by-line reader before the bulk
reading: 4.32 s / 1.23 s against 2.54 s / 0.72 s, ratio 1.70). Attention, T = 1,024, 30 layers:
``.npz`` 180 MiB, load 1.38 s wall / 0.40 s CPU; JSON lines 247 MiB, load 86.9 s wall / 23.3 s
CPU.

    python benchmarks/trace_loading.py
    python benchmarks/trace_loading.py --skip-attention --repeat 5
    python benchmarks/trace_loading.py --skip-routes --tokens 1024 --layers 30 --json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTES = os.path.join(HERE, "..", "..", "shared", "data", "moe-routes")


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def bench_routes(repeat: int) -> None:
    from memopt.cache import load_routes

    files = sorted(glob.glob(os.path.join(ROUTES, "qwen15moe_layer*.jsonl")))
    if not files:
        print(f"no Qwen route files in {ROUTES}", file=sys.stderr)
        return

    def plain():
        out = []
        for f in files:
            with open(f, encoding="utf-8") as fh:
                out.append([json.loads(line) for line in fh])
        return out

    best = {"load_routes": [1e9, 1e9], "plain json.loads loop": [1e9, 1e9]}
    n = 0
    for _ in range(repeat):
        tr, w, c = timed(lambda: load_routes(files, drop_warmup=True))
        n = tr.n_requests
        best["load_routes"] = [min(best["load_routes"][0], w), min(best["load_routes"][1], c)]
        _, w, c = timed(plain)
        best["plain json.loads loop"] = [min(best["plain json.loads loop"][0], w),
                                         min(best["plain json.loads loop"][1], c)]
    print(f"routes: {len(files)} Qwen files, {n} requests, min of {repeat}")
    for k, (w, c) in best.items():
        print(f"  {k:24s} wall {w:7.3f} s   cpu {c:7.3f} s")
    lw, lc = best["load_routes"]
    pw, pc = best["plain json.loads loop"]
    print(f"  ratio load_routes / plain: wall {lw / pw:.2f}, cpu {lc / pc:.2f}")


def bench_attention(tokens: int, layers: int, repeat: int, with_json: bool) -> None:
    sys.path.insert(0, HERE)
    from kv_optimum_speed import synthetic_trace

    from memopt.cache import dump_attention, load_attention

    tr = synthetic_trace(tokens, layers, 3)
    with tempfile.TemporaryDirectory() as tmp:
        forms = [("npz", os.path.join(tmp, "trace.npz"))]
        if with_json:
            forms.append(("json", os.path.join(tmp, "trace.jsonl")))
        for kind, path in forms:
            _, w_dump, _ = timed(lambda: dump_attention(tr, path))
            best_w = best_c = 1e9
            for _ in range(repeat):
                back, w, c = timed(lambda: load_attention(path))
                best_w, best_c = min(best_w, w), min(best_c, c)
            same = bool((back.attention == tr.attention).all())
            size = os.path.getsize(path) / 2**20
            print(f"attention {kind}: T={tokens}, {layers} layers x 3 KV heads, {size:.1f} MiB, "
                  f"write {w_dump:.2f} s, load min of {repeat}: wall {best_w:.3f} s, cpu {best_c:.3f} s, "
                  f"identical {same}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="also time the JSON-lines attention form")
    ap.add_argument("--skip-routes", action="store_true")
    ap.add_argument("--skip-attention", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_routes:
        bench_routes(args.repeat)
    if not args.skip_attention:
        bench_attention(args.tokens, args.layers, args.repeat, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
