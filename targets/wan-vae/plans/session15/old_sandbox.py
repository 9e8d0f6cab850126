"""pytest plugin (session 15 probe): the sandbox as it was before View.gpus, every GPU's node
bound and no UUIDs, to show tests/test_cheaters_isolation.py::test_another_gpu_is_out_of_reach fails there."""
import glob

from harness import worker_process

worker_process.gpus = lambda device, count: worker_process.Gpus([], sorted(glob.glob("/dev/nvidia[0-9]*")))
