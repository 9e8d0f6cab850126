"""A target: the adapter contract, its assets, loading its code and a candidate, and making its input and references."""

from harness.target.finder import packages, use  # noqa: F401
