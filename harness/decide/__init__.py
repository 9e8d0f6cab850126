"""Decisions over measured figures: the keep rule (keep, revert, inconclusive, rerun) and the floor and stop rule."""
