"""Claude Code's hooks (run as scripts by .claude/settings.json) and the standard-library modules
they share with the harness: policy.py (what the agent may do), nofollow.py (files the agent can
replace, read without following links), git_plumbing.py (the one way the harness calls git)."""
