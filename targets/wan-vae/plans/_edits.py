"""What the candidate makers in the session folders share: text replacements on a candidate file, each
required to occur exactly once, so that a maker written for one optimize.py fails loudly on another.
A maker loads it by path: `runpy.run_path(<this file>)["write_variant"]`."""

from pathlib import Path


def write_variant(source: str, dest: str, edits: list[tuple[str, str]]) -> None:
    """source's text with each (old, new) of edits replaced, written to dest; a one-line error and exit 1
    where an old text is not there exactly once (nothing written)."""
    text = Path(source).read_text()
    for old, new in edits:
        if text.count(old) != 1:
            raise SystemExit(f"{source} does not hold this text exactly once: {old.strip().splitlines()[0][:70]!r}")
        text = text.replace(old, new)
    Path(dest).write_text(text)
