"""A target's code, importable by name: `use("wan-vae")`, then `import model`, `from integrations ...`."""

from harness.target.finder import packages, use  # noqa: F401
