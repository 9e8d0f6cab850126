"""optimize.py with each rank's decode replayed from one CUDA graph (issue 44; session 21 prepared it, not measured yet).
Runs optimize.py's own source in this module's namespace (so the split's F hooks reach its convs), then
wraps build_decoder: on CUDA, the first call decodes eagerly (compiles, NCCL's communicators), then
records the same decode, halo exchanges included, into one CUDA graph on a static input; later calls
copy the slab in and replay."""
from pathlib import Path as _Path
import torch as _torch
_src = _Path(__file__).resolve().parents[2] / "optimize.py"  # targets/wan-vae/optimize.py
exec(compile(_src.read_text(), str(_src), "exec"))
_eager_build = build_decoder  # noqa: F821


class GraphedDecode:
    def __init__(self, decoder, shape):
        self.decoder, self.shape = decoder, shape
        self.graph = self.static_in = self.static_out = None

    def __call__(self, z):
        if tuple(z.shape) != self.shape:
            return self.decoder(z)
        if self.graph is None:
            out = self.decoder(z)
            self.static_in = z.clone()
            graph = _torch.cuda.CUDAGraph()
            with _torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.static_out = self.decoder(self.static_in)
            self.graph = graph
            return out
        self.static_in.copy_(z)
        self.graph.replay()
        return self.static_out


def build_decoder(vae, example_latent, low_memory=False):
    decoder, info = _eager_build(vae, example_latent, low_memory)
    if example_latent.is_cuda:
        return GraphedDecode(decoder, tuple(example_latent.shape)), {**info, "graph": "one CUDA graph a rank"}
    return decoder, info
