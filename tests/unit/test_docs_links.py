"""The README is a front page, and every link between the README, docs/ and examples/
lands: on a file that exists and, for an anchor, on a heading (or an ``<a id>``) of it,
named as GitHub names headings."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples/README.md"]
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
_ANCHOR = re.compile(r"<a (?:id|name)=\"([^\"]+)\"")


def prose(text: str) -> str:
    """``text`` without its code blocks."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens kept),
    spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = prose(page.read_text())
    found: set[str] = set(_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_every_link_between_the_pages_lands() -> None:
    broken = []
    for page in PAGES:
        text = _CODE.sub("", prose(page.read_text()))
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: ({target})"
            if not resolved.exists():
                broken.append(f"{where}: no file {path}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert broken == [], "\n".join(broken)


def test_the_readme_is_a_front_page_with_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    start = text.index("## Set up on a fresh machine")
    setup = text[start : text.index("\n## ", start + 1)]
    assert re.findall(r"```sh\n(.*?)```", setup, re.S) == ["scripts/demo\n", "scripts/test\n"]
    ci = (REPO / ".ci/run").read_text().splitlines()
    assert "scripts/test" in ci, "CI runs the README's test command"
    assert "docs/README.md" in text


def test_the_workflow_the_readme_explains_is_the_example() -> None:
    text = (REPO / "README.md").read_text()
    [shown] = re.findall(r"```yaml\n(.*?)```", text, re.S)
    example = (REPO / "examples/event-payout.yaml").read_text()
    assert shown in example, "the README's excerpt differs from examples/event-payout.yaml"
    assert yaml.safe_load(shown)["workflows"]["event-payout"]["steps"]
