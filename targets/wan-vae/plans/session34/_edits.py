"""What the candidate makers beside it share: text replacements on a candidate file, each asserted to
occur exactly once, so that a maker written for one optimize.py fails loudly on another."""

from pathlib import Path


def write_variant(source: str, dest: str, edits: list[tuple[str, str]]) -> None:
    """source's text with each (old, new) of edits replaced, written to dest."""
    text = Path(source).read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"expected once in {source}: {old[:70]!r}"
        text = text.replace(old, new)
    Path(dest).write_text(text)
