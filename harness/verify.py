"""The gate: does a candidate reproduce the frozen reference, honestly?

Usage:
    python harness/verify.py [--preset P] [--candidate FILE] [--device cpu|cuda] [--frames-out F.pt]

Exit 0 pass, 1 fail (the reason on one line), 2 broken setup (missing or stale assets, bad goals).
Importable: `check(candidate, preset=None, device=None) -> dict`.
--frames-out: after a pass, save the benchmark output's worst frame (lowest PSNR) beside the
reference's, for run_experiment's quality strip (needs the adapter's optional `frames`).

What a pass needs, in this order:
 1. assets: the input and the strict-fp32 reference, whose recorded hashes still match the input,
    the weights and the model code (else exit 2: re-run make_reference.py);
 2. a fresh input of the same shape from an unpredictable seed, its reference made NOW by the
    pristine model, before the candidate is imported (a candidate may monkeypatch torch or the
    model; that must not poison this reference);
 3. the candidate imported with the input and reference files made unreadable (FileGuard);
 4. decode the benchmark input (gate vs the reference), the fresh input (gate vs the fresh
    reference), the benchmark input again (must pass and match the first output): so no cached
    outputs, no ignored inputs, no state leaking between calls. Every output must have the right
    shape and dtype and be finite; the input must be unchanged after every call. On CUDA the
    output is cloned on the current stream right after the call, before any synchronize, so
    work left on a side stream without making the current stream wait is caught.
"""

from __future__ import annotations

import argparse
import os
import sys
import weakref
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

from harness import _common as C  # noqa: E402
from harness.make_reference import load_input, model_sha256  # noqa: E402

# Two decodes of the same input may differ by kernel nondeterminism (atomics, split-K), about a
# bf16 ulp; anything beyond this is state leaking between calls. Far below the gate's max-abs.
REPEAT_MAX_ABS = 1e-2

# Hashing the weights costs seconds; tests call check() many times with one pristine model.
_weights_sha: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()


class Fail(Exception):
    """The candidate failed the gate: exit 1 with this one-line reason."""


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:400]


def load_assets(goals: dict[str, Any], adapter: Any, preset: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Input and reference, checked against each other and the model code (SetupError if stale)."""
    x = load_input(preset, goals)
    asset = C.load_asset(C.reference_path(preset), "reference")
    ref = asset.get("output") if isinstance(asset, dict) else None
    if not isinstance(ref, torch.Tensor):
        raise C.SetupError(f"{C.reference_path(preset)} holds no 'output' tensor")
    meta = asset.get("meta") or {}
    rerun = "re-run harness/make_reference.py --force"
    if meta.get("input_sha256") != C.sha256_tensor(x):
        raise C.SetupError(f"reference was made from another input; {rerun}")
    if meta.get("model_sha256") != model_sha256(adapter):
        raise C.SetupError(f"model code changed since the reference was made; {rerun}")
    expected = list(adapter.output_shape(list(x.shape)))
    if list(ref.shape) != expected or ref.dtype != torch.float32:
        raise C.SetupError(f"reference is {ref.dtype} {list(ref.shape)}, expected float32 {expected}; {rerun}")
    return x, ref, meta


def _call(fn: Callable, x: torch.Tensor, device: str) -> torch.Tensor:
    """One candidate call. The clone is queued on the current stream before any synchronize."""
    try:
        out = fn(x)
        if not isinstance(out, torch.Tensor):
            raise Fail(f"output is {type(out).__name__}, not a tensor")
        snapshot = out.detach().clone()
        C.sync(device)
    except Fail:
        raise
    except Exception as e:  # noqa: BLE001 - any crash of the candidate is a failure
        raise Fail(f"candidate raised {_one_line(e)}") from None
    return snapshot.to("cpu")


def _gate(name: str, out: torch.Tensor, ref: torch.Tensor, gate: dict) -> dict[str, Any]:
    res = C.compare(out, ref, gate)
    if not res["passed"]:
        raise Fail(f"{name}: {res['reason']}")
    return res


def _unchanged(x: torch.Tensor, saved: torch.Tensor, when: str) -> None:
    if not torch.equal(x.detach().cpu(), saved):
        raise Fail(f"candidate modified its input during {when}")


def worst_frame(adapter: Any, out: torch.Tensor, ref: torch.Tensor, gate: dict) -> dict[str, Any] | None:
    """The frame where the output is furthest from the reference (both [3, H, W] fp32), with its
    index and PSNR (as the gate computes it); None when the adapter has no `frames`."""
    if not hasattr(adapter, "frames"):
        return None
    cand, refs = adapter.frames(out), adapter.frames(ref)
    # frame by frame in fp64: a whole 720p clip in fp64 would be several GB
    mse = torch.stack([((c.double() - r.double()) ** 2).mean() for c, r in zip(cand, refs)])
    i = int(mse.argmax())
    return {"index": i, "count": len(mse), "psnr_db": C.compare(cand[i], refs[i], gate)["psnr_db"],
            "reference": refs[i].float().clone(), "candidate": cand[i].float().clone()}


def check(candidate: Path | str | None = None, preset: str | None = None, device: str | None = None,
          *, model: torch.nn.Module | None = None, frames_out: Path | None = None) -> dict[str, Any]:
    """Verify a candidate; returns the facts (passed, reason, psnr_db, ...). Raises SetupError.

    `model`: an already loaded pristine model (tests reuse one). The candidate builds on the same
    object: the pristine model is not needed after the fresh reference is made, and a copy would
    cost the model's memory again. The caller must not reuse it after a candidate that mutates it.
    """
    goals = C.load_goals()
    adapter = C.load_adapter(goals)
    device = device or C.default_device()
    preset = C.pick_preset(goals, preset, device)
    candidate = Path(candidate) if candidate else C.root() / goals["candidate"]
    gate = goals["gate"]
    facts: dict[str, Any] = {
        "passed": False, "reason": "", "psnr_db": None, "max_abs": None, "fresh_psnr_db": None,
        "fresh_max_abs": None, "repeat_max_abs": None, "preset": preset, "device": device,
        "gpu": C.env_info(device)["gpu"], "weights_kind": adapter.weights_kind(),
        "candidate": str(candidate), "info": None,
    }
    if not candidate.is_file():
        raise C.SetupError(f"candidate file not found: {candidate}")

    # 1. assets and the pristine model. A guard armed by an earlier check() in this process
    # still blocks the assets; no candidate code runs now, so lift it until step 3.
    guarded = (C.input_path(preset), C.reference_path(preset))
    C.FileGuard.get().blocked.difference_update(os.path.realpath(p) for p in guarded)
    x_cpu, ref, meta = load_assets(goals, adapter, preset)
    if model is None:
        model = adapter.load_model(device)
    if model not in _weights_sha:
        _weights_sha[model] = adapter.weights_sha256(model)
    if meta.get("weights_sha256") != _weights_sha[model]:
        raise C.SetupError("weights changed since the reference was made; re-run harness/make_reference.py --force")

    # 2. the fresh input and its reference, before the candidate exists in this process
    seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    fresh = adapter.make_input(list(x_cpu.shape), seed, device).to(device, torch.float32)
    with torch.no_grad():
        fresh_ref = adapter.reference(model, fresh.clone()).detach().to("cpu", torch.float32)
    C.sync(device)

    # 3. guard the asset files, import and build the candidate
    C.FileGuard.get().block(*guarded)
    x = x_cpu.to(device)
    x_saved, fresh_saved = x_cpu.clone(), fresh.detach().cpu().clone()
    try:
        try:
            build, facts["candidate_sha"] = C.load_candidate(candidate, goals)
            fn, info = build(model, x.clone())
            facts["info"] = info
        except C.SetupError:
            raise
        except Exception as e:  # noqa: BLE001
            raise Fail(f"candidate build raised {_one_line(e)}") from None
        _unchanged(x, x_saved, "build")

        # 4. benchmark input, fresh input, benchmark input again
        first = _call(fn, x, device)
        _unchanged(x, x_saved, "the benchmark decode")
        res = _gate("benchmark input", first, ref, gate)
        facts.update(psnr_db=res["psnr_db"], max_abs=res["max_abs"])

        out_fresh = _call(fn, fresh, device)
        _unchanged(fresh, fresh_saved, "the fresh decode")
        res = _gate("fresh input", out_fresh, fresh_ref, gate)
        facts.update(fresh_psnr_db=res["psnr_db"], fresh_max_abs=res["max_abs"])

        again = _call(fn, x, device)
        _unchanged(x, x_saved, "the repeated decode")
        _gate("benchmark input, second call", again, ref, gate)
        facts["repeat_max_abs"] = float((again.double() - first.double()).abs().max())
        if facts["repeat_max_abs"] > gate.get("repeat_max_abs", REPEAT_MAX_ABS):
            raise Fail(f"second decode of the benchmark input differs from the first by "
                       f"{facts['repeat_max_abs']:.4g} (state kept between calls?)")
        facts["passed"] = True
    except Fail as e:
        facts["reason"] = str(e)
    if facts["passed"] and frames_out is not None:
        save_worst_frame(adapter, first, ref, gate, Path(frames_out), facts)
    return facts


def save_worst_frame(adapter: Any, out: torch.Tensor, ref: torch.Tensor, gate: dict, path: Path,
                     facts: dict[str, Any]) -> None:
    """For the quality strip. A picture that cannot be made is reported in the facts; it never
    turns a passing candidate into a crash."""
    try:
        frame = worst_frame(adapter, out, ref, gate)
        if frame is not None:
            torch.save(frame, path)
            facts["worst_frame"] = {k: frame[k] for k in ("index", "count", "psnr_db")}
    except Exception as e:  # noqa: BLE001
        facts["worst_frame_error"] = _one_line(e)


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name from goals.json (default: full on CUDA, tiny on CPU)")
    ap.add_argument("--candidate", help="candidate file (default: goals['candidate'], optimize.py)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    ap.add_argument("--frames-out", type=Path, help="after a pass, save the worst frame and its reference here")
    args = ap.parse_args(argv)
    try:
        facts = check(args.candidate, args.preset, args.device, frames_out=args.frames_out)
    except C.SetupError as e:
        print(f"verify: setup error: {str(e).strip().splitlines()[0]}", file=sys.stderr)  # one line
        return 2
    verdict = "PASS" if facts["passed"] else f"FAIL: {facts['reason']}"
    C.emit([f"verify {facts['candidate']} on {facts['preset']} ({facts['gpu']}): {verdict}",
            f"benchmark input: PSNR {_fmt(facts['psnr_db'])} dB, max abs {_fmt(facts['max_abs'], '.3g')}; "
            f"fresh input: PSNR {_fmt(facts['fresh_psnr_db'])} dB, max abs {_fmt(facts['fresh_max_abs'], '.3g')}"],
           facts)
    return 0 if facts["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
