"""Drop-in parity: a patched Wan 2.2 VAE (upstream wan22, diffusers) decodes like the unpatched one.

The Wan 2.2 configuration at narrow widths (tests/narrow_vae: the decoder 32 channels wide at its
first stage, not 256) with seeded synthetic weights, the tiny latent size, CPU: the patches and
the key mapping do not depend on the channel counts, and at full width the upstream model, ours
and optimize.py's copy of the weights would hold 9 GB. The mapping at the full configuration (every
key and shape) is checked on the meta device below. Patched outputs must pass the goals.json gate
against the unpatched ones, and match to 1e-4 when optimize.py runs in fp32 (as it does on CPU).
"""

from __future__ import annotations

import importlib.util
import logging
import types

import pytest
import torch

from harness import _common
from integrations import wan_dropin
from model import LATENT_MEAN, LATENT_STD, WanVAE
from model.weights import synthetic_state_dict
from narrow_vae.target import DIMS

FP32_TOL = 1e-4
TINY = (1, 48, 3, 2, 2)


@pytest.fixture(scope="module")
def state(narrow_vae) -> dict[str, torch.Tensor]:
    """The session's narrow model's weights, shared (not copied, never written) by every model below."""
    return narrow_vae.state_dict()


@pytest.fixture(scope="module")
def latent() -> torch.Tensor:
    return torch.randn(*TINY, generator=torch.Generator().manual_seed(7))


def _stats() -> tuple[torch.Tensor, torch.Tensor]:
    shape = (1, -1, 1, 1, 1)
    return torch.tensor(LATENT_MEAN).view(shape), torch.tensor(LATENT_STD).view(shape)


def _check(out: torch.Tensor, ref: torch.Tensor, decoder: wan_dropin.OptimizedDecoder) -> None:
    goals = _common.load_goals()
    facts = _common.load_adapter(goals).compare(out, ref, goals["gate"])  # the VAE's own gate
    assert facts["passed"], facts["reason"]
    if all(info.get("dtype") == "float32" for info in decoder.infos.values()):
        assert facts["max_abs"] <= FP32_TOL, facts


def _load_upstream_vae2_2() -> types.ModuleType:
    """wan/modules/vae2_2.py by path: `import wan` pulls the whole pipeline's dependencies."""
    spec = importlib.util.find_spec("wan")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("wan22 (upstream Wan 2.2) is not installed: pip install wan22 --no-deps")
    path = f"{spec.submodule_search_locations[0]}/modules/vae2_2.py"
    file_spec = importlib.util.spec_from_file_location("_upstream_wan_vae2_2", path)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def test_wan22_patch_matches_upstream(state, latent, monkeypatch):
    upstream = _load_upstream_vae2_2()

    def from_state(pretrained_path=None, **kwargs):  # stands in for loading Wan2.2_VAE.pth
        config = {"num_res_blocks": 2, "attn_scales": [], "dropout": 0.0, **kwargs, "dec_dim": DIMS["dec_dim"]}
        with torch.device("meta"):
            model = upstream.WanVAE_(**config)
        model.load_state_dict(state, assign=True)
        return model

    monkeypatch.setattr(upstream, "_video_vae", from_state)
    wan_vae = upstream.Wan2_2_VAE(c_dim=DIMS["dim"], device="cpu")
    zs = [latent[0], latent[0, :, :2, :1, :1] * 0.5]  # two videos of different sizes
    expected = wan_vae.decode(zs)

    wan_dropin.patch_wan22_vae(wan_vae)
    assert wan_dropin.patch_wan22_vae(wan_vae) is wan_vae  # idempotent
    got = wan_vae.decode(zs)
    assert isinstance(got, list) and len(got) == 2
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype == torch.float32
        _check(g, e, wan_vae.optimized_decoder)
    assert wan_vae.decode(latent[0]) is None  # upstream's answer to a non-list
    wan_dropin.unpatch(wan_vae)
    assert "decode" not in wan_vae.__dict__


def _diffusers_wan22(state: dict[str, torch.Tensor]):
    diffusers = pytest.importorskip("diffusers", reason="diffusers is not installed")
    with torch.device("meta"):
        vae = diffusers.AutoencoderKLWan(
            base_dim=DIMS["dim"], decoder_base_dim=DIMS["dec_dim"], z_dim=48, is_residual=True, patch_size=2,
            in_channels=12, out_channels=12, scale_factor_temporal=4, scale_factor_spatial=16,
            latents_mean=list(LATENT_MEAN), latents_std=list(LATENT_STD))
    # ours -> diffusers through the mapping under test: rename diffusers' own key names to ours.
    ours_name = wan_dropin.diffusers_to_ours({k: k for k in vae.state_dict()})
    vae.load_state_dict({d_name: state[o_name] for o_name, d_name in ours_name.items()},
                        strict=True, assign=True)
    return vae.eval()


def test_diffusers_mapping_is_a_bijection_onto_our_keys():
    """Every diffusers key maps to a distinct key of ours with the same shape (on meta: free)."""
    diffusers = pytest.importorskip("diffusers", reason="diffusers is not installed")
    with torch.device("meta"):
        vae = diffusers.AutoencoderKLWan(
            base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True, patch_size=2,
            in_channels=12, out_channels=12, scale_factor_temporal=4, scale_factor_spatial=16)
    config = wan_dropin.diffusers_config_to_ours(vae.config)
    wan_dropin.check_mapping(vae.state_dict(), **config)
    names = wan_dropin.diffusers_to_ours({k: k for k in vae.state_dict()})
    assert len(set(names.values())) == len(names) == len(vae.state_dict())


def test_diffusers_patch_matches_unpatched(state, latent):
    """Random weights loaded into diffusers through the mapping, then mapped back by the patch:
    the patched decode equals diffusers' own."""
    vae = _diffusers_wan22(state)
    mean, std = _stats()
    raw = latent * std + mean  # what a diffusers pipeline hands to vae.decode
    with torch.no_grad():
        expected = vae.decode(raw).sample

    wan_dropin.patch_diffusers_wan(vae)
    out = vae.decode(raw)
    assert type(out).__name__ == "DecoderOutput"
    assert out.sample.shape == expected.shape and out.sample.dtype == expected.dtype
    _check(out.sample, expected, vae.optimized_decoder)
    as_tuple = vae.decode(raw, return_dict=False)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.sample)
    wan_dropin.unpatch(vae)


def test_weights_are_shared_and_a_decoder_that_writes_them_is_refused(state, latent):
    """The patch holds no second copy of fp32 weights (2.2 GB at full width), so optimize.py must
    not write them: the pipeline's own tensors would change. An in-place write is refused."""
    vae = wan_dropin.patch_diffusers_wan(_diffusers_wan22(state))
    ours = vae.optimized_decoder.vae
    assert ours.decoder.conv1.weight.data_ptr() == vae.decoder.conv_in.weight.data_ptr()

    def writes_in_place(model, example):
        with torch.no_grad():
            model.decoder.conv1.weight.mul_(1.0)  # same values: the state fixture stays as it was
        return model.decode, {}

    with pytest.raises(RuntimeError, match="in place"):
        wan_dropin.OptimizedDecoder(ours, build=writes_in_place)(latent)
    wan_dropin.unpatch(vae)


def test_diffusers_config_must_be_wan22():
    with pytest.raises(ValueError, match="not a Wan 2.2"):
        wan_dropin.diffusers_config_to_ours({"is_residual": False, "patch_size": None,
                                             "in_channels": 3, "out_channels": 3, "z_dim": 16})


def test_cpu_fallback_warns_once(caplog):
    """A decoder that cannot run on CPU falls back to the frozen decode and says so once."""
    with torch.device("meta"):
        small = WanVAE(dim=16, dec_dim=16)
    small.load_state_dict(synthetic_state_dict(small), assign=True)
    small.latent_mean, small.latent_std = torch.tensor(LATENT_MEAN), torch.tensor(LATENT_STD)
    small.eval()

    def needs_cuda(vae, example):
        raise RuntimeError("this decoder needs CUDA")

    monkey = wan_dropin.OptimizedDecoder(small, build=needs_cuda)
    wan_dropin._warned_fallback = False
    z = torch.randn(1, 48, 2, 1, 1)
    with caplog.at_level(logging.WARNING, logger="auto_optim.dropin"):
        out = monkey(z)
        monkey(torch.randn(1, 48, 3, 1, 1))
    assert torch.equal(out, small.decode(z))
    assert sum("instead" in r.getMessage() for r in caplog.records) == 1
    assert all("fallback" in info for info in monkey.infos.values())
