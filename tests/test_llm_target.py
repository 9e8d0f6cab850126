"""The second target, targets/llm-decode (Qwen2 token generation), on a CPU in seconds.

Everything runs on the tiny configuration (llm.target_tiny: the real target's code on a 4-layer,
64-wide Qwen2) at the goals file's tiny preset, except where a test says otherwise. Skipped where
transformers is not installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "targets" / "llm-decode"
if str(TARGET) not in sys.path:
    sys.path.insert(0, str(TARGET))  # as the harness does with the goals file's folder

from llm import target_tiny as T  # noqa: E402
from llm._adapter import LLMTarget  # noqa: E402
from llm.config import QWEN25_05B, TINY, hf_config  # noqa: E402
from llm.decode import split  # noqa: E402
from llm.weights import BIAS_STD, QUERY_GAIN, fill_uniform_  # noqa: E402

GOALS = json.loads((TARGET / "goals.json").read_text())
GATE = GOALS["gate"]
TINY_SHAPE = GOALS["presets"]["tiny"]["input_shape"]
KEEPERS = sorted((TARGET / "experiments").glob("*.py"))


def load_candidate(path: Path):
    spec = importlib.util.spec_from_file_location(f"_llm_cand_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_candidate(path: Path, seeds: list[int], **attrs) -> list[torch.Tensor]:
    """Build the candidate on a fresh model (it may convert it in place) and call it per seed."""
    module = load_candidate(path)
    for name, value in attrs.items():
        setattr(module, name, value)
    fn, info = module.build_decoder(T.load_model("cpu"), T.make_input(TINY_SHAPE, 999))
    assert isinstance(info, dict)
    return [fn(T.make_input(TINY_SHAPE, s)) for s in seeds]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return T.load_model("cpu")


@pytest.fixture(scope="module")
def refs(model: torch.nn.Module) -> dict[int, torch.Tensor]:
    return {s: T.reference(model, T.make_input(TINY_SHAPE, s)) for s in (1, 2)}


# --- goals.json -------------------------------------------------------------------------------

def test_goals_file_names_the_interface() -> None:
    top = json.loads((REPO / "goals.json").read_text())
    for key in ("target", "description", "adapter", "candidate", "build_fn", "presets", "input_seed",
                "metric", "gate", "pool", "noise_threshold", "stop_rule", "timeouts"):
        assert key in GOALS, key
    assert GOALS["adapter"] == "llm.target" and (TARGET / GOALS["candidate"]).is_file()
    assert GOALS["metric"]["better"] == "higher" and GOALS["metric"]["name"] == "tokens_per_s"
    assert {"full", "tiny"} <= set(GOALS["presets"])
    for name, preset in GOALS["presets"].items():
        _, _, n = split(preset["input_shape"])
        assert preset["work_per_call"] == n, f"{name}: work_per_call must be N, the tokens generated"
    assert split(GOALS["presets"]["full"]["input_shape"])[1:] == (512, 128)
    assert set(GATE) >= {"max_kl", "max_abs_logit", "quality_name", "rationale"}
    assert set(GOALS["stop_rule"]) == set(top["stop_rule"])


# --- the adapter contract ---------------------------------------------------------------------

def test_model_is_frozen_fp32(model: torch.nn.Module) -> None:
    assert not model.training
    assert all(p.dtype == torch.float32 and not p.requires_grad for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as in Qwen2.5-0.5B
    assert T.weights_kind() == "synthetic"
    assert T.weights_id() == T.weights_id() and T.weights_id().startswith("synthetic:tiny-qwen2:")


def test_make_input_is_seeded_token_ids() -> None:
    x = T.make_input(TINY_SHAPE, 5)
    assert x.dtype == torch.int64 and list(x.shape) == TINY_SHAPE
    assert 0 <= int(x.min()) and int(x.max()) < TINY.config["vocab_size"]
    assert torch.equal(x, T.make_input(TINY_SHAPE, 5)) and not torch.equal(x, T.make_input(TINY_SHAPE, 6))
    with pytest.raises(ValueError):
        T.make_input([1, 24], 5)  # the layout is [B, R, N]


def test_split_reads_prompt_and_new_tokens_from_the_shape() -> None:
    assert split([1, 5, 128]) == (1, 512, 128)
    assert split([1, 513, 1]) == (1, 512, 1)
    for bad in ([1, 1, 8], [1, 640], [0, 3, 8]):
        with pytest.raises(ValueError):
            split(bad)


def test_reference_shape_and_determinism(model: torch.nn.Module, refs: dict[int, torch.Tensor]) -> None:
    ref = refs[1]
    assert list(ref.shape) == T.output_shape(TINY_SHAPE) and ref.dtype == torch.float32
    assert torch.equal(ref, T.reference(model, T.make_input(TINY_SHAPE, 1)))
    assert not torch.equal(ref, refs[2])


def test_reference_is_teacher_forced_generation(model: torch.nn.Module, refs: dict[int, torch.Tensor]) -> None:
    """Row i of the output = the full forward's logits at the position that predicts generated
    token i: the cached decode equals the uncached computation."""
    x = T.make_input(TINY_SHAPE, 1)
    _, p, n = split(TINY_SHAPE)
    with torch.no_grad():
        full = model(input_ids=x.reshape(1, -1)).logits
    torch.testing.assert_close(refs[1], full[:, p - 1:p - 1 + n], rtol=0, atol=1e-4)


def test_compare_rejects_what_it_should(refs: dict[int, torch.Tensor]) -> None:
    ref = refs[1]
    same = T.compare(ref.clone(), ref, GATE)
    assert same["passed"] and same["reason"] == "" and same["quality"] == 0.0 and same["max_abs"] == 0.0
    assert set(same) >= {"passed", "reason", "quality", "max_abs"}
    assert "shape" in T.compare(ref[:, :-1], ref, GATE)["reason"]
    assert "dtype" in T.compare(ref.double(), ref, GATE)["reason"]
    assert "not a tensor" in T.compare(None, ref, GATE)["reason"]
    nan = ref.clone()
    nan[0, 0, 0] = float("nan")
    assert "NaN" in T.compare(nan, ref, GATE)["reason"]
    # a constant shift changes no probability: KL stays 0, the abs bound catches it
    shifted = T.compare(ref + 2 * GATE["max_abs_logit"], ref, GATE)
    assert shifted["max_kl"] < 1e-9 and not shifted["passed"] and "abs" in shifted["reason"]
    # one position's distribution swapped for another's: KL catches it
    swapped = ref.clone()
    swapped[0, 0] = ref[0, 1]
    res = T.compare(swapped, ref, GATE)
    assert not res["passed"] and "KL" in res["reason"]


def test_flops_matches_torch_flop_counter() -> None:
    """The count from the config against FlopCounterMode on an eager-attention model (whose
    prefill computes the full P x P scores, where flops() counts the causal half)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = T.load_model("cpu")
    model.config._attn_implementation = "eager"  # sdpa on CPU is invisible to the counter
    x = T.make_input(TINY_SHAPE, 3)
    with FlopCounterMode(display=False) as counter:
        T.reference(model, x)
    _, p, _ = split(TINY_SHAPE)
    c = TINY.config
    full_square_extra = 4 * c["hidden_size"] * c["num_hidden_layers"] * (p * p - p * (p + 1) // 2)
    assert counter.get_total_flops() == T.flops(TINY_SHAPE) + full_square_extra


# --- weights ----------------------------------------------------------------------------------

def test_synthetic_weights_are_pinned_numbers(model: torch.nn.Module) -> None:
    """The same values on every machine and torch version: a change of the generator, the seed
    or the init rule shows up here (and must come with new references everywhere)."""
    again = T.load_model("cpu")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    expect = torch.tensor([-0.11041101068258286, 0.07638225704431534, 0.1620822250843048, -0.010929732583463192])
    assert torch.equal(model.model.embed_tokens.weight[0, :4], expect)
    expect = torch.tensor([0.020545324310660362, 0.009581581689417362, -0.016670264303684235, 0.02839253656566143])
    assert torch.equal(model.model.layers[0].self_attn.q_proj.bias[:4], expect * QUERY_GAIN)
    assert float(model.model.norm.weight[0]) == pytest.approx(TINY.logit_std)
    # the full-size model's first embedding values, without building 494 M parameters
    t = torch.empty(4)
    fill_uniform_(t, "model.embed_tokens.weight", QWEN25_05B.config["hidden_size"] ** -0.5)
    assert torch.equal(t, torch.tensor([-0.02950858324766159, 0.020414017140865326, 0.04331829771399498,
                                        -0.0029210939537733793]))
    t = torch.empty(4)
    fill_uniform_(t, "model.layers.0.self_attn.q_proj.bias", BIAS_STD)
    assert torch.equal(t, expect)  # a parameter's values depend on its name, not the model's size


def test_synthetic_logits_are_peaked_and_depend_on_context(model: torch.nn.Module,
                                                           refs: dict[int, torch.Tensor]) -> None:
    """The reason for the init (weights.py): not flat, not 'repeat the input token'."""
    logp = refs[1].log_softmax(-1)
    entropy = float(-(logp.exp() * logp).sum(-1).mean())
    assert 1.5 < entropy < 5.5, entropy  # uniform over 1024 tokens would be 6.93
    x = T.make_input(TINY_SHAPE, 1).reshape(1, -1)
    _, p, n = split(TINY_SHAPE)
    fed = x[0, p - 1:p - 1 + n]
    assert float((refs[1][0].argmax(-1) == fed).float().mean()) < 0.5


def test_published_checkpoint_path(tmp_path: Path) -> None:
    """A checkpoint made here with save_pretrained (bf16, as Qwen publishes) loads through the
    same code as the real one, and switches weights_kind and weights_id."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    made = Qwen2ForCausalLM(hf_config(TINY)).to(torch.bfloat16)
    ckpt = tmp_path / "ckpt"
    made.save_pretrained(ckpt)
    target = LLMTarget(TINY, ckpt)
    assert target.weights_kind() == "published"
    digest = hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    assert target.weights_id() == f"published:tiny-qwen2:sha256:{digest}"
    loaded = target.load_model("cpu")
    assert not loaded.training and all(p.dtype == torch.float32 and not p.requires_grad for p in loaded.parameters())
    for name, tensor in made.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.float()), name
    out = target.reference(loaded, target.make_input(TINY_SHAPE, 1))
    assert list(out.shape) == target.output_shape(TINY_SHAPE) and torch.isfinite(out).all()

    assert LLMTarget(TINY, tmp_path / "absent").weights_kind() == "synthetic"
    other = LLMTarget(QWEN25_05B, ckpt)  # a tiny checkpoint is not the 0.5B target's model
    with pytest.raises(ValueError, match="is not qwen2.5-0.5b"):
        other.load_model("cpu")


# --- calibration and candidates ---------------------------------------------------------------

def test_calibration_bf16_passes_skipped_layer_and_int4_fail(refs: dict[int, torch.Tensor]) -> None:
    """bf16 eager passes with a wide margin; a skipped layer and 4-bit activations fail by one."""
    margin = 3.0
    verdicts = {}
    for name in ("bf16_eager", "skip_layer", "int4_activations"):
        outs = run_candidate(TARGET / "calibration" / f"{name}.py", [1, 2])
        verdicts[name] = [T.compare(o, refs[s], GATE) for o, s in zip(outs, (1, 2))]
    for r in verdicts["bf16_eager"]:
        assert r["passed"], r["reason"]
        assert r["max_kl"] * margin < GATE["max_kl"] and r["max_abs"] * margin < GATE["max_abs_logit"], r
    for name in ("skip_layer", "int4_activations"):
        for r in verdicts[name]:
            assert not r["passed"] and r["max_kl"] > margin * GATE["max_kl"], (name, r)


def test_baseline_candidate_is_the_reference_exactly(refs: dict[int, torch.Tensor]) -> None:
    outs = run_candidate(TARGET / "experiments" / "fp32_eager.py", [1, 2, 1])  # optimize.py is the best keeper
    assert torch.equal(outs[0], refs[1]) and torch.equal(outs[1], refs[2]) and torch.equal(outs[2], refs[1])


@pytest.mark.parametrize("path", KEEPERS, ids=[p.stem for p in KEEPERS])
def test_keeper_candidates_pass_and_keep_no_state(path: Path, refs: dict[int, torch.Tensor]) -> None:
    """Each call on a fresh input passes; the same input again gives the same output (the static
    cache is reset, nothing of the previous call leaks)."""
    outs = run_candidate(path, [1, 2, 1])
    for out, seed in zip(outs, (1, 2, 1)):
        res = T.compare(out, refs[seed], GATE)
        assert res["passed"], (path.name, seed, res["reason"])
    assert torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("path", [TARGET / "optimize.py", *KEEPERS], ids=["optimize", *(p.stem for p in KEEPERS)])
def test_candidates_at_the_ttft_preset(path: Path, model: torch.nn.Module) -> None:
    """N = 1: the prefill alone, no decode step (a CUDA-graph candidate must not capture one)."""
    shape = GOALS["presets"]["ttft"]["input_shape"]
    module = load_candidate(path)
    fn, _ = module.build_decoder(T.load_model("cpu"), T.make_input(shape, 999))
    x = T.make_input(shape, 1)
    res = T.compare(fn(x), T.reference(model, x), GATE)
    assert res["passed"], (path.name, res["reason"])


def test_compiled_decode_step_has_no_graph_break(refs: dict[int, torch.Tensor]) -> None:
    """fullgraph=True with the eager backend: dynamo traces the whole decode step or raises, so
    the step has no host sync or data-dependent Python branch (what CUDA graph capture needs)."""
    outs = run_candidate(TARGET / "experiments" / "bf16_static_compiled.py", [1], CPU_BACKEND="eager")
    assert T.compare(outs[0], refs[1], GATE)["passed"]
