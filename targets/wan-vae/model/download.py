"""Fetch the published Wan 2.2 VAE weights into assets/ (needs the network).

    python -m model.download
"""

from .weights import download_checkpoint


def main() -> None:
    try:
        path = download_checkpoint()
    except Exception as e:  # noqa: BLE001 - any failure is reported the same way
        raise SystemExit(f"download failed: {type(e).__name__}: {e}") from None
    print(f"weights: {path}")


if __name__ == "__main__":
    main()
