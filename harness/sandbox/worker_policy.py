"""One worker's sandbox policy, built from the goals and the candidate: what it sees, may write, its environment and its GPUs (harness/sandbox/boundary.py enforces it).

`python -P -m harness.sandbox.worker_policy [CANDIDATE]` prints it for this project on this machine.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import machine, _common
from harness.measure import nvml
from harness.sandbox import boundary, cgroup
from harness.target import assets
from harness.errors import Refused

HARNESS = Path(__file__).resolve().parents[1]
# What of the harness's environment the worker gets: what its libraries read (and the variables
# goals.json "worker_env" names, which its model reads), and nothing else.
WORKER_ENV = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "CC", "CXX",
              "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
WORKER_ENV_PREFIXES = ("LC_", "CUDA_", "CUDNN_", "CUBLAS", "NCCL_", "TORCH", "PYTORCH_", "TRITON_",
                       "OMP_", "MKL_", "OPENBLAS_", "KMP_")


@dataclass(frozen=True)
class Gpus:
    """The GPUs a worker is given: CUDA devices 0..n-1 as the harness numbers them (a worker
    group's rank k runs on the k-th), by UUID (the worker's CUDA_VISIBLE_DEVICES, the same GPUs
    whatever CUDA numbers the ones it can open) and by device node (all the sandbox shows of them)."""

    uuids: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


def gpus(device: str, count: int, sandboxed: bool = True) -> Gpus:
    """The first `count` CUDA devices of this process for a sandboxed worker; none on a CPU or
    unsandboxed (that worker inherits the harness's CUDA_VISIBLE_DEVICES and sees every GPU).
    Refuses (Refused) where NVML cannot name a device's node, or the node is not there: showing
    every GPU instead would let a candidate use one it was not given."""
    if device != "cuda" or not sandboxed:
        return Gpus()
    uuids = [nvml.device_uuid(k) for k in range(count)]
    nodes = [nvml.device_node(k) for k in range(count)]
    for k, uuid in enumerate(uuids):
        if uuid is None:
            raise Refused(f"CUDA device {k} has no UUID (torch.cuda.get_device_properties)")
    for k, node in enumerate(nodes):
        if node is None or not os.path.exists(node):
            raise Refused(f"cannot tell which /dev/nvidiaN is CUDA device {k} ({node or 'NVML did not answer'}; "
                                     "a MIG slice is not supported): the sandbox shows a worker only the GPUs it is given")
    return Gpus(uuids, nodes)


def candidate_path(goals: Any, scratch: str) -> str:
    """Where the worker writes and imports the candidate's source: the same for every worker of a
    project, a keeper's and a candidate's alike (a fixed name in its own /tmp): a keeper is
    measured from a private folder of its own, a candidate from the agent's, and a path that
    differed would tell a worker its role."""
    return str(Path(scratch) / "candidate" / Path(goals["candidate"]).name)


def project_names(goals: Any, source: bytes) -> set[str]:
    """frozen_names, and the root's modules and packages the candidate's source imports (a
    candidate's helpers kept at the root, tracked by git: the hook refuses untracked ones), with
    what they import: the names the worker's FROM_ROOT (harness/worker/imports.py) gives a worker of this candidate."""
    return frozen_names(goals, seed=_imported_tops(source))


def frozen_names(goals: Any, root: Path | None = None, seed: set[str] = frozenset()) -> set[str]:
    """The top-level names of the project's code a worker imports from the project root: the
    adapter's package, the top folder or module of each goals.json "frozen" file, and every
    package or module at the root that those import, followed from import to import (read from
    their source: `import x`, `from x import y`, at any depth of a function). harness/worker/main.py
    FROM_ROOT imports no other top-level name from the root, and the view shows no other: a
    module the agent writes there under a name that something tries and does not find elsewhere
    (torch tries opt_einsum, dill, pynvml, ...) is never imported."""
    root = root or _common.root()
    names = {str(goals["adapter"]).split(".")[0]}
    names |= {n for n in seed if (root / n / "__init__.py").is_file() or (root / f"{n}.py").is_file()} - {HARNESS.name}
    for path in goals.get("frozen", ()):
        first = Path(path).parts[0]
        names.add(first[:-3] if first.endswith(".py") else first)
    todo = sorted(names)
    while todo:
        top = root / todo.pop()
        files = sorted(top.rglob("*.py")) if top.is_dir() else [top.with_suffix(".py")]
        for name in {n for f in files for n in _imported_tops(f)} - names - {HARNESS.name}:  # imported by path
            if (root / name / "__init__.py").is_file() or (root / f"{name}.py").is_file():
                names.add(name)
                todo.append(name)
    return names


def _imported_tops(path: Path | bytes) -> set[str]:
    """The top-level names a Python file (or source) imports absolutely (none where it cannot be read or parsed)."""
    try:
        tree = ast.parse(path if isinstance(path, bytes) else path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def candidate_helpers(candidate: Path) -> list[Path]:
    """The Python code beside the candidate (its helpers: modules and packages, which it imports as a
    script's folder), where that folder is no project root (whose code every worker sees). Only files
    and folders of their own: a symlink would show its target (anything on the host) under a helper's
    name, and an entry that cannot be read is left out rather than the candidate's other helpers."""
    home = candidate.parent.resolve()
    if home in {HARNESS.parent.resolve(), _common.root().resolve()}:
        return []
    try:
        entries = sorted(home.iterdir())
    except OSError:
        return []
    helpers = []
    for e in entries:
        try:
            if e.is_symlink() or e.resolve() == candidate.resolve():
                continue
            if (e.suffix == ".py" and e.is_file()) or (e.is_dir() and (e / "__init__.py").is_file()):
                helpers.append(e)
        except (OSError, RuntimeError):  # unreadable, or a loop of links
            continue
    return helpers


def candidate_home(candidate: Path) -> Path | None:
    """The candidate's folder, importable in the worker where it holds helpers (candidate_helpers). The
    worker is shown those helpers, never the folder: a candidate in /tmp or a home folder would
    otherwise bring the host's whole folder into view (the key copies a GPU session keeps in /tmp, a
    home's ~/.config) and cover the worker's own /tmp, read-only."""
    return candidate.parent.resolve() if candidate_helpers(candidate) else None


def policy(candidate: Path, hidden: list[Path], gpus_given: Gpus, goals: Any, scratch: str, ranks: int = 1) -> boundary.Policy:
    """Everything the worker is given (boundary.Policy). What it sees, read-only: the system's
    folders (boundary.system_view), the interpreter's (interpreter_paths), and of the project its
    frozen code (the harness, the adapter's package and goals.json "frozen": frozen_names; not the
    other modules the agent may write at the root), the goals file, the assets minus the hidden
    ones and the Python code beside the candidate (candidate_helpers, not its folder; the candidate's own
    source reaches the worker through its channel); none of the records, locks, results or history, and nothing else of
    the host's. What it may write: its scratch folder and its devices. Its environment. Of the
    host's GPUs, those given."""
    projects = [HARNESS.parent, _common.root()]
    try:
        names = project_names(goals, candidate.read_bytes()) | {HARNESS.name}
    except OSError:
        names = frozen_names(goals) | {HARNESS.name}
    code = [e for top in projects for e in sorted(top.iterdir())
            if (e.suffix == ".py" and e.stem in names) or ((e / "__init__.py").is_file() and e.name in names)]
    env = environment(goals, scratch, gpus_given.uuids)
    # The helpers, importable as a script's folder's are (a project's: its code above); never one that would
    # cover what the worker writes in its own scratch folder (a candidate in /tmp beside a `candidate` or
    # `triton` folder): the worker's copy of its candidate and its caches come first.
    own = [Path(candidate_path(goals, scratch)), *(Path(v) for v in env.values() if Path(scratch) in Path(v).parents)]
    code += [h for h in candidate_helpers(candidate) if not any(h == o or h in o.parents for o in own)]
    system, links = boundary.system_view()
    project = [HARNESS, _common.goals_path(), assets.assets_dir(), *code]
    shown = {(str(p), str(p)) for p in (*interpreter_paths(projects, env), *extra_tools(env))} | set(system)
    shown |= {(os.path.abspath(p), os.path.realpath(p)) for p in project if os.path.lexists(p)}
    return boundary.Policy(shown=tuple(sorted(shown)), links=tuple(links), masked=tuple(dict.fromkeys(str(p) for p in projects)),
                          hidden=tuple(str(h) for h in hidden), writable=tuple(writable(scratch, gpus_given.nodes, ranks)),
                          env=env, gpus=tuple(gpus_given.nodes), chdir=str(HARNESS.parent), scratch=scratch,
                          candidate_at=candidate_path(goals, scratch), tasks=int(goals.get("worker_tasks", cgroup.DEFAULT_TASKS)))


@functools.lru_cache(maxsize=8)
def _python_path(pythonpath: str) -> tuple[str, ...]:
    """sys.path as the worker's interpreter will have it (its prefix's folders, its .pth files'
    folders, the user's site-packages, PYTHONPATH), asked of a fresh interpreter started from /
    (no script folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update({"PYTHONPATH": pythonpath} if pythonpath else {})
    out = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"], cwd="/",
                         env=env, capture_output=True, text=True, timeout=60)
    return tuple(json.loads(out.stdout)) if out.returncode == 0 else tuple(sys.path)


def interpreter_paths(projects: list[Path], env: dict[str, str]) -> list[str]:
    """The interpreter's folders a worker needs: its prefixes and the folders of its own sys.path,
    but none that holds a project folder (it would show the project's neighbours: put such a
    package elsewhere, or in the target's folder), and none inside one (the project's code is
    shown entry by entry)."""
    found = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                                           os.path.dirname(os.path.realpath(sys.executable)),
                                           *_python_path(env.get("PYTHONPATH", "")))
             if p and os.path.exists(p)}
    tops = [Path(os.path.realpath(p)) for p in projects]
    keep = [p for p in found if Path(p) != Path("/") and not any(_inside(Path(p), t) or _inside(t, Path(p)) for t in tops)]
    return sorted(p for p in keep if not any(q != p and _inside(Path(p), Path(q)) for q in keep))


def extra_tools(env: dict[str, str]) -> list[str]:
    """The folders the worker's environment names for its tools (CUDA's home, Triton's ptxas, a
    compiler), where they lie outside the system's folders."""
    out = []
    for key in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CC", "CXX", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH",
                "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH"):
        value = env.get(key, "")
        if value.startswith("/") and os.path.exists(value):
            out.append(os.path.realpath(value if os.path.isdir(value) else os.path.dirname(value)))
            if key in ("CC", "CXX"):
                out += compiler_prefix(out[-1])
    return out


def compiler_prefix(bin_folder: str) -> list[str]:
    """A compiler outside the system folders (CC=/opt/gcc/bin/gcc) runs its passes, headers and
    libraries from its installation's folders beside bin/ (cc1 in libexec/, crt files in lib/):
    those folders, not the whole prefix's parent."""
    prefix = os.path.dirname(bin_folder)
    if os.path.basename(bin_folder) != "bin" or prefix == "/":
        return []
    return [os.path.join(prefix, d) for d in COMPILER_FOLDERS if os.path.isdir(os.path.join(prefix, d))]


COMPILER_FOLDERS = ("lib", "lib64", "libexec", "include", "x86_64-linux-gnu", "x86_64-pc-linux-gnu", "aarch64-linux-gnu")


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def writable(scratch: str, gpu_nodes: list[str], ranks: int = 1) -> list[str]:
    """What the worker may write (Landlock): its scratch folder and devices (of the GPUs, its own);
    a worker group's ranks also /dev/shm (NCCL's buffers between processes: the sandbox's own, gone with it)."""
    dev = [*boundary.DEVICES, *gpu_nodes, "/dev/null", "/dev/zero", "/dev/full"]
    return [scratch] + [d for d in dev if os.path.exists(d)] + (["/dev/shm"] if ranks > 1 else [])


def environment(goals: Any, scratch: str, gpu_uuids: list[str]) -> dict[str, str]:
    """The parent's settings for the libraries the worker runs (WORKER_ENV: CUDA, torch, Triton,
    threads, paths), none of its other variables (a person's API tokens, the harness's own), its
    GPUs by UUID, and every cache in the scratch folder, gone with the worker: nothing it writes
    survives it."""
    named = WORKER_ENV | set(goals.get("worker_env", []))  # and what the target's model reads
    env = {k: v for k, v in os.environ.items() if k in named or k.startswith(WORKER_ENV_PREFIXES)}
    s = Path(scratch)
    env.update(TMPDIR=str(s), TRITON_CACHE_DIR=str(s / "triton"), TORCHINDUCTOR_CACHE_DIR=str(s / "inductor"),
               XDG_CACHE_HOME=str(s / "cache"), CUDA_CACHE_PATH=str(s / "nv"), MPLCONFIGDIR=str(s / "mpl"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    if gpu_uuids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_uuids)
    return env


def main() -> int:
    """`python -P -m harness.sandbox.worker_policy [CANDIDATE]`: print the policy a sandboxed worker of this
    project gets on this machine (its GPUs: the first CUDA device, where there is one)."""
    from harness.ledger import signing

    goals = _common.load_goals()
    candidate = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else _common.root() / goals["candidate"]
    device = machine.default_device()
    print(policy(candidate, [*assets.secret_paths(goals), *signing.key_dirs()], gpus(device, 1), goals, boundary.SCRATCH))
    return 0


if __name__ == "__main__":
    sys.exit(main())
