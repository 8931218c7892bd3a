"""Every link in the README and in docs/ leads somewhere: a relative link names a file or folder of the
repository, and a ``#fragment`` names a heading of its target (GitHub's heading anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def links(markdown: str) -> list[str]:
    without_code = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return LINK.findall(without_code)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    text = page.read_text()
    broken = []
    for target in links(text):
        if re.match(r"^[a-z]+:", target):  # https:, mailto: — outside the repository
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text()):
            broken.append(target)
    assert broken == [], f"{page.name}: links to nothing: {broken}"


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("# Title here\n[ok](#title-here) [bad](#nowhere) [gone](missing.md)\n")
    assert links(page.read_text()) == ["#title-here", "#nowhere", "missing.md"]
    assert "title-here" in anchors(page.read_text()) and "nowhere" not in anchors(page.read_text())
