"""An honest candidate that compiles the model with torch.compile (inductor; Triton on a GPU) at
build. In the sandboxed worker its caches are in the worker's own /tmp, where the file locks
that inductor and Triton take succeed without doing anything (harness/sandbox/seccomp.py): their writers
publish by atomic rename, so compiling still works. tests/test_cheaters_fresh.py runs it on a GPU;
on a CPU: auto-optim verify --candidate tests/candidates/compiled.py --device cpu."""

import torch


def build_decoder(model, example):
    fn = torch.compile(model, dynamic=False)
    with torch.no_grad():
        fn(example)  # the compile, at build
    return fn, {"compiled": "torch.compile (inductor)"}
