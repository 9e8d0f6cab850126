"""Our model/ against upstream Wan 2.2 (`wan22` on PyPI, wan/modules/vae2_2.py, loaded by file
path so the heavy `wan` package never imports): same keys and shapes, strict load, and encode and
decode equal to fp32 rounding (max abs <= 1e-5) at full channel widths on a small clip."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

TOL = 1e-5


@pytest.fixture
def upstream(vae: torch.nn.Module):
    spec = importlib.util.find_spec("wan")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("wan22 not installed (pip install --no-deps wan22)")
    path = Path(spec.submodule_search_locations[0]) / "modules" / "vae2_2.py"
    mod_spec = importlib.util.spec_from_file_location("_upstream_vae2_2", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    with torch.device("meta"):
        model = mod.WanVAE_(dim=160, dec_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                            attn_scales=[], temperal_downsample=[False, True, True], dropout=0.0)
    # assign=True shares our tensors: no second copy of 700M parameters.
    model.load_state_dict(vae.state_dict(), strict=True, assign=True)
    model.eval().requires_grad_(False)
    mean, std = vae.latent_mean, vae.latent_std
    return model, [mean, 1.0 / std]


def test_state_dict_keys_and_shapes(vae: torch.nn.Module, upstream) -> None:
    ours = {k: tuple(v.shape) for k, v in vae.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in upstream[0].state_dict().items()}
    assert ours == theirs


def test_decode_matches_upstream(vae: torch.nn.Module, upstream) -> None:
    model, scale = upstream
    z = torch.randn(1, 48, 2, 2, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = model.decode(z.clone(), scale).float().clamp(-1, 1)
    ours = vae.decode(z.clone())
    assert ours.shape == theirs.shape == (1, 3, 5, 32, 32)
    assert (ours - theirs).abs().max().item() <= TOL


def test_encode_matches_upstream(vae: torch.nn.Module, upstream) -> None:
    model, scale = upstream
    video = torch.rand(1, 3, 5, 32, 32, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        theirs = model.encode(video.clone(), scale).float()
    ours = vae.encode(video.clone())
    assert ours.shape == theirs.shape == (1, 48, 2, 2, 2)
    assert (ours - theirs).abs().max().item() <= TOL
