"""A small random-init causal LM written to a local directory, with a
tokenizer trained here by the `tokenizers` library: what the serving tests,
the demo and the benchmark give `vllm serve` / `LLM(...)`, since no model hub
is reachable. Deterministic: the same arguments write the same files."""

import json
import os

# Sentences the tokenizer is trained on (byte-level BPE, so any text encodes).
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A paged key-value cache keeps each request's keys and values in blocks.",
    "Continuous batching lets requests join and leave between decode steps.",
    "The simulated NPU runs compiled programs on its chiplets.",
    "Hello, my name is",
    "The capital of France is",
    "The future of AI is",
    "Once upon a time, in a land far away, there lived a small robot.",
    "Static shapes and buckets keep the decode loop from recompiling.",
    "user: what is the weather like today? assistant: it is sunny.",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

# What every test model shares: 2 layers of width 128, 4 query and 2
# key/value heads.
_SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)

# Architectures: the keyword arguments of their transformers config.
ARCHITECTURES = {
    "llama": dict(
        _SMALL,
        intermediate_size=256, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
    ),
    "qwen2": dict(
        _SMALL,
        intermediate_size=256, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
    ),
    # Per-head RMSNorm of queries and keys.
    "qwen3": dict(
        _SMALL,
        intermediate_size=256, head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False,
    ),
    # Sliding-window attention over the last 24 tokens.
    "mistral": dict(
        _SMALL,
        intermediate_size=256, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=24,
        tie_word_embeddings=False,
    ),
    # Fused qkv and gate/up projections.
    "phi3": dict(
        _SMALL,
        intermediate_size=256, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    ),
    # Local (sliding window) and global layers, (1 + w) norms, q/k norms,
    # GELU(tanh), scaled embeddings.
    "gemma3_text": dict(
        _SMALL,
        intermediate_size=256, head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0,
        rope_local_base_freq=10000.0, sliding_window=24, query_pre_attn_scalar=32,
        layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=True,
    ),
    # As gemma3 without q/k norms, plus soft-capped attention scores and
    # final logits. Gemma 2 caps scores at 50 (trained weights); a random
    # model's scores are far below that: here queries are unscaled
    # (query_pre_attn_scalar 1) and the cap is 0.5, so it changes the tokens.
    "gemma2": dict(
        _SMALL,
        intermediate_size=256, head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0,
        sliding_window=24, query_pre_attn_scalar=1, attn_logit_softcapping=0.5,
        final_logit_softcapping=30.0, tie_word_embeddings=True,
    ),
    # Mixture of experts: 8 experts, top 2 -- softmax routing renormalized
    # (qwen3_moe, mixtral) or not, beside a gated shared expert (qwen2_moe).
    "qwen3_moe": dict(
        _SMALL,
        intermediate_size=256, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, head_dim=32, rms_norm_eps=1e-6,
        rope_theta=10000.0, tie_word_embeddings=False,
    ),
    "qwen2_moe": dict(
        _SMALL,
        intermediate_size=256, moe_intermediate_size=64, shared_expert_intermediate_size=128,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
    ),
    # Sigmoid routing whose expert choice adds a correction bias (set at
    # random below: a fresh model's is zero), weights scaled by 2.5, a shared
    # expert, a dense first layer, half-dimension RoPE (vLLM routes it with
    # its grouped top-k router, one group).
    "glm4_moe": dict(
        _SMALL,
        intermediate_size=256, moe_intermediate_size=64, n_routed_experts=8, n_shared_experts=1,
        num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1,
        norm_topk_prob=True, routed_scaling_factor=2.5, head_dim=32, rms_norm_eps=1e-5,
        num_nextn_predict_layers=0, tie_word_embeddings=False,
    ),
    # Softmax routing with a correction bias (vLLM's FusedTopKBiasRouter),
    # a shared expert, a dense first layer.
    "ernie4_5_moe": dict(
        _SMALL,
        intermediate_size=256, moe_intermediate_size=64, moe_num_experts=8, moe_k=2,
        moe_num_shared_experts=1, moe_layer_start_index=1, moe_layer_end_index=1,
        moe_layer_interval=1, rms_norm_eps=1e-5, tie_word_embeddings=False,
    ),
    "mixtral": dict(
        _SMALL,
        intermediate_size=128, num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-6,
        rope_theta=10000.0, tie_word_embeddings=False,
    ),
    # gpt-oss: attention sinks and expert biases (set at random below: a
    # fresh model's are ~0 and 0), local (window 24) and global layers,
    # q/k/v/o biases, YaRN RoPE (transformers' defaults), a clamped SwiGLU of
    # interleaved gate/up rows, top-k routing softmaxed over the chosen.
    "gpt_oss": dict(
        _SMALL,
        intermediate_size=64, head_dim=32, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=24, layer_types=["sliding_attention", "full_attention"],
        rms_norm_eps=1e-5, tie_word_embeddings=False,
    ),
}

# Weight init std where the default (0.1) gives a degenerate model: Gemma
# scales its embeddings by sqrt(hidden_size), and at 0.1 greedy decoding
# repeats one token whatever the prompt.
_INIT_STD = {"gemma3_text": 0.02, "gemma2": 0.03}

# transformers' (config, model) class names of each architecture.
_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
}


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    return tok


def write_model_dir(path: str, arch: str = "llama", *, seed: int = 0, vocab_size: int = 512,
                    model_vocab_size: int = None, max_position_embeddings: int = 1024,
                    init_std: float = None, save_dtype: str = "float32",
                    quantization: str = None, **overrides) -> str:
    """Writes a random-init `arch` model (ARCHITECTURES, with `overrides` of
    its config) and its tokenizer to `path`; returns `path`. Weights in
    safetensors, float32 (or `save_dtype`: a large benchmark model in
    bfloat16, as real checkpoints are); `init_std` (default 0.1, _INIT_STD) is
    large enough that greedy tokens have clear margins (the tests compare
    tokens against the CPU). The tokenizer learns up to `vocab_size` tokens
    from a small corpus (fewer in practice); the model's vocabulary is the
    tokenizer's, or `model_vocab_size` if larger (as a real model's padded
    vocabulary, for benchmarks). `quantization="mxfp4"` (gpt_oss) writes the
    experts as gpt-oss's checkpoints store them (MXFP4 blocks and scales,
    the config's quantization_config) and every other tensor as before;
    transformers reads the same values back (dequantized)."""
    import torch
    import transformers

    os.makedirs(path, exist_ok=True)
    tok = _train_tokenizer(vocab_size)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)

    if quantization not in (None, "mxfp4") or (quantization and arch != "gpt_oss"):
        raise ValueError(f"quantization {quantization!r} of {arch}: only gpt_oss's mxfp4")
    kwargs = dict(ARCHITECTURES[arch])
    kwargs.update(overrides)
    config_name, model_name = _CLASSES[arch]
    config_cls = getattr(transformers, config_name)
    config = config_cls(
        vocab_size=max(len(fast), model_vocab_size or 0), max_position_embeddings=max_position_embeddings,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        initializer_range=init_std if init_std is not None else _INIT_STD.get(arch, 0.1), **kwargs)
    config.dtype = getattr(torch, save_dtype)
    model_cls = getattr(transformers, model_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config).to(torch.float32).eval()
        for name, t in [*model.named_buffers(), *model.named_parameters()]:
            if name.endswith("e_score_correction_bias"):
                # Large enough to change which experts the scores pick.
                with torch.no_grad():
                    t.copy_(torch.randn(t.shape) * 0.2)
            elif name.endswith(("experts.gate_up_proj_bias", "experts.down_proj_bias")):
                # gpt-oss's expert biases (zeros in a fresh model).
                with torch.no_grad():
                    t.copy_(torch.randn(t.shape) * 0.1)
            elif name.endswith(".sinks"):
                # Sinks of the scores' size: each takes a share of its
                # head's attention (the tokens change if one is ignored).
                with torch.no_grad():
                    t.copy_(torch.randn(t.shape))
        model = model.to(config.dtype)
    if quantization == "mxfp4":
        _quantize_experts_mxfp4(model, config)
    model.save_pretrained(path, safe_serialization=True)
    if quantization == "mxfp4":
        _write_mxfp4_checkpoint(path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        # Greedy by default, no sampling settings vLLM would pick up.
        json.dump({"bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id}, f)
    return path


# e2m1 (OCP MX FP4) values by nibble, and the scale's block of values.
_FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_MX_BLOCK = 32


def quantize_mxfp4(w):
    """(blocks [..., N, K/32, 16] uint8, scales [..., N, K/32] uint8) of `w`
    [..., N, K] in MXFP4: per 32 values of a row a power-of-two scale that
    puts the largest magnitude in [4, 8), each value rounded to the nearest
    e2m1 magnitude (a tie to the smaller), its sign kept (zero as +0),
    low nibble first. Row by row along dim 0, so a real-size expert tensor
    needs little memory beside it."""
    import torch

    if w.dim() > 2:
        parts = [quantize_mxfp4(w[i]) for i in range(w.shape[0])]
        return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])
    *lead, n, k = w.shape
    v = w.float().reshape(*lead, n, k // _MX_BLOCK, _MX_BLOCK)
    amax = v.abs().amax(-1).clamp(min=2.0 ** -100)
    exponent = torch.floor(torch.log2(amax)) - 2
    scaled = v / torch.exp2(exponent).unsqueeze(-1)
    # Midpoints between e2m1's magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    midpoints = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    nibbles = torch.bucketize(scaled.abs(), midpoints).to(torch.uint8)
    nibbles |= ((scaled < 0) & (nibbles > 0)).to(torch.uint8) << 3
    blocks = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
    scales = (exponent + 127).to(torch.uint8)
    return blocks, scales


def dequantize_mxfp4(blocks, scales):
    """[..., N, K] float32 of quantize_mxfp4's output."""
    import torch

    lut = torch.tensor(_FP4_VALUES)
    v = torch.stack([lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]], -1)
    v = v.flatten(-2) * torch.exp2(scales.float() - 127).unsqueeze(-1)
    return v.flatten(-2)


def _quantize_experts_mxfp4(model, config):
    """Rounds each expert weight to its MXFP4 values and its biases to
    bfloat16 (vLLM holds MXFP4 layers' biases in bfloat16), in place."""
    import torch

    with torch.no_grad():
        for name, t in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                # Stored [E, in, out]; quantized along `in` per output row.
                rows = t.transpose(1, 2)
                t.copy_(dequantize_mxfp4(*quantize_mxfp4(rows)).transpose(1, 2))
            elif name.endswith(("experts.gate_up_proj_bias", "experts.down_proj_bias")):
                t.copy_(t.to(torch.bfloat16).float())
    config.quantization_config = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }


def _write_mxfp4_checkpoint(path: str) -> None:
    """Rewrites the saved experts of `path`'s safetensors as MXFP4 blocks and
    scales (gate_up_proj -> gate_up_proj_blocks/_scales, down_proj likewise),
    the format of gpt-oss's checkpoints."""
    import glob

    from safetensors.torch import load_file, save_file

    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        tensors = load_file(file)
        for name in list(tensors):
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                blocks, scales = quantize_mxfp4(tensors.pop(name).transpose(1, 2))
                tensors[name + "_blocks"] = blocks.contiguous()
                tensors[name + "_scales"] = scales.contiguous()
        save_file(tensors, file, metadata={"format": "pt"})
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            data = json.load(f)
        weight_map = {}
        for name, file in data["weight_map"].items():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                weight_map[name + "_blocks"] = weight_map[name + "_scales"] = file
            else:
                weight_map[name] = file
        data["weight_map"] = weight_map
        with open(index, "w") as f:
            json.dump(data, f, indent=2)
