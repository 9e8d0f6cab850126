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

# Skipped without transformers; not imported here: the xdist worker that collects this module
# without running it would import it for nothing (~0.6 CPU s).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "targets" / "llm-decode"
from harness import target  # noqa: E402

target.use(TARGET)  # its packages by name, as the harness loads them (harness/target/)

from llm import target_tiny as T  # noqa: E402
from llm._adapter import LLMTarget  # noqa: E402
from llm.config import QWEN25_05B, TINY, hf_config  # noqa: E402
from llm.decode import greedy_logits, logits_along, path_of, prompt_of, split  # noqa: E402
from llm.weights import BIAS_STD, QUERY_GAIN, fill_uniform_  # noqa: E402

GOALS = json.loads((TARGET / "goals.json").read_text())
GATE = GOALS["gate"]
TINY_SHAPE = GOALS["presets"]["tiny"]["input_shape"]
KEEPERS = sorted((TARGET / "plans").glob("*.py"))


def load_candidate(path: Path):
    spec = importlib.util.spec_from_file_location(f"_llm_cand_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_candidate(path: Path, seeds: list[int], shape: list[int] = TINY_SHAPE, **attrs) -> list[torch.Tensor]:
    """Build the candidate on a fresh model (it may convert it in place) and call it per seed."""
    module = load_candidate(path)
    for name, value in attrs.items():
        setattr(module, name, value)
    threads = torch.get_num_threads()
    try:
        fn, info = module.build_decoder(T.load_model("cpu"), T.make_input(shape, 999))
        assert isinstance(info, dict)
        return [fn(T.make_input(shape, s)) for s in seeds]
    finally:
        torch.set_num_threads(threads)  # a candidate may set its process's threads; this is pytest's


def check(model: torch.nn.Module, out: torch.Tensor, seed: int, shape: list[int] = TINY_SHAPE) -> dict:
    """The harness's check of one call: the gate against the fp32 logits along the output's own path."""
    x = T.make_input(shape, seed)
    return T.compare(out, T.reference_for_output(model, x, out), GATE)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return T.load_model("cpu")


@pytest.fixture(scope="module")
def refs(model: torch.nn.Module) -> dict[int, torch.Tensor]:
    return {s: T.reference(model, T.make_input(TINY_SHAPE, s)) for s in (1, 2)}


# --- goals.json -------------------------------------------------------------------------------

def test_goals_file_names_the_interface() -> None:
    top = json.loads((REPO / "targets" / "wan-vae" / "goals.json").read_text())
    for key in ("target", "description", "adapter", "candidate", "build_fn", "presets",
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
    assert split([1, 4, 128]) == (1, 512, 128)
    assert split([1, 512, 1]) == (1, 512, 1)
    assert split([2, 1, 8]) == (2, 8, 8)
    for bad in ([1, 0, 8], [1, 640], [0, 3, 8], [1, 3, 0]):
        with pytest.raises(ValueError):
            split(bad)
    x = T.make_input([2, 3, 4], 1)
    assert torch.equal(prompt_of(x)[1], x[1].flatten())  # the prompt is every row, in order


def test_reference_shape_and_determinism(model: torch.nn.Module, refs: dict[int, torch.Tensor]) -> None:
    ref = refs[1]
    assert list(ref.shape) == T.output_shape(TINY_SHAPE) and ref.dtype == torch.float32
    assert torch.equal(ref, T.reference(model, T.make_input(TINY_SHAPE, 1)))
    assert not torch.equal(ref, refs[2])


def test_reference_is_greedy_generation(model: torch.nn.Module, refs: dict[int, torch.Tensor]) -> None:
    """The reference is what generate(do_sample=False) computes: the same tokens, the same logits
    (transformers' own loop, with its own cache and stopping logic, as the oracle)."""
    x = T.make_input(TINY_SHAPE, 1)
    _, _, n = split(TINY_SHAPE)
    gen = model.generate(prompt_of(x), max_new_tokens=n, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0)
    logits = torch.stack(gen.logits, dim=1)
    assert torch.equal(gen.sequences[:, -n:], refs[1].argmax(-1))
    torch.testing.assert_close(refs[1], logits, rtol=0, atol=1e-5)


def test_reference_for_output_follows_the_outputs_own_path(model: torch.nn.Module,
                                                           refs: dict[int, torch.Tensor]) -> None:
    """reference_for_output(x, out) = the frozen model's logits along argmax(out)'s path: on the
    reference itself, the cached sequential generation again (computed as one forward); on an
    output whose argmax takes another token at position 2, logits that follow that token."""
    x = T.make_input(TINY_SHAPE, 1)
    _, p, n = split(TINY_SHAPE)
    torch.testing.assert_close(T.reference_for_output(model, x, refs[1]), refs[1], rtol=0, atol=1e-4)
    other = refs[1].clone()
    other[0, 2, (int(refs[1][0, 2].argmax()) + 1) % other.shape[-1]] = 1e4  # a new argmax at position 2
    ref = T.reference_for_output(model, x, other)
    with torch.no_grad():
        full = model(input_ids=torch.cat([prompt_of(x), path_of(other)], dim=1)).logits
    torch.testing.assert_close(ref, full[:, p - 1:], rtol=0, atol=1e-4)
    torch.testing.assert_close(ref[:, :3], refs[1][:, :3], rtol=0, atol=1e-4)  # the same path up to there
    assert T.compare(refs[1], ref, GATE)["max_kl"] > GATE["max_kl"]  # later positions follow another token


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
    prompt = prompt_of(T.make_input(TINY_SHAPE, 1))  # random tokens: the weights, not greedy's attractors
    with torch.no_grad():
        after = model(input_ids=prompt).logits.argmax(-1)  # the most likely token after each one
    assert float((after == prompt).float().mean()) < 0.5


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

def test_calibration_bf16_passes_skipped_layer_int4_and_parallel_prefill_fail(model: torch.nn.Module) -> None:
    """bf16 eager passes with a wide margin along its own path; a skipped layer, 4-bit activations
    and the old teacher-forcing loophole (all positions from one parallel forward) fail by one."""
    margin = 3.0
    verdicts = {}
    for name in ("bf16_eager", "skip_layer", "int4_activations", "parallel_prefill"):
        outs = run_candidate(TARGET / "calibration" / f"{name}.py", [1, 2])
        verdicts[name] = [check(model, o, s) for o, s in zip(outs, (1, 2))]
    for r in verdicts["bf16_eager"]:
        assert r["passed"], r["reason"]
        assert r["max_kl"] * margin < GATE["max_kl"] and r["max_abs"] * margin < GATE["max_abs_logit"], r
    for name in ("skip_layer", "int4_activations", "parallel_prefill"):
        for r in verdicts[name]:
            assert not r["passed"] and r["max_kl"] > margin * GATE["max_kl"], (name, r)


def test_teacher_forcing_fails_and_greedy_decoding_passes(model: torch.nn.Module) -> None:
    """The loophole closed. Each cheat below returns exact fp32 logits along the tokens it fed, so
    a check along the fed tokens (what the teacher-forced protocol amounted to) passes it; but the
    fed tokens are not the argmax of what it returns, and the harness's check along the output's
    own path fails it: tokens guessed and fed all at once, a cheaper model's greedy path fed all at
    once, a step-by-step decode fed the runner-up. The same decode fed its own argmax passes."""
    x = T.make_input(TINY_SHAPE, 1)
    _, _, n = split(TINY_SHAPE)

    def along(fed: torch.Tensor) -> torch.Tensor:  # fp32 logits along `fed` [1, N - 1], one forward
        with torch.no_grad():
            return model(input_ids=torch.cat([prompt_of(x), fed], dim=1), logits_to_keep=n).logits

    def decode(pick) -> tuple[torch.Tensor, torch.Tensor]:  # one step per token, fed pick(last logits)
        from transformers import DynamicCache

        cache, rows, fed = DynamicCache(config=model.config), [], []
        with torch.no_grad():
            logits = model(input_ids=prompt_of(x), past_key_values=cache, logits_to_keep=1).logits[:, -1]
            for _ in range(n - 1):
                rows.append(logits)
                fed.append(pick(logits))
                logits = model(input_ids=fed[-1], past_key_values=cache).logits[:, -1]
        return torch.stack([*rows, logits], dim=1), torch.cat(fed, dim=1)

    draft = T.load_model("cpu")  # the path of a cheaper model: layer 1 skipped
    draft.model.layers[1].register_forward_hook(lambda m, a, kw, o: a[0] if a else kw["hidden_states"],
                                                with_kwargs=True)
    guess = prompt_of(x)[:, -1:].expand(-1, n - 1)
    draft_path = path_of(greedy_logits(draft, x))
    cheats = {
        "guessed tokens, one forward (calibration/parallel_prefill.py)":
            (run_candidate(TARGET / "calibration" / "parallel_prefill.py", [1])[0], guess),
        "a cheaper model's path, one forward": (along(draft_path), draft_path),
        "step by step, fed the runner-up": decode(lambda lg: lg.topk(2, dim=-1).indices[:, 1:]),
    }
    for name, (out, fed) in cheats.items():
        assert not torch.equal(fed, path_of(out)), name
        assert T.compare(out, along(fed), GATE)["max_kl"] < 1e-9, name  # exact for the tokens it fed
        res = T.compare(out, T.reference_for_output(model, x, out), GATE)
        assert not res["passed"] and res["max_kl"] > 3 * GATE["max_kl"], (name, res)
    honest, fed = decode(lambda lg: lg.argmax(-1, keepdim=True))
    assert torch.equal(fed, path_of(honest))
    res = T.compare(honest, T.reference_for_output(model, x, honest), GATE)
    assert res["passed"] and res["max_kl"] < 1e-9, res


def test_baseline_candidate_is_the_reference_exactly(refs: dict[int, torch.Tensor]) -> None:
    outs = run_candidate(TARGET / "plans" / "fp32_eager.py", [1, 2, 1])
    assert torch.equal(outs[0], refs[1]) and torch.equal(outs[1], refs[2]) and torch.equal(outs[2], refs[1])


@pytest.mark.parametrize("path", KEEPERS, ids=[p.stem for p in KEEPERS])
def test_keeper_candidates_pass_and_keep_no_state(path: Path, model: torch.nn.Module) -> None:
    """Each call on a fresh input passes along its own path; the same input again gives the same
    output (the static cache is reset, nothing of the previous call leaks)."""
    outs = run_candidate(path, [1, 2, 1])
    for out, seed in zip(outs, (1, 2, 1)):
        res = check(model, out, seed)
        assert res["passed"], (path.name, seed, res["reason"])
    assert torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("path", [TARGET / "optimize.py", *KEEPERS], ids=["optimize", *(p.stem for p in KEEPERS)])
def test_candidates_at_the_ttft_preset(path: Path, model: torch.nn.Module) -> None:
    """N = 1: the prefill alone, no decode step (a CUDA-graph candidate must not capture one)."""
    shape = GOALS["presets"]["ttft"]["input_shape"]
    res = check(model, run_candidate(path, [1], shape)[0], 1, shape)
    assert res["passed"], (path.name, res["reason"])


def test_compiled_prefill_and_step_have_no_graph_break(model: torch.nn.Module) -> None:
    """fullgraph=True with the eager backend: dynamo traces the whole prefill and decode step of
    optimize.py or raises, so neither has a host sync or data-dependent Python branch (what CUDA
    graph capture needs)."""
    outs = run_candidate(TARGET / "optimize.py", [1, 2, 1], CPU_BACKEND="eager")
    for out, seed in zip(outs, (1, 2, 1)):
        assert check(model, out, seed)["passed"], seed
    assert torch.equal(outs[0], outs[2])  # the cache is reset: nothing of the previous call leaks


def test_lean_keeper_is_the_reference_within_rounding(refs: dict[int, torch.Tensor]) -> None:
    """The CPU keeper (CI's) is the same fp32 computation: its tokens are the reference's and its
    logits agree to fp32 rounding, for a batch of two as well."""
    out = run_candidate(TARGET / "plans" / "fp32_lean.py", [1])[0]
    assert torch.equal(out.argmax(-1), refs[1].argmax(-1))
    torch.testing.assert_close(out, refs[1], rtol=0, atol=1e-4)
    shape = [2, *TINY_SHAPE[1:]]
    x = T.make_input(shape, 3)
    out = run_candidate(TARGET / "plans" / "fp32_lean.py", [3], shape)[0]
    torch.testing.assert_close(out, T.reference(T.load_model("cpu"), x), rtol=0, atol=1e-4)
