"""What ships must not send the reader to what does not: no internal design file, no issue or
stop number, no path into the developers' shared data folder.

The user docs (``docs/``), the proofs and every module of ``src/memopt`` are read as plain text.
``docs/formats.md`` and ``docs/api/`` are left out (kept by other work), and so is the README's
set-up paragraph, which tells a developer where the test data lives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: references to files or trackers that do not ship with memopt
INTERNAL = re.compile(
    r"DESIGN(?:\.md)?\s+\d"          # the internal design notes, "DESIGN 1.5", "DESIGN.md 1.6"
    r"|DESIGN\.md|DEVELOPERS\.md|ANCHORS\.md"   # upper case: ``docs/design.md`` ships
    r"|(?i:\bissues?\s+#?\d+)"       # "issue 7", "Issue #21"
    r"|(?i:\bstop\s+\d+\b)"          # "stop 19"
    r"|\.\./shared/"                 # the developers' data folder
)


def _shipped_texts() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "formats.md"]
    proofs = sorted((ROOT / "proofs").glob("*.md"))
    src = sorted((ROOT / "src" / "memopt").rglob("*.py"))
    return docs + proofs + src


def test_internal_reference_pattern_catches_each_kind_of_internal_reference():
    for text in ("DESIGN 1.5", "see DESIGN.md 1.6", "issue 7", "Issue #21", "stop 19",
                 "DEVELOPERS.md", "ANCHORS.md", "../shared/data/moe-routes"):
        assert INTERNAL.search(text), text
    for text in ("docs/design.md", "`docs/design.md`, tensor graph", "pytorch#192578", "eviction #39", "range(stop)", "stop = end",
                 "START:STOP:STEP", "the shared sweep machinery"):
        assert not INTERNAL.search(text), text


@pytest.mark.parametrize("path", _shipped_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_proofs_and_sources_name_no_internal_file_or_issue_number(path):
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if INTERNAL.search(line)]
    assert not hits, "\n".join(hits)


def test_readme_names_no_internal_design_file_or_issue_number():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    hits = [m.group(0) for m in INTERNAL.finditer(text) if not m.group(0).startswith("../shared/")]
    assert not hits, hits
