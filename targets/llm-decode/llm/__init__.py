"""The llm-decode target's model package: a Qwen2 causal LM through transformers.

config.py (the model sizes), weights.py (synthetic weights), load.py (synthetic or published),
decode.py (the measured call and its reference), gate.py (the comparison), target.py and
target_tiny.py (the adapters goals files name), download.py (the published checkpoint).
"""
