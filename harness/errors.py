"""The one exception for "refused, nothing recorded" (exit 2): broken setup, bad goals or arguments,
missing assets, frozen files changed, a run in progress. A candidate's failure is not one of these:
it is measured and recorded."""


class Refused(Exception):
    """Nothing is recorded; the message says why, in one line."""
