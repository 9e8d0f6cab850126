"""The command-line tools: `auto-optim` (person.py) and its verbs, the agent's door (`auto-optim-agent`), and the tools they run."""
