"""Probe (GPU): where optimize.py's first call goes (issue 11's target: 15 s; e027 took 16.0 s).
Not a harness row: it splits the first call so the next change to it can be predicted.

Each case runs in a fresh interpreter with its own empty Triton cache (as the harness's worker
does: harness/measure/session.py), builds optimize.py's decoder on the full preset's seeded latent and
times its first call, then a second one (the steady state):
  cold         as the harness runs it: Triton compiles every kernel, cudnn.benchmark searches;
  warm-triton  the same with the Triton cache the cold case left (no compiling);
  no-benchmark cold Triton cache, cudnn.benchmark off (no engine search, slower engines).
In the cold case, the seconds spent in Triton's compiler (summed over its compile() calls) and
the number of kernels compiled are counted too, and each compile is listed (kernel, constants,
seconds; with the candidate's compiles forked at build, the parent's are cache hits), with each
wait of the first call on a compile forked at build (the kernel whose child was still compiling). --limits N..
adds a warm-Triton case per value of cuDNN's benchmark_limit (the engines its search tries a conv):
what a shorter search saves on the first call, and what it costs the second.

    python scripts/probe_first_call.py [--candidate optimize.py] [--out FILE.md] [--limits 1 3] [--cases [warm-triton] [no-benchmark]]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_case(benchmark: bool, candidate: str, limit: int | None = None) -> dict[str, float]:
    """In this process: build the decoder and time its first two calls (limit: cuDNN's
    benchmark_limit, the engines its search tries a conv; None leaves torch's default)."""
    from harness import target
    target.use("wan-vae")  # the worked example's packages by name (harness/target/)
    import torch

    from harness import _common

    goals = _common.load_goals()
    adapter = _common.load_adapter(goals)
    shape = goals["presets"]["full"]["input_shape"]
    compiled = {"n": 0, "s": 0.0, "each": []}
    try:  # count Triton's compiles: its JIT binds triton.compiler.compile when a kernel first runs
        import triton.compiler
        import triton.compiler.compiler as tc

        real = tc.compile

        def counting(*args, **kwargs):
            t = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                src = args[0] if args else kwargs.get("src")
                fn = getattr(getattr(src, "fn", None), "__name__", "?")
                names = getattr(getattr(src, "fn", None), "arg_names", [])
                consts = {names[k[0]] if isinstance(k, tuple) and len(k) == 1 and k[0] < len(names) else k: v
                          for k, v in getattr(src, "constants", {}).items() if isinstance(v, (int, bool))}
                seconds = time.perf_counter() - t
                compiled["n"] += 1
                compiled["s"] += seconds
                compiled["each"].append([fn, str(consts), round(seconds, 2)])

        tc.compile = triton.compiler.compile = counting
    except ImportError:
        pass
    model = adapter.load_model("cuda")
    x = adapter.make_input(shape, 1, "cuda")
    from _probe import load_module

    mod = load_module(Path(candidate))
    waits: list[list] = []  # the first call's waits on a compile forked at build: kernel, seconds
    forked = getattr(mod, "ForkedCompiles", None)
    if forked is not None:
        real_wait = forked._wait

        def timed_wait(self, **kw):
            t = time.perf_counter()
            try:
                return real_wait(self, **kw)
            finally:
                seconds = time.perf_counter() - t
                if seconds > 0.01:
                    fn = kw.get("fn")  # Triton's JitFunctionInfo: module, name, jit_function
                    waits.append([getattr(fn, "name", None) or getattr(fn, "__name__", "?"), round(seconds, 2)])

        forked._wait = timed_wait
    t = time.perf_counter()
    decode, _ = mod.build_decoder(model, x)
    build = time.perf_counter() - t
    torch.backends.cudnn.benchmark = benchmark  # after build_decoder, which turns it on
    if limit is not None:
        torch.backends.cudnn.benchmark_limit = limit
    times = []
    for _ in range(2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        decode(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return {"build_s": build, "first_s": times[0], "second_s": times[1],
            "triton_compiles": compiled["n"], "triton_compile_s": compiled["s"], "each": compiled["each"],
            "waits": waits}


def run_case(benchmark: bool, cache: str, candidate: Path, limit: int | None = None) -> dict[str, float]:
    # -P keeps the project root off sys.path (harness/__init__.py refuses it); scripts/ for _probe
    path = os.pathsep.join(filter(None, [str(REPO / "scripts"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_CACHE_DIR": cache, "PYTHONPATH": path}
    code = ("import json, runpy; p = runpy.run_path('scripts/probe_first_call.py'); "
            f"print(json.dumps(p['one_case']({benchmark}, {str(candidate)!r}, {limit!r})))")
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidate", type=Path, default=REPO / "targets" / "wan-vae" / "optimize.py")
    p.add_argument("--out", type=Path)
    p.add_argument("--limits", type=int, nargs="*", default=[],
                   help="also warm-Triton cases with these cuDNN benchmark_limit values (torch's default: 10)")
    p.add_argument("--cases", nargs="*", default=["warm-triton", "no-benchmark"], choices=["warm-triton", "no-benchmark"],
                   help="the cases beside the cold one (default: both)")
    a = p.parse_args()
    import torch
    import triton

    cold, nobench = tempfile.mkdtemp(), tempfile.mkdtemp()
    cand = a.candidate.resolve()
    cases = {"cold": run_case(True, cold, cand)}  # first: it leaves the Triton cache warm-triton reads
    if "warm-triton" in a.cases:
        cases["warm-triton"] = run_case(True, cold, cand)
    if "no-benchmark" in a.cases:
        cases["no-benchmark"] = run_case(False, nobench, cand)
    for limit in a.limits:
        cases[f"warm-triton, benchmark_limit {limit}"] = run_case(True, cold, cand, limit)
    lines = [f"# {cand.name}'s first call, split ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"Triton {triton.__version__}, cuDNN {torch.backends.cudnn.version()}, full preset, synthetic weights)", "",
             "| case | build (s) | first call (s) | second call (s) | Triton compiles | in Triton's compiler (s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, c in cases.items():
        lines.append(f"| {name} | {c['build_s']:.2f} | {c['first_s']:.2f} | {c['second_s']:.3f} | "
                     f"{c['triton_compiles']} | {c['triton_compile_s']:.2f} |")
    lines += ["", "Each compile of the cold case (kernel, integer and flag constants, seconds):", ""]
    lines += [f"- {fn} {consts}: {sec:.2f} s" for fn, consts, sec in cases["cold"]["each"]]
    lines += ["", "The cold first call's waits on a kernel compiled in a child forked at build (over 10 ms; kernel, "
              "seconds, in the order waited):", ""]
    lines += [f"- {fn}: {sec:.2f} s" for fn, sec in cases["cold"]["waits"]] or ["- none"]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
