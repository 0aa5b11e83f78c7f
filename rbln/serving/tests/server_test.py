"""`vllm serve` on rbln (the vllm-rbln plugin) on 127.0.0.1, from a real
client (the `openai` package; httpx for a malformed body): 16 concurrent
requests to /v1/completions and /v1/chat/completions, streamed and not,
whose tokens equal transformers' greedy tokens on the CPU; bad requests sent
among them (a prompt longer than the model, a malformed body, a bad value)
get vLLM's HTTP 400 while the others are served; after warm-up the server's
steps neither compile nor fall back to the CPU (its log says so: step_stats).
Runs in the serving venv (serving_venv.py)."""
# spec: J2, I6

import sys

from serving_venv import reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import asyncio

import pytest

from token_check import assert_same_tokens, cpu_greedy
from vllm_rbln.testing.local_model import write_model_dir
from vllm_rbln.testing.server import Server

NEW_TOKENS = 12
MAX_MODEL_LEN = 256


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model_dir(str(tmp_path_factory.mktemp("llama")), "llama")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log_path = str(tmp_path_factory.mktemp("server") / "server.log")
    args = ["--dtype", "float32", "--max-model-len", MAX_MODEL_LEN, "--max-num-seqs", 8,
            "--max-num-batched-tokens", 64, "--kv-cache-memory-bytes", 16 << 20,
            "--served-model-name", "tiny-llama"]
    with Server(model_dir, args, log_path, env={"TORCH_RBLN_DISABLE_FALLBACK": "all"}) as s:
        yield s.base_url, log_path


PROMPTS = [
    "Hello, my name is",
    "The capital of France is",
    "Once upon a time, in a land far away, there lived a small robot. It",
    "A paged key-value cache keeps each request's keys and values in blocks, and " * 3,
]


async def _completion(client, prompt, stream):
    extra = {"return_token_ids": True, "ignore_eos": True}
    if not stream:
        r = await client.completions.create(model="tiny-llama", prompt=prompt, temperature=0,
                                            max_tokens=NEW_TOKENS, extra_body=extra)
        choice = r.choices[0]
        return choice.prompt_token_ids, choice.token_ids, choice.text
    prompt_ids, ids, text = None, [], ""
    async for chunk in await client.completions.create(
            model="tiny-llama", prompt=prompt, temperature=0, max_tokens=NEW_TOKENS,
            stream=True, extra_body=extra):
        choice = chunk.choices[0]
        prompt_ids = getattr(choice, "prompt_token_ids", None) or prompt_ids
        ids += getattr(choice, "token_ids", None) or []
        text += choice.text
    return prompt_ids, ids, text


async def _chat(client, prompt, stream):
    extra = {"return_token_ids": True, "ignore_eos": True}
    messages = [{"role": "user", "content": prompt}]
    if not stream:
        r = await client.chat.completions.create(model="tiny-llama", messages=messages,
                                                 temperature=0, max_tokens=NEW_TOKENS,
                                                 extra_body=extra)
        return r.prompt_token_ids, r.choices[0].token_ids, r.choices[0].message.content
    prompt_ids, ids, text = None, [], ""
    async for chunk in await client.chat.completions.create(
            model="tiny-llama", messages=messages, temperature=0, max_tokens=NEW_TOKENS,
            stream=True, extra_body=extra):
        prompt_ids = getattr(chunk, "prompt_token_ids", None) or prompt_ids
        if chunk.choices:
            choice = chunk.choices[0]
            ids += getattr(choice, "token_ids", None) or []
            text += choice.delta.content or ""
    return prompt_ids, ids, text


async def _bad_requests(base):
    """(status, body) of each bad request, sent while the good ones run."""
    import httpx

    async with httpx.AsyncClient(timeout=300) as http:
        too_long = await http.post(f"{base}/v1/completions", json={
            "model": "tiny-llama", "prompt": [5] * (MAX_MODEL_LEN + 1), "max_tokens": 4})
        malformed = await http.post(
            f"{base}/v1/chat/completions", content=b'{"model": "tiny-llama", "messages": [',
            headers={"Content-Type": "application/json"})
        bad_value = await http.post(f"{base}/v1/completions", json={
            "model": "tiny-llama", "prompt": "hi", "max_tokens": -4})
    return [(r.status_code, r.json()) for r in (too_long, malformed, bad_value)]


def test_concurrent_requests_match_cpu_and_bad_ones_get_http_errors(server, model_dir):
    import openai

    base, log_path = server
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0,
                                timeout=600)

    async def run_all():
        good = [fn(client, p, stream) for fn in (_completion, _chat)
                for stream in (False, True) for p in PROMPTS]
        return await asyncio.gather(asyncio.gather(*good), _bad_requests(base))

    results, bad = asyncio.run(run_all())
    assert len(results) == 16
    want = cpu_greedy(model_dir, [r[0] for r in results], NEW_TOKENS)
    for i, ((prompt_ids, ids, text), (ref, decisive)) in enumerate(zip(results, want)):
        assert prompt_ids and len(ids) == NEW_TOKENS, (i, prompt_ids, ids)
        assert text, i
        assert_same_tokens(ids, ref, decisive, f"request {i} (prompt {prompt_ids}, text {text!r})")
    assert sum(d for _, d in want) >= 0.8 * 16 * NEW_TOKENS

    (too_long, too_long_body), (malformed, _), (bad_value, bad_value_body) = bad
    assert too_long == 400 and "maximum context length" in too_long_body["error"]["message"]
    assert malformed == 400
    assert bad_value == 400 and "max_tokens" in bad_value_body["error"]["message"]

    # The server is still healthy and serving.
    import httpx

    assert httpx.get(f"{base}/health", timeout=10).status_code == 200
    log = open(log_path).read()
    assert "rbln: warm-up compiled" in log, log[-4000:]
    assert "compiled after warm-up" not in log, log[-4000:]
    assert "ran work on the CPU" not in log, log[-4000:]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
