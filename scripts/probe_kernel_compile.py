"""Probe (CPU is enough): how long Triton takes to compile one of optimize.py's Winograd transforms for a GPU
architecture, by stage, and which MLIR passes take the time. No GPU is needed: Triton's compiler and the
ptxas it ships run on the host, which is where a cold first call waits for them (scripts/probe_first_call.py
splits the first call on a GPU; this splits one kernel's compile).

    python scripts/probe_kernel_compile.py [--candidate optimize.py] [--kernel input|output|output7] [--arch 90]

Each compile starts from an empty Triton cache (a temporary folder, removed after). Printed: the whole
compile, each backend stage (ttir, ttgir, llir, ptx, cubin), and the MLIR passes of 0.1 s or more
(Triton's MLIR_ENABLE_TIMING, printed by the compiler to stderr and read back here). The blocks and warps
are the candidate's own (its WINOGRAD_BLOCKS).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIVISIBLE = [["tt.divisibility", 16]]
# The arguments of each transform as the decoder launches it at 720p (bf16 activations, fp16 V and M): the
# integer arguments optimize.py does not specialize are plain i32; C and CO divisible by 16; the pointers too.
# (kernel, signature, constants besides the blocks, the divisible arguments, its WINOGRAD_BLOCKS key)
KERNELS = {
    "input": ("_input_transform",
              {"d_ptr": "*bf16", "v_ptr": "*fp16", "tiles_w": "i32", "tiles": "i32", "H": "i32", "W": "i32",
               "TB": "i32", "V0": "i32", "C": "i32", "BLOCK_P": "constexpr", "BLOCK_C": "constexpr",
               "SIDE": "constexpr"},
              {"SIDE": 6}, (0, 1, 8), "input"),
    "output": ("_output_transform",
               {"m_ptr": "*fp16", "out_ptr": "*bf16", "tiles_w": "i32", "tiles": "i32", "rows_total": "i32",
                "H": "i32", "W": "i32", "inv_scale": "fp32", "CO": "i32", "BLOCK_P": "constexpr",
                "BLOCK_C": "constexpr"},
               {}, (0, 1, 8), "output"),
    "output7": ("_output_transform7",  # the sub-pixel upsampling's F(7x7, 2x2)
                {"m_ptr": "*fp16", "out_ptr": "*bf16", "tiles_w": "i32", "rows_total": "i32", "frames": "i32",
                 "H": "i32", "W": "i32", "inv_scale": "fp32", "CO": "i32", "BLOCK_P": "constexpr",
                 "BLOCK_C": "constexpr"},
                {}, (0, 1, 8), "output"),
}


def compile_once(candidate: Path, kernel: str, arch: int) -> None:
    """In this process (a child: MLIR's timing goes to its stderr): compile the kernel, timing each stage."""
    cache = tempfile.mkdtemp()
    os.environ["TRITON_CACHE_DIR"] = cache
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("candidate", candidate)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    name, signature, constants, divisible, blocks = KERNELS[kernel]
    tiles, channels, warps = module.WINOGRAD_BLOCKS[blocks]

    add_stages = CUDABackend.add_stages

    def timed_stages(self, stages, options, *rest):
        add_stages(self, stages, options, *rest)
        for stage, fn in list(stages.items()):
            def timed(src, metadata, fn=fn, stage=stage):
                t = time.perf_counter()
                out = fn(src, metadata)
                print(f"stage {stage} {time.perf_counter() - t:.3f}", flush=True)
                return out
            stages[stage] = timed

    CUDABackend.add_stages = timed_stages
    src = ASTSource(fn=getattr(module, name), signature=signature,
                    constexprs={**constants, "BLOCK_P": tiles, "BLOCK_C": channels},
                    attrs={(i,): DIVISIBLE for i in divisible})
    t = time.perf_counter()
    try:
        triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"total {time.perf_counter() - t:.3f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidate", type=Path, default=REPO / "targets" / "wan-vae" / "optimize.py")
    p.add_argument("--kernel", choices=sorted(KERNELS), default="input")
    p.add_argument("--arch", type=int, default=90, help="the CUDA compute capability, as 90 for sm_90 (H100, H200)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        compile_once(args.candidate.resolve(), args.kernel, args.arch)
        return 0
    # TRITON_DEFAULT_FP_FUSION=1: Triton 3.9's default, said out loud (it warns when unset).
    env = {**os.environ, "MLIR_ENABLE_TIMING": "1", "TRITON_DEFAULT_FP_FUSION": "1"}
    try:
        r = subprocess.run([sys.executable, __file__, "--child", "--candidate", str(args.candidate), "--kernel",
                            args.kernel, "--arch", str(args.arch)], capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        print("probe_kernel_compile: the compile took over 600 s", file=sys.stderr)
        return 1
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-15:])
        print(f"probe_kernel_compile: the compile failed:\n{tail}", file=sys.stderr)
        return 1
    import triton
    name = KERNELS[args.kernel][0]
    print(f"{name} of {args.candidate.name} for sm_{args.arch} (Triton {triton.__version__}), from an empty cache")
    for line in r.stdout.splitlines():  # "stage NAME SECONDS" each, then "total SECONDS"; anything else is not ours
        if line.startswith(("stage ", "total ")):
            *what, seconds = line.split()
            print(f"  {' '.join(what)}: {float(seconds):.2f} s")
    # MLIR's report (stderr): a block a pass pipeline, "Total Execution Time: T seconds", then a line a pass,
    # "  wall (share%)  name" (single-threaded, as Triton runs its passes: wall time only); the passes of 0.1 s
    # or more are printed.
    for block in r.stderr.split("Total Execution Time:")[1:]:
        passes = re.findall(r"^\s+([0-9.]+) \(\s*[0-9.]+%\)\s+(\S.*)$", block, re.M)
        slow = [(float(s), n.strip()) for s, n in passes if n.strip() not in ("Total", "Rest") and float(s) >= 0.1]
        if slow:
            print(f"  of a pipeline of {float(block.split()[0]):.2f} s: " + ", ".join(f"{n} {s:.2f} s" for s, n in slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
