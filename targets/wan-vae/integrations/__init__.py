"""Ways to use the optimized decoder outside the harness (see wan_dropin.py)."""
