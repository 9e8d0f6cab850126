"""Session 15 probe (2-GPU host): what CUDA lists inside the sandbox when only one GPU's node is
bound, with CUDA_VISIBLE_DEVICES unset, an index, or a UUID."""
import os
import subprocess
import sys

import torch  # noqa: E402

from harness import nvml, sandbox  # noqa: E402

n = torch.cuda.device_count()
print("host lists", n, "GPUs:", [(k, nvml.device_uuid(k), nvml.device_node(k)) for k in range(n)])
code = ("import os, torch; k = torch.cuda.device_count(); "
        "print('lists', k, [torch.cuda.get_device_properties(i).uuid for i in range(k)], "
        "sorted(d for d in os.listdir('/dev') if d.startswith('nvidia')))")
for given in range(n):
    view = sandbox.View(masked=[], visible=[], gpus=[nvml.device_node(given)])
    for cvd in [None, str(given), nvml.device_uuid(given), str(1 - given)]:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        argv, fds = sandbox.wrap([sys.executable, "-c", code], view)
        r = subprocess.run(argv, env=env, pass_fds=fds, capture_output=True, text=True, timeout=120)
        for fd in fds:
            os.close(fd)
        tail = (r.stdout.strip() or r.stderr.strip())[-300:]
        print(f"given {nvml.device_node(given)}, CUDA_VISIBLE_DEVICES={cvd}: rc {r.returncode}: {tail}", flush=True)
