"""The shipped optimize.py's fast path, checked without a GPU.

- its decode on CPU (fp32 torch ops, the same chunking, history and fused-step logic as on CUDA)
  matches the frozen model over several passes, a short last pass included (on the VAE's
  architecture at narrow widths, tests/narrow_vae: no step of the fast path depends on the channel
  counts, and at full width its copy of the weights beside the frozen model's would take 5 GB);
- each Triton kernel matches its torch oracle (TRITON_INTERPRET=1 runs them on CPU tensors);
- the whole decode through the Triton kernels matches the torch path, and with the Winograd convs
  the frozen model.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from conftest import needs_triton, run_interpreted

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
# 5 latent frames: a first pass of 1 frame, then 3 and 1 with 3 frames a pass (so a history is
# carried between two passes after the first, where the time upsample's conv runs, and the last
# pass is short); not square, so a swapped height and width shows. One latent row: the stages
# after it are 2 to 16 rows high, and the Triton interpreter's cost grows with the pixels.
LATENT_SHAPE = (1, 48, 5, 1, 2)


def load_optimize():
    spec = importlib.util.spec_from_file_location("shipped_optimize", VAE / "optimize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("low_memory, shape", [(False, LATENT_SHAPE), (True, LATENT_SHAPE),
                                               (False, (1, 48, 4, 3, 2))])  # odd, portrait
def test_cpu_path_matches_frozen_model(narrow_vae: torch.nn.Module, low_memory: bool, shape: tuple) -> None:
    """The default and the low-memory setting (one latent frame a pass, 2-frame pieces), and a
    portrait latent of odd height."""
    vae = narrow_vae
    z = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    decode, info = load_optimize().build_decoder(vae, z, low_memory=low_memory)
    assert info["dtype"] == "float32" and info["low_memory"] is low_memory
    with torch.no_grad():
        want = vae.decode(z)
    got = decode(z)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert float((got - want).abs().max()) < 1e-4


@needs_triton
def test_kernels_match_torch_oracles() -> None:
    p = run_interpreted(str(REPO / "tests" / "_fast_kernels_check.py"), str(VAE / "optimize.py"))
    assert p.returncode == 0 and "all kernels match" in p.stdout, p.stdout + p.stderr[-2000:]
    shipped = ["norm_silu bias=True", "residual_sum (normalized)", "subpixel_merge ft=2 first=True (normalized)",
               "subpixel_merge (in line)", "subpixel_merge (repeat 16)", "winograd_conv 128 input channels",
               "frames_from_channels", "finish (head taps)", "residual_sum (normed only)",
               *(f"winograd_conv {case}{apart}" for apart in ("", " (history apart)") for case in (
                   "64x7x8x3 cap=1073741824 few=64 rows=512", "64x7x8x5 cap=1073741824 few=64 rows=12",
                   "128x5x7x5 cap=1073741824 few=64 rows=8", "128x5x7x2 cap=1073741824 few=0 rows=512",
                   "64x4x6x3 cap=1 few=64 rows=512", "64x4x6x3 cap=65536 few=64 rows=512")),
               *(f"subpixel_phase_conv {case}" for case in (
                   "3x6x9 cap=1073741824 few=0 rows=512", "3x6x9 cap=1073741824 few=64 rows=512",
                   "3x6x9 cap=1073741824 few=64 rows=4", "2x7x4 cap=1 few=64 rows=512",
                   "3x13x15 cap=1073741824 few=64 rows=512")),
               "subpixel weight made per call, torch.float32", "subpixel weight made per call, torch.float16",
               "subpixel weight in blocks of 50 output channels",
               "winograd weight in blocks of 50 output channels"]  # optimize.py's: none skipped
    assert all(f"{name}: ok" in p.stdout for name in shipped), p.stdout


@needs_triton
def test_decode_through_kernels_matches_torch_path() -> None:
    """A narrow model of the same architecture (decoder width 32, random init) keeps the
    interpreter fast; the kernels see the same code paths as at full width. fp32 at batch 2, and
    the bf16 the GPU runs."""
    code = f"""
import importlib.util, sys, torch
# Triton's interpreter without its repeated patching (tests/_interpreter_patch_once.py, by its location)
_patch = importlib.util.spec_from_file_location("_interpreter_patch_once", {str(REPO / "tests" / "_interpreter_patch_once.py")!r})
sys.modules[_patch.name] = importlib.util.module_from_spec(_patch)
_patch.loader.exec_module(sys.modules[_patch.name])
from harness import target
target.use("wan-vae")
from model import WanVAE
spec = importlib.util.spec_from_file_location("opt", {str(VAE / "optimize.py")!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
assert m._INTERPRET, "the kernels must run, not the torch fallbacks"
torch.manual_seed(0)
vae = WanVAE(dim=16, dec_dim=32).eval()
for name, p in vae.named_parameters():
    if name.endswith("gamma"):  # RMS-norm scales start at 1; make them matter
        p.data.uniform_(0.5, 1.5)
z = torch.randn(2, *{LATENT_SHAPE[1:]!r}, generator=torch.Generator().manual_seed(4))
want = vae.decode(z)
decode, _ = m.build_decoder(vae, z)
bf16 = m.FastDecoder(vae, torch.bfloat16, m.LATENT_FRAMES_PER_PASS)(z[:1])
kernels = decode(z)
# The Winograd convs where this narrow model is widest (128 channels; at full width, 1024), on
# 4 latent frames, 2 a pass. The latent-resolution layers (the front) run once over all 4 frames,
# zero history in front (6 frames in). Then the passes from up stage 0's upsampling on: a first pass of
# one latent frame (2D convs, no Winograd), then passes of 2 and 1 latent frames whose Winograd convs,
# after the time upsampling, take 4 and 2 new frames and read their history where it is kept (the
# last two of a kept 4-frame input: WHOLE_HISTORY_FRAMES). The interpreter's cost
# is per program: one program across the 128 channels (the shipped blocks' 64 run in
# _fast_kernels_check's winograd_conv cases) and one for all of a call's output tiles.
# Their U is kept: the U the kernel makes from the fp32 weights at each call, as the 1024-channel
# convs' is at full width, is compared with the kept one in _fast_kernels_check (the interpreter
# takes ~10 s to make one here).
m.WINOGRAD_BLOCKS = {{"input": (8, 128, 4), "output": (32, 128, 4)}}
winograd = m.FastDecoder(vae, torch.float32, 2, winograd_min_channels=128)
assert len(winograd.winograd) == 16, sorted(winograd.winograd)
assert len(winograd.subpixel) == 2, sorted(winograd.subpixel)  # the 128-channel upsamplings: F(7x7, 2x2)
calls = []
conv = m.winograd_conv
m.winograd_conv = lambda buf, u, s, history=None, phases=False: calls.append((buf.shape[2], history is not None, phases)) or conv(buf, u, s, history, phases=phases)
zw = z[:1, :, :4]
winograd = winograd(zw)
# The front's causal convs: the whole clip, its zero history in front. The passes' causal convs: new
# frames only, the history read apart. The upsamplings' phase convs go through the same name (what a
# split decode wraps): 1 frame in the first pass, then each stage's doubled frames.
assert sorted(set(calls)) == [(1, False, True), (2, False, True), (2, True, False), (4, False, True),
                              (4, True, False), (6, False, False), (8, False, True)], calls
want_w = vae.decode(zw)
m._INTERPRET = False  # the same decoder, torch ops instead of the kernels
torch_path = decode(z)
print("kernels vs torch path", float((kernels - torch_path).abs().max()))
print("kernels vs frozen model", float((kernels - want).abs().max()))
print("winograd kernels vs frozen model", float((winograd - want_w).abs().max()))
print("bf16 kernels psnr", float(10 * torch.log10(4 / ((bf16 - want[:1]) ** 2).mean())))
"""
    p = run_interpreted("-P", "-c", code)  # -P: the working folder (the root) off sys.path
    assert p.returncode == 0, p.stderr[-3000:]
    got = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in p.stdout.splitlines()}
    assert got["kernels vs torch path"] < 1e-4 and got["kernels vs frozen model"] < 1e-4, p.stdout
    assert got["winograd kernels vs frozen model"] < 1e-4, p.stdout
    assert got["bf16 kernels psnr"] > 45.0, p.stdout  # the gate's bar; bf16 eager scores ~51 dB


@needs_triton
def test_forked_compiles_record_compile_and_reap_each_kernel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ForkedCompiles (e078: warm-up 11.8 -> 7.4 s on an H100), whose real run only a GPU has: its
    dry-run hook skips every launch and forks one child per kernel and specialization, however often
    the kernel runs (two kernels of one signature share Triton's key: each gets its child, session 26's
    lost 3.9 s); the child compiles that specialization and its launcher with the hook off and
    the device index it was handed (a forked child must not ask the GPU), then exits; the real
    call's hook waits for exactly that kernel's child, and finish() reaps the rest and takes the
    hook out. Triton's driver and kernels are stand-ins that write what the child did to a file."""
    from types import SimpleNamespace

    m = load_optimize()
    knobs = m.triton.knobs.runtime
    monkeypatch.setattr(knobs, "jit_cache_hook", None)

    class Driver:
        def launcher_cls(self, src: str, metadata: str) -> None:
            with open(tmp_path / src, "a") as f:
                f.write(f" launcher:{metadata}")

    class Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

        def preload(self, spec: str) -> SimpleNamespace:
            done = f"{self.name}-{spec}"
            (tmp_path / done).write_text(f"device:{m.triton.runtime.driver.active.get_current_device()} "
                                         f"hook:{knobs.jit_cache_hook}")
            return SimpleNamespace(src=done, metadata="meta-" + spec)

    monkeypatch.setattr(m.triton.runtime.driver, "_active", Driver())
    compiles = m.ForkedCompiles(torch.device("cuda", 3))
    kernels = {name: SimpleNamespace(name=name, jit_function=Kernel(name)) for name in ("k", "twin")}

    def launch(key: str, kernel: str = "k") -> bool | None:  # what Triton's JIT does on a kernel's first launch
        return knobs.jit_cache_hook(key=key, fn=kernels[kernel], compile={"specialization_data": key}, repr="",
                                    is_manual_warmup=False, already_compiled=False)

    knobs.jit_cache_hook = compiles._fork  # what dry_run installs
    assert [launch(k) for k in ("a", "b", "a")] + [launch("a", "twin")] == [True] * 4  # every launch skipped
    assert sorted(compiles.children) == [("k", "a"), ("k", "b"), ("twin", "a")]  # a child each
    knobs.jit_cache_hook = compiles._wait  # what dry_run leaves for the real call
    assert launch("a") is None and sorted(compiles.children) == [("k", "b"), ("twin", "a")]  # a cache hit
    assert (tmp_path / "k-a").read_text() == "device:3 hook:None launcher:meta-a"  # k's child for a is done
    assert launch("a", "twin") is None and list(compiles.children) == [("k", "b")]
    assert (tmp_path / "twin-a").read_text() == "device:3 hook:None launcher:meta-a"
    compiles.finish()
    assert compiles.children == {} and knobs.jit_cache_hook is None
    assert (tmp_path / "k-b").read_text() == "device:3 hook:None launcher:meta-b"
