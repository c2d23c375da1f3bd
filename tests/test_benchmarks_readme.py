"""The benchmarks page stays a results page: short, one section per script, every link resolving,
every dated results file indexed, no tracker or session numbers.

``benchmarks/README.md`` shows the most recent table of each benchmark; the history lives in
``benchmarks/results/YYYY-MM-DD-<benchmark>-<what>.md``, listed in ``benchmarks/results/README.md``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"

#: a markdown link to a relative path (anchors and web addresses are not files)
LINK = re.compile(r"\]\((?!https?:)([^)#\s]+)(?:#[^)]*)?\)")
#: tracker and session numbers, which name nothing a reader of the page can open
INTERNAL = re.compile(r"(?i:\bissues?\s+#?\d+)|(?i:\bstop[\s-]+\d+\b)")
DATED = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*\.md$")


def _pages() -> list[Path]:
    return [BENCH / "README.md", *sorted(RESULTS.glob("*.md"))]


def test_benchmarks_readme_is_under_400_lines():
    assert len((BENCH / "README.md").read_text(encoding="utf-8").splitlines()) < 400


def test_every_benchmark_script_has_its_name_on_the_benchmarks_page():
    text = (BENCH / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(BENCH.glob("*.py")) if f"`{p.name}`" not in text]
    assert not missing, missing


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_the_benchmark_pages_resolves(page):
    broken = [t for t in LINK.findall(page.read_text(encoding="utf-8")) if not (page.parent / t).exists()]
    assert not broken, broken


def test_every_dated_results_file_is_listed_in_the_results_index():
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    dated = [p.name for p in sorted(RESULTS.glob("*.md")) if p.name != "README.md"]
    assert dated, "no dated results file"
    assert all(DATED.match(name) for name in dated), [n for n in dated if not DATED.match(n)]
    assert not [n for n in dated if f"]({n})" not in index]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_benchmark_pages_name_no_issue_or_stop_number(page):
    hits = [line.strip() for line in page.read_text(encoding="utf-8").splitlines() if INTERNAL.search(line)]
    assert not hits, hits


def test_the_internal_number_pattern_catches_issue_and_stop_numbers_only():
    for text in ("issue 7", "(issue 7, random layered n250)", "Stop 14", "the Stop-14 run", "stop 19"):
        assert INTERNAL.search(text), text
    for text in ("stops at 32440", "the search stops on its patience after 13-17 s", "stop_at", "range(stop)"):
        assert not INTERNAL.search(text), text
