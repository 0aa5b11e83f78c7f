"""The CPU reference for served tokens: transformers' model from the same
directory, float32, greedy, one token at a time (EOS does not stop it, as
`ignore_eos` in vLLM). A token is *decisive* when its top-1 logit leads the
runner-up by more than MARGIN of the largest |logit|: below that, float32
rounding on another device may pick the other token, so comparisons stop at
the first indecisive token."""

import json
import os

import torch

MARGIN = 1e-4


def random_prompts(model_dir: str, lengths, seed: int):
    """Random token ids of each length in `lengths`, from the model's
    vocabulary without the special tokens 0..2."""
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


def cpu_greedy(model_dir: str, prompts, new_tokens: int):
    """[(tokens, decisive)] per prompt (lists of token ids)."""
    import transformers

    with open(os.path.join(model_dir, "config.json")) as f:
        quantized = "quantization_config" in json.load(f)
    # MXFP4 experts (gpt-oss): transformers' own dequantization on the CPU.
    extra = dict(quantization_config=transformers.Mxfp4Config(dequantize=True)) if quantized else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, **extra).eval()
    results = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([list(prompt)])
            tokens, decisive, clear = [], 0, True
            past = None
            step_ids = ids
            for _ in range(new_tokens):
                out = model(input_ids=step_ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                top = logits.topk(2).values
                clear = clear and (top[0] - top[1]).item() > MARGIN * logits.abs().max().item()
                decisive += int(clear)
                token = int(logits.argmax())
                tokens.append(token)
                step_ids = torch.tensor([[token]])
            results.append((tokens, decisive))
    return results


def assert_same_tokens(got, want, decisive, what):
    """The first `decisive` tokens are equal (see the module docstring)."""
    assert list(got[:decisive]) == list(want[:decisive]), (
        f"{what}: rbln tokens {list(got)} != CPU tokens {list(want)} "
        f"(the first {decisive} have a clear margin on the CPU)")


def assert_batch_matches_cpu(got, want, prompts, max_tokens, what="prompt"):
    """Each request's tokens (`got`, of its `max_tokens`) equal the CPU's
    (`want`, cpu_greedy) while the CPU's margin is clear, and at least 90% of
    all tokens had a clear margin (else the seed proves little)."""
    compared = 0
    for i, (tokens, (ref, decisive)) in enumerate(zip(got, want)):
        n = min(decisive, max_tokens[i])
        assert len(tokens) == max_tokens[i]
        assert_same_tokens(tokens, ref, n, f"{what} {i} ({len(prompts[i])} tokens)")
        compared += n
    assert compared >= 0.9 * sum(max_tokens), (
        f"only {compared} tokens had a clear CPU margin; pick another seed")
