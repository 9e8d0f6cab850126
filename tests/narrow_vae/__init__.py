"""The Wan 2.2 VAE at narrow widths, as a target adapter (narrow_vae.target; see target.py)."""
