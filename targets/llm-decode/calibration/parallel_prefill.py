"""Calibration (must FAIL): the loophole of the old teacher-forced protocol, all N positions from
one forward over the prompt and N - 1 tokens fed at once instead of N - 1 decode steps.

Without decoding, the tokens a step would feed are unknown: this guesses them (the prompt's last
token, repeated). Its logits are exact for the path it fed, but that path is not the
argmax of the logits it returns, and the harness checks each position against the logits along
the returned argmax path. Any parallel guess fails the same way unless it happens to be the
greedy path itself (which is speculative decoding with every guess accepted: then it is honest).
"""

import torch

from llm.decode import prompt_of, split


def build_decoder(model, example_input):
    @torch.no_grad()
    def forward_fn(x):
        _, _, n = split(x.shape)
        prompt = prompt_of(x)
        tokens = torch.cat([prompt, prompt[:, -1:].expand(-1, n - 1)], dim=1)  # P + N - 1 tokens, one forward
        return model(input_ids=tokens, use_cache=False, logits_to_keep=n).logits.float()

    return forward_fn, {"what": "one parallel forward over the prompt and N - 1 guessed tokens"}
