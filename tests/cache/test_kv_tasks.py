"""The generated question-answering tasks of ``benchmarks/kvpress_table.py`` (no model, no
kvpress): fixed by their seed, the expected answer in the context and determined by it, the
question about something the context states once, and the answer check whole-word."""

from __future__ import annotations

import importlib.util
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
