"""Make an existing Wan 2.2 pipeline decode through optimize.py's decoder, with one call.

Upstream Wan 2.2 (`wan22` package, `wan.modules.vae2_2.Wan2_2_VAE`):

    from integrations.wan_dropin import patch_wan22_vae
    patch_wan22_vae(pipeline.vae)          # e.g. WanTI2V(...).vae
    videos = pipeline.vae.decode([latent]) # same list API, same clamped [3, T, H, W] videos

diffusers (`AutoencoderKLWan` with the Wan 2.2 configuration, z_dim 48):

    from integrations.wan_dropin import patch_diffusers_wan
    patch_diffusers_wan(pipe.vae)          # pipe = WanPipeline.from_pretrained(".../Wan2.2-TI2V-5B-Diffusers")
    frames = pipe(prompt=...).frames       # decode now runs through optimize.py

Semantics kept: upstream's `decode(zs)` takes a list of normalized latents [48, T, h, w] and
returns a list of fp32 videos clamped to [-1, 1] (None for a non-list, as upstream does);
diffusers' `decode(z, return_dict=True)` takes the un-normalized latent (the pipeline applies
latents_mean/std first) and returns `DecoderOutput(sample=...)` or a 1-tuple, clamped, in the
latent's dtype. diffusers' tiling is not reproduced: the patched decode is always the full
streaming decode (the same numbers the untiled decode gives).

Our `model.WanVAE` is built from the pipeline's own weights, shared where they are fp32 on the
device already (copied to fp32 otherwise); optimize.py must not write them, and the first call
raises if it did. `optimize.build_decoder` runs lazily, once per latent shape and device.
On CUDA the first build switches the caching allocator of the whole process to expandable
segments (`optimize.use_expandable_segments`: without it the decode does not fit a 24 GB card);
later allocations of the pipeline's own use them too.
If the optimized path fails on CPU (a CUDA-only kernel, torch.compile without a compiler), the
frozen model's own decode is used instead and a warning is logged once. On CUDA failures raise.

Several GPUs of one host: give the patch (or OptimizedDecoder) a torch.distributed process group
and every rank's decode call runs together, the frame split across the ranks in space
(integrations/split_decode.py); the root's latent is decoded (group rank 0) and every rank gets the
whole video back (one broadcast), so a pipeline running on each rank carries on unchanged.

    dist.init_process_group("nccl")            # torchrun, one process a GPU
    patch_diffusers_wan(pipe.vae, group=dist.group.WORLD)

On GPUs each rank's decode is replayed from a CUDA graph that holds its NCCL exchanges, and
dist.destroy_process_group() or the interpreter's exit can then hang (pytorch/pytorch#115388;
scripts/dropin_group.py hung at its end on 2 H200s, session 24): end the process with os._exit
after a barrier, as scripts/multi_gpu.py does. Whether unpatch() first, which frees the graphs, avoids it: not measured.

Run `python -c 'import harness.target; harness.target.use("wan-vae"); import runpy; runpy.run_module("integrations.wan_dropin", run_name="__main__")'` for a self-check on a tiny latent (synthetic weights).
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from harness import _common, target

target.use(Path(__file__).resolve().parent.parent)  # this target's model package, by name (harness/target/)
from model import LATENT_MEAN, LATENT_STD, WanVAE  # noqa: E402

log = logging.getLogger("auto_optim.dropin")
_PATCH_ATTR = "_auto_optim_original_decode"
_warned_fallback = False

# ---------------------------------------------------------------------------------------------
# The decoder shared by both patches


def _build_our_vae(state: dict[str, Tensor], device: torch.device, **config: Any) -> WanVAE:
    """Our frozen WanVAE holding `state` in fp32. Tensors already fp32 on `device` are shared, not
    copied (a copy of the decoder's would cost 2.2 GB at full width); OptimizedDecoder checks that
    optimize.py never writes them."""
    with torch.device("meta"):
        vae = WanVAE(**config)
    ours = {key: value.detach().to(device=device, dtype=torch.float32) for key, value in state.items()}
    vae.load_state_dict(ours, strict=True, assign=True)
    vae.latent_mean = torch.tensor(LATENT_MEAN, device=device)
    vae.latent_std = torch.tensor(LATENT_STD, device=device)
    return vae.eval().requires_grad_(False)


def _versions(module: nn.Module) -> list[int]:
    """Every parameter's version counter: an in-place write (even under no_grad) bumps it."""
    return [p._version for p in module.parameters()]


class OptimizedDecoder:
    """Normalized latent [B, 48, T, h, w] -> video, as WanVAE.decode, through optimize.py.

    One forward_fn per (shape, device), built on first use; the frozen decode is the CPU fallback.
    """

    def __init__(self, vae: WanVAE, candidate: Path | None = None,
                 build: Callable[..., tuple[Callable[[Tensor], Tensor], dict]] | None = None,
                 low_memory: bool = False, group: Any = None) -> None:
        self.vae = vae
        self._group = group  # a torch.distributed process group: decode split across its ranks
        # build_decoder's setting for smaller cards (optimize.py's LOW_MEMORY); a candidate
        # without it raises TypeError on the first call.
        self._build_options = {"low_memory": True} if low_memory else {}
        self._candidate = candidate
        self._build = build
        self._fns: dict[tuple, Callable[[Tensor], Tensor]] = {}
        self.infos: dict[tuple, dict] = {}

    def _build_fn(self) -> Callable[..., tuple[Callable[[Tensor], Tensor], dict]]:
        if self._build is None:
            goals = _common.load_goals()
            path = self._candidate or _common.root() / goals["candidate"]
            self._build, _ = _common.load_candidate(Path(path), goals)
        return self._build

    def _move_to(self, device: torch.device) -> None:
        if next(self.vae.parameters()).device != device:
            self.vae.to(device)
            self._fns.clear()  # built for the old device

    def __call__(self, z: Tensor) -> Tensor:
        z = z.float()
        self._move_to(z.device)
        key = (tuple(z.shape), str(z.device))
        with torch.no_grad(), torch.autocast(z.device.type, enabled=False):
            fn = self._fns.get(key)
            if fn is not None:
                return fn(z)
            versions = _versions(self.vae)
            try:
                # A copy as the example: build_decoder may run warm-up calls on it.
                fn, info = (self._split_fn(z) if self._group is not None else
                            self._build_fn()(self.vae, z.clone(), **self._build_options))
                out = fn(z)
            except Exception as e:  # noqa: BLE001 - any failure of the optimized path
                if z.device.type != "cpu" or self._group is not None:  # a rank alone cannot fall back
                    raise
                _warn_fallback(e)
                fn, info = self.vae.decode, {"fallback": f"{type(e).__name__}: {e}"}
                out = fn(z)
            if _versions(self.vae) != versions:  # the weights may be the pipeline's own tensors
                raise RuntimeError("optimize.py wrote the VAE's weights in place (the pipeline's own "
                                   "tensors where they were fp32 already); reload the pipeline's VAE")
            self._fns[key], self.infos[key] = fn, info
            return out


    def _split_fn(self, z: Tensor) -> tuple[Callable[[Tensor], Tensor], dict]:
        """forward_fn split across self._group's ranks, the video broadcast from group rank 0."""
        import torch.distributed as dist

        from integrations.split_decode import build_split_decoder

        build, options, group = self._build_fn(), self._build_options, self._group
        split_fn, info = build_split_decoder(lambda vae, example: build(vae, example, **options), self.vae,
                                             z.clone(), group=group, namespace=build.__globals__,
                                             replay=not options.get("low_memory", False))

        def on_every_rank(latent: Tensor) -> Tensor:
            video = split_fn(latent)
            if video is None:  # not the root: room for the root's video
                b, _, t, h, w = latent.shape
                video = torch.empty(b, 3, 1 + 4 * (t - 1), 16 * h, 16 * w, device=latent.device)
            dist.broadcast(video, dist.get_global_rank(group, 0), group=group)
            return video

        return on_every_rank, info


def _warn_fallback(error: Exception) -> None:
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        log.warning("optimize.py's decoder failed on CPU (%s: %s); using the frozen model's "
                    "fp32 decode instead", type(error).__name__, error)


# ---------------------------------------------------------------------------------------------
# (a) upstream wan22: Wan2_2_VAE


def patch_wan22_vae(wan_vae: Any, candidate: Path | None = None, low_memory: bool = False, group: Any = None) -> Any:
    """Replace `wan_vae.decode` (a `Wan2_2_VAE`) with the optimized decoder; returns `wan_vae`.
    low_memory=True: optimize.py's setting for smaller cards (slower; README gives both figures).
    group: a process group whose ranks decode together, the frame split across them.

    Calling it again is a no-op; `unpatch(wan_vae)` restores the original method.
    """
    if hasattr(wan_vae, _PATCH_ATTR):
        return wan_vae
    model: nn.Module = wan_vae.model
    device = next(model.parameters()).device
    config = dict(
        dim=model.dim, z_dim=model.z_dim, dim_mult=tuple(model.dim_mult),
        num_res_blocks=model.num_res_blocks, temporal_downsample=tuple(model.temperal_downsample),
        # upstream keeps no dec_dim attribute; the decoder's first conv has dec_dim * dim_mult[-1] outputs
        dec_dim=model.decoder.conv1.out_channels // model.dim_mult[-1],
    )
    if model.z_dim != len(LATENT_MEAN):
        raise ValueError(f"not a Wan 2.2 VAE: z_dim {model.z_dim} != {len(LATENT_MEAN)}")
    decoder = OptimizedDecoder(_build_our_vae(model.state_dict(), device, **config), candidate,
                               low_memory=low_memory, group=group)

    def decode(zs: Any) -> list[Tensor] | None:
        if not isinstance(zs, list):
            logging.info("zs should be a list")  # upstream logs this and returns None
            return None
        return [decoder(u.unsqueeze(0)).float().clamp_(-1, 1).squeeze(0) for u in zs]

    setattr(wan_vae, _PATCH_ATTR, wan_vae.decode)
    wan_vae.decode = decode
    wan_vae.optimized_decoder = decoder
    return wan_vae


# ---------------------------------------------------------------------------------------------
# (b) diffusers: AutoencoderKLWan

# diffusers name -> our name, applied in order to every key (block-relative parts first).
_RENAMES: list[tuple[str, str]] = [
    (r"^quant_conv\.", "conv1."),
    (r"^post_quant_conv\.", "conv2."),
    (r"\.norm_out\.", ".head.0."),
    (r"\.conv_out\.", ".head.2."),
    (r"\.mid_block\.resnets\.0\.", ".middle.0."),
    (r"\.mid_block\.attentions\.0\.", ".middle.1."),
    (r"\.mid_block\.resnets\.1\.", ".middle.2."),
    (r"\.down_blocks\.(\d+)\.resnets\.(\d+)\.", r".downsamples.\1.downsamples.\2."),
    (r"\.up_blocks\.(\d+)\.resnets\.(\d+)\.", r".upsamples.\1.upsamples.\2."),
    (r"\.norm1\.", ".residual.0."),
    (r"\.conv1\.(weight|bias)$", r".residual.2.\1"),
    (r"\.norm2\.", ".residual.3."),
    (r"\.conv2\.(weight|bias)$", r".residual.6.\1"),
    (r"\.conv_shortcut\.", ".shortcut."),
]
# The resampler follows the resnets of its block in our Sequential: its index is their count.
_SAMPLER = re.compile(r"\.(down|up)_blocks\.(\d+)\.(down|up)sampler\.")


def diffusers_to_ours(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Rename a diffusers AutoencoderKLWan (Wan 2.2) state dict to ours; tensors are not copied."""
    resnets: dict[tuple[str, str], int] = {}
    for key in state:
        m = re.search(r"\.(down|up)_blocks\.(\d+)\.resnets\.(\d+)\.", key)
        if m:
            block = (m.group(1), m.group(2))
            resnets[block] = max(resnets.get(block, 0), int(m.group(3)) + 1)
    out = {}
    for key, value in state.items():
        name = key
        m = _SAMPLER.search(name)
        if m:
            kind, block = m.group(1), m.group(2)
            name = name.replace(m.group(0), f".{kind}samples.{block}.{kind}samples.{resnets[(kind, block)]}.")
        else:
            # encoder.conv1 / decoder.conv1 of ours must not be re-read as a resnet conv1
            top = re.match(r"^(encoder|decoder)\.conv_in\.", name)
            if top:
                name = name.replace(".conv_in.", ".conv1.")
            else:
                for pattern, repl in _RENAMES:
                    name = re.sub(pattern, repl, name)
        out[name] = value
    return out


def check_mapping(state: dict[str, Tensor], **config: Any) -> None:
    """Raise ValueError unless the mapped keys and shapes are exactly those of our WanVAE."""
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in WanVAE(**config).state_dict().items()}
    got = {k: tuple(v.shape) for k, v in diffusers_to_ours(state).items()}
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    bad = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    if missing or extra or bad:
        raise ValueError(f"diffusers -> ours key mapping mismatch: missing {missing[:3]}, "
                         f"unexpected {extra[:3]}, shape differs {bad[:3]}")


def diffusers_config_to_ours(config: Any) -> dict[str, Any]:
    """Our WanVAE arguments for a diffusers AutoencoderKLWan config; ValueError if not Wan 2.2."""
    wan22 = {"is_residual": True, "patch_size": 2, "in_channels": 12, "out_channels": 12,
             "z_dim": len(LATENT_MEAN)}
    wrong = {k: config.get(k) for k, v in wan22.items() if config.get(k) != v}
    if wrong:
        raise ValueError(f"not a Wan 2.2 VAE config (need {wan22}); got {wrong}")
    return dict(dim=config["base_dim"], dec_dim=config.get("decoder_base_dim") or config["base_dim"],
                z_dim=config["z_dim"], dim_mult=tuple(config["dim_mult"]),
                num_res_blocks=config["num_res_blocks"],
                temporal_downsample=tuple(config["temperal_downsample"]))


def patch_diffusers_wan(autoencoder: Any, candidate: Path | None = None, low_memory: bool = False,
                        group: Any = None) -> Any:
    """Replace `autoencoder.decode` (an AutoencoderKLWan, Wan 2.2 config) with the optimized
    decoder; returns `autoencoder`. Calling it again is a no-op; `unpatch` restores it.
    low_memory=True: optimize.py's setting for smaller cards (slower; README gives both figures).
    group: a process group whose ranks decode together, the frame split across them."""
    if hasattr(autoencoder, _PATCH_ATTR):
        return autoencoder
    from diffusers.models.autoencoders.vae import DecoderOutput  # lazy: diffusers is optional

    config = diffusers_config_to_ours(autoencoder.config)
    state = autoencoder.state_dict()
    check_mapping(state, **config)
    device = next(autoencoder.parameters()).device
    decoder = OptimizedDecoder(_build_our_vae(diffusers_to_ours(state), device, **config), candidate,
                               low_memory=low_memory, group=group)

    def decode(z: Tensor, return_dict: bool = True) -> Any:
        vae = decoder.vae
        shape = (1, -1, 1, 1, 1)
        mean = vae.latent_mean.to(z.device).view(shape)
        std = vae.latent_std.to(z.device).view(shape)
        # diffusers decodes the raw latent; our decode un-normalizes first, so normalize here.
        video = decoder((z.float() - mean) / std).clamp_(-1, 1).to(z.dtype)  # in place: no second video
        return DecoderOutput(sample=video) if return_dict else (video,)

    setattr(autoencoder, _PATCH_ATTR, autoencoder.decode)
    autoencoder.decode = decode
    autoencoder.optimized_decoder = decoder
    return autoencoder


def unpatch(obj: Any) -> Any:
    """Undo patch_wan22_vae / patch_diffusers_wan (frees our copy of the weights)."""
    original = obj.__dict__.pop(_PATCH_ATTR, None)
    if original is not None:
        del obj.decode  # the instance attribute; the class method shows through again
        obj.__dict__.pop("optimized_decoder", None)
    return obj


def main() -> int:
    """Self-check: the optimized decoder against the frozen decode on a tiny latent."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from model import load_vae

    vae = load_vae("synthetic")
    z = torch.randn(1, 48, 3, 2, 2, generator=torch.Generator().manual_seed(0))
    ours = OptimizedDecoder(vae)(z)
    diff = float((ours - vae.decode(z)).abs().max())
    print(f"max_abs_vs_frozen: {diff:.3e}")
    return 0 if diff <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main())
