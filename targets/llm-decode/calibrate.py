"""Measure the gate's figures for the calibration candidates (and any others) on this machine.

Usage (from targets/llm-decode/):
    python calibrate.py [CANDIDATE ...] [--adapter llm.target] [--shape B R N] [--seeds 1 2 ...]
                        [--device cpu] [--scan-layers]
    CANDIDATE: default the four in calibration/; --scan-layers: also skip each layer in turn
    --shape: default the full preset's (P 512, N 128)

Each candidate's call is checked as the harness checks it: against the frozen fp32 model's
logits along the call's own greedy path (the adapter's reference_for_output, strict fp32, on a
copy of the model the candidate never touches). For each candidate and input seed: max KL, mean
KL, max abs logit difference, top-1 agreement, the verdict under goals.json's gate, and where its
path leaves the fp32 model's own greedy path (the stored reference's; "same" when it never does).
The path's shape is printed once per seed: how many distinct tokens the fp32 model generates and
how often it repeats the token just fed. This is how the numbers in goals.json's gate rationale
were made; run it again with the published weights in assets/ to check the bounds against a
trained model.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

from llm.decode import path_of, prompt_of
from llm.gate import compare

from harness.target.loader import load_source

CALIBRATION = ("bf16_eager.py", "skip_layer.py", "int4_activations.py", "parallel_prefill.py")


def load_candidate(path: Path):
    return load_source(path, name=f"_cal_{path.stem}")


def leaves_at(out: torch.Tensor, own: torch.Tensor) -> str:
    """The first fed token (0-based, of N - 1) where out's path differs from the fp32 model's own."""
    diff = (path_of(out) != path_of(own)).any(0).nonzero()
    return "same" if diff.numel() == 0 else str(int(diff[0]))


def describe_path(x: torch.Tensor, own: torch.Tensor) -> str:
    toks = own.argmax(-1)[0]
    fed = torch.cat([prompt_of(x)[0, -1:], toks[:-1]])
    return (f"{len(set(toks.tolist()))} distinct tokens of {toks.numel()}, "
            f"{float((toks == fed).float().mean()):.0%} repeat the token fed")


def main(argv: list[str] | None = None) -> int:
    goals = json.loads((HERE / "goals.json").read_text())
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", default="llm.target")
    ap.add_argument("--shape", type=int, nargs=3, default=goals["presets"]["full"]["input_shape"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scan-layers", action="store_true", help="also skip each decoder layer in turn")
    ap.add_argument("candidates", nargs="*", type=Path, default=[HERE / "calibration" / n for n in CALIBRATION])
    args = ap.parse_args(argv)
    adapter = importlib.import_module(args.adapter)
    gate = goals["gate"]
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is strict fp32
    frozen = adapter.load_model(args.device)  # the checker's copy: never given to a candidate
    model = adapter.load_model(args.device)   # the candidates' copy, restored before each
    pristine = {k: v.clone() for k, v in model.state_dict().items()}
    inputs = {s: adapter.make_input(args.shape, s, args.device) for s in args.seeds}
    t0 = time.perf_counter()
    own = {s: adapter.reference(frozen, x) for s, x in inputs.items()}
    print(f"adapter {args.adapter} weights {adapter.weights_id()} shape {args.shape} device {args.device}; "
          f"fp32 greedy {(time.perf_counter() - t0) / len(inputs):.1f} s a call")
    for s, x in inputs.items():
        print(f"{'fp32 path':24s} seed {s}: {describe_path(x, own[s])}")

    def check(label: str, s: int, out: torch.Tensor, seconds: float) -> None:
        r = compare(out, adapter.reference_for_output(frozen, inputs[s], out), gate)
        print(f"{label:24s} seed {s}: max KL {r['max_kl']:.3g}  mean KL {r['mean_kl']:.3g}  "
              f"max abs {r['max_abs']:.3g}  top-1 {r['top1_agree']:.3f}  leaves fp32 path at {leaves_at(out, own[s])}  "
              f"{seconds:.1f} s  {'pass' if r['passed'] else 'FAIL: ' + r['reason']}", flush=True)

    for path in args.candidates:
        model.float().load_state_dict(pristine)  # undo an in-place bf16 conversion exactly
        fn, _ = load_candidate(path).build_decoder(model, inputs[args.seeds[0]])
        for s, x in inputs.items():
            t0 = time.perf_counter()
            out = fn(x)
            check(path.name, s, out, time.perf_counter() - t0)
    if args.scan_layers:
        skip = load_candidate(HERE / "calibration" / "skip_layer.py").skip
        model.float().load_state_dict(pristine)
        for i, layer in enumerate(model.model.layers):
            handle = layer.register_forward_hook(skip, with_kwargs=True)
            for s, x in inputs.items():
                t0 = time.perf_counter()
                out = adapter.reference(model, x)
                check(f"skip layer {i}", s, out, time.perf_counter() - t0)
            handle.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
