"""Fetch the published checkpoint into assets/ (needs the network and huggingface_hub).

Usage (from targets/llm-decode/):
    python -m llm.download [--repo Qwen/Qwen2.5-0.5B] [--revision REV]

Writes assets/Qwen2.5-0.5B/ (config.json, model.safetensors); from then on load_model uses it and
every record says `weights: published`. Delete the folder to go back to synthetic weights.
Make the assets (input pool, references) again afterwards: they are tied to the weights' id.
"""

from __future__ import annotations

import argparse
import sys

from .config import QWEN25_05B
from .load import check_architecture, checkpoint_sha256
from .target import CHECKPOINT_DIR


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=QWEN25_05B.hf_repo)
    ap.add_argument("--revision", default=None)
    args = ap.parse_args(argv)
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(args.repo, revision=args.revision, local_dir=CHECKPOINT_DIR,
                          allow_patterns=["config.json", "*.safetensors", "generation_config.json"])
        check_architecture(QWEN25_05B, CHECKPOINT_DIR)
    except Exception as e:  # noqa: BLE001 - offline, missing package, wrong repo: one line
        print(f"download failed: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    print(f"checkpoint: {CHECKPOINT_DIR}\nsha256: {checkpoint_sha256(CHECKPOINT_DIR)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
