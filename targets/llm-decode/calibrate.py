"""Measure the gate's figures for the calibration candidates (and any others) on this machine.

Usage (from targets/llm-decode/):
    python calibrate.py [CANDIDATE ...] [--adapter llm.target] [--shape B R N] [--seeds 1 2 ...]
                        [--device cpu] [--scan-layers]
    CANDIDATE: default the three in calibration/; --scan-layers: also skip each layer in turn

For each candidate and input seed: max KL, mean KL, max abs logit difference and top-1
agreement against the strict-fp32 reference, and the verdict under goals.json's gate. This is
how the numbers in goals.json's gate rationale were made; run it again with the published
weights in assets/ to check the bounds against a trained model.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def load_candidate(path: Path):
    spec = importlib.util.spec_from_file_location(f"_cal_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_decoder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", default="llm.target")
    ap.add_argument("--shape", type=int, nargs=3, default=[1, 5, 16])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scan-layers", action="store_true", help="also skip each decoder layer in turn")
    calibration = [HERE / "calibration" / n for n in ("bf16_eager.py", "skip_layer.py", "int4_activations.py")]
    ap.add_argument("candidates", nargs="*", type=Path, default=calibration)
    args = ap.parse_args(argv)
    adapter = importlib.import_module(args.adapter)
    gate = json.loads((HERE / "goals.json").read_text())["gate"]
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is strict fp32
    model = adapter.load_model(args.device)
    inputs = {s: adapter.make_input(args.shape, s, args.device) for s in args.seeds}
    refs = {s: adapter.reference(model, x) for s, x in inputs.items()}
    pristine = {k: v.clone() for k, v in model.state_dict().items()}
    print(f"adapter {args.adapter} weights {adapter.weights_id()} shape {args.shape}")
    for path in args.candidates:
        model.float().load_state_dict(pristine)  # undo an in-place bf16 conversion exactly
        fn, _ = load_candidate(path)(model, inputs[args.seeds[0]])
        for s, x in inputs.items():
            r = adapter.compare(fn(x), refs[s], gate)
            print(f"{path.name:24s} seed {s}: max KL {r['max_kl']:.3g}  mean KL {r['mean_kl']:.3g}  "
                  f"max abs {r['max_abs']:.3g}  top-1 {r['top1_agree']:.3f}  "
                  f"{'pass' if r['passed'] else 'FAIL: ' + r['reason']}")
    if args.scan_layers:
        model.float().load_state_dict(pristine)
        for i, layer in enumerate(model.model.layers):
            handle = layer.register_forward_hook(_pass_input_through, with_kwargs=True)
            for s, x in inputs.items():
                r = adapter.compare(adapter.reference(model, x), refs[s], gate)
                print(f"skip layer {i:<13d} seed {s}: max KL {r['max_kl']:.3g}  max abs {r['max_abs']:.3g}  "
                      f"{'pass' if r['passed'] else 'FAIL'}")
            handle.remove()
    return 0


def _pass_input_through(module, args, kwargs, output):
    return args[0] if args else kwargs["hidden_states"]


if __name__ == "__main__":
    sys.exit(main())
