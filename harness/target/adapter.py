"""The target adapter's contract: the one definition of what a target gives the harness.

goals.json "adapter" names a module (model/target.py for the VAE, targets/llm-decode/llm/target.py,
the scaffold `python -P -m harness.cli.new_target NAME` writes); harness/_common.load_adapter checks it
against Adapter when it loads it and names every missing function at once. The harness knows
nothing else about the target. OptionalAdapter's functions turn features on where present.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol


class Adapter(Protocol):
    """The functions every target's adapter module defines."""

    def load_model(self, device: Any) -> Any:
        """load_model(device) -> the frozen model, fp32, eval mode"""

    def weights_kind(self) -> str:
        """weights_kind() -> 'published' or 'synthetic'"""

    def weights_id(self) -> str:
        """weights_id() -> a name for the weights the references are made with"""

    def make_input(self, shape: list[int], seed: int, device: Any) -> Any:
        """make_input(shape, seed, device) -> a seeded input of a preset's input_shape"""

    def reference(self, model: Any, x: Any) -> Any:
        """reference(model, x) -> the frozen model's output for x"""

    def output_shape(self, shape: list[int]) -> list[int]:
        """output_shape(input_shape) -> the output's shape"""

    def compare(self, out: Any, ref: Any, gate: dict) -> dict:
        """compare(out, ref, gate) -> {'passed', 'reason', 'quality', 'max_abs'} (the gate)"""


class OptionalAdapter(Protocol):
    """Functions an adapter may define, each turning a feature on."""

    def flops(self, shape: list[int]) -> float:
        """flops(input_shape) -> the model's FLOPs for one call (the floor: harness/decide/floor.py)"""

    def peak_probes(self, device: Any) -> Any:
        """peak_probes(device) -> the kernels whose speed is the machine's peak (the floor)"""

    def min_bytes(self, shape: list[int]) -> float:
        """min_bytes(input_shape) -> the bytes a call cannot avoid moving (goals.json floor: bytes)"""

    def frames(self, out: Any) -> Any:
        """frames(output) -> pictures for the quality strip run_experiment draws"""

    def reference_for_output(self, model: Any, x: Any, out: Any) -> Any:
        """reference_for_output(model, x, out) -> a reference that follows the output (an LLM's path)

        Computed after each call, on the harness's own copy of the model, instead of a stored one."""

    def input_from_clip(self, shape: list[int], clip: str | None, start_s: float | None, device: Any, model: Any) -> Any:
        """input_from_clip(shape, clip, start_s, device, model) -> (input, facts) encoded from a video file, or with clip None the target's own clip; a bad clip: Refused (make_latent)"""

    def build_split(self, build: Any, model: Any, example: Any, group: Any) -> Any:
        """build_split(build_fn, model, example, group) -> (forward_fn, info) that runs one call across the ranks of a worker group (a preset's "ranks"): every rank calls it, rank 0's output counts"""

    def render_clip(self, path: Any, shape: list[int]) -> None:
        """render_clip(path, shape) -> writes a procedural clip that input_from_clip reads (make_latent --synthetic-clip)"""


def contract(protocol: type = Adapter) -> dict[str, str]:
    """{function name: its one-line description} of a protocol above."""
    return {name: inspect.getdoc(fn).splitlines()[0] for name, fn in vars(protocol).items()
            if inspect.isfunction(fn) and not name.startswith("_")}


def missing(module: Any, needs_min_bytes: bool = False) -> list[str]:
    """The descriptions of the required functions a module lacks (min_bytes too when its goals
    ask for a "bytes" floor)."""
    wanted = contract(Adapter)
    if needs_min_bytes:
        wanted["min_bytes"] = contract(OptionalAdapter)["min_bytes"]
    return [what for name, what in wanted.items() if not callable(getattr(module, name, None))]
