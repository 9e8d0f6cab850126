"""The one exception for "refused, nothing recorded"."""


class Refused(Exception):
    """Nothing is recorded: frozen files changed, broken setup, bad arguments, a run in progress."""
