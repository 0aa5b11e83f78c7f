"""The transformers models of the model suite: small random-init configs built
in code (no hub access), fixed seeds, one entry per architecture family.

Each `ModelSpec` says what the family adds (the pattern), how to build the
model and its inputs, and, per mode of the suite, what blocks that mode
today (blockers.py: each blocker with a probe). A blocked (model, mode) is a
strict expected failure: while a probe fails it stops at once; when the
blocking ops land it runs for real and turns into a visible "unexpectedly
passed", and its entry here is deleted.

Modes:
  eager      the forward pass on rbln (float16) equals the CPU's;
  compiled   torch.compile(model, backend="rbln", dynamic=False): one rbln
             program per graph, no host op, no CPU fallback, as many graphs
             as Dynamo makes on the CPU, explain() of a warm step [clean];
  generate   greedy generate() in eager mode gives the CPU's tokens;
  static     greedy generate() with a compiled forward over transformers'
             static KV cache: the CPU's tokens, no recompile after the first
             decode step, the cache stays on the device;
  train      one eager step (forward, loss, backward, AdamW) matches the
             CPU's parameters.
"""

import dataclasses
from typing import Callable, Dict, Tuple

import torch
import transformers

from blockers import Blocked, Blocker, describe, raise_if_blocked

VOCAB = 256
PROMPT = 8  # Prompt tokens of the decoder LMs.
NEW_TOKENS = 8  # Greedy tokens generated.
# Larger than the configs' defaults (0.02): random-init LMs then pick
# varied tokens with clear top-1 margins instead of repeating one token.
INIT_RANGE = 0.2

EAGER = "eager"
COMPILED = "compiled"
GENERATE = "generate"
STATIC = "static"
TRAIN = "train"
MODES = (EAGER, COMPILED, GENERATE, STATIC, TRAIN)
DECODER_MODES = MODES
OTHER_MODES = (EAGER, COMPILED, TRAIN)

__all__ = ["SPECS", "ModelSpec", "Blocked", "params"]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    pattern: str  # What the family adds to the suite.
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], Dict[str, torch.Tensor]]
    modes: Tuple[str, ...]
    # Mode -> the Blockers (blockers.py) that keep it from passing today.
    blocked: Dict[str, Tuple[Blocker, ...]] = dataclasses.field(default_factory=dict)
    # Graphs Dynamo captures for one forward on the CPU (the rbln backend may
    # not add graph breaks).
    graphs: int = 1

    @property
    def is_decoder(self) -> bool:
        return GENERATE in self.modes

    def make(self) -> torch.nn.Module:
        """The model in float32 on the CPU, in eval mode, with its weights
        rounded to float16 (so that the float16 device model and the float32
        CPU reference hold the same values)."""
        torch.manual_seed(0)
        model = self.build().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.half().float())
        if self.is_decoder:
            model.generation_config.pad_token_id = 0
        return model

    def example(self) -> Dict[str, torch.Tensor]:
        return self.inputs(torch.Generator().manual_seed(1))

    def check_blockers(self, mode):
        """Raises Blocked while a declared blocker of `mode` is present."""
        raise_if_blocked(self.blocked.get(mode, ()))


def _token_ids(g, n=PROMPT):
    return torch.randint(3, VOCAB, (1, n), generator=g)


def _lm_inputs(g):
    return {"input_ids": _token_ids(g)}


def _seq2seq_inputs(g):
    return {"input_ids": _token_ids(g), "decoder_input_ids": _token_ids(g, 8)}


def _image_inputs(g):
    return {"pixel_values": torch.randn(1, 3, 32, 32, generator=g)}


def _speech_inputs(g):
    # 16 mel bins x 32 frames (max_source_positions 16 after the stride-2 conv).
    return {"input_features": torch.randn(1, 16, 32, generator=g),
            "decoder_input_ids": _token_ids(g, 8)}


_DECODER = dict(vocab_size=VOCAB, initializer_range=INIT_RANGE)
_LLAMA_LIKE = dict(_DECODER, num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
# Mixture-of-experts decoders: 8 experts, 2 routed per token, every layer
# sparse; transformers' default experts implementation ("grouped_mm":
# sort by expert, histc, cumsum, grouped GEMMs, weighted scatter back). The
# router logits are a forward output (output_router_logits), so training
# adds the load-balancing loss, as MoE training does.
_MOE = dict(_LLAMA_LIKE, num_experts_per_tok=2, output_router_logits=True)


def _specs():
    T = transformers
    return [
        ModelSpec(
            "gpt2", "learned positions, GELU(tanh) MLP, Conv1D projections, tied lm_head",
            lambda: T.GPT2LMHeadModel(T.GPT2Config(
                n_layer=2, n_embd=64, n_head=2, n_positions=64, **_DECODER)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "llama", "grouped-query attention, RoPE, RMSNorm, SwiGLU",
            lambda: T.LlamaForCausalLM(T.LlamaConfig(**_LLAMA_LIKE)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "qwen2", "Llama layout with q/k/v biases",
            lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**_LLAMA_LIKE)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "mistral", "sliding-window attention (window 8 < prompt + new tokens)",
            lambda: T.MistralForCausalLM(T.MistralConfig(sliding_window=8, **_LLAMA_LIKE)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "qwen3_moe", "mixture of experts: softmax top-2 router with normalised weights, "
            "grouped GEMM experts; q/k RMSNorm",
            lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
                num_experts=8, moe_intermediate_size=64, head_dim=16, **_MOE)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "mixtral", "mixture of experts: top-2 router over float32 softmax, SwiGLU experts",
            lambda: T.MixtralForCausalLM(T.MixtralConfig(num_local_experts=8, **_MOE)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "bloom", "ALiBi position bias, embedding LayerNorm, fused qkv",
            lambda: T.BloomForCausalLM(T.BloomConfig(
                n_layer=2, hidden_size=64, n_head=4, **_DECODER)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "gptj", "parallel attention + MLP, partial interleaved rotary",
            lambda: T.GPTJForCausalLM(T.GPTJConfig(
                n_layer=2, n_embd=64, n_head=4, rotary_dim=8, n_positions=64, **_DECODER)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "falcon", "multi-query attention, parallel attention + MLP",
            lambda: T.FalconForCausalLM(T.FalconConfig(
                num_hidden_layers=2, hidden_size=64, num_attention_heads=4, parallel_attn=True,
                new_decoder_architecture=False, multi_query=True, alibi=False, **_DECODER)),
            _lm_inputs, DECODER_MODES),
        ModelSpec(
            "bert", "encoder, absolute + token-type embeddings, GELU(erf), tied MLM decoder",
            lambda: T.BertForMaskedLM(T.BertConfig(
                num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=64)),
            _lm_inputs, OTHER_MODES),
        ModelSpec(
            "t5", "encoder-decoder, relative position buckets, RMS LayerNorm, cross-attention",
            lambda: T.T5ForConditionalGeneration(T.T5Config(
                d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=VOCAB,
                decoder_start_token_id=0)),
            _seq2seq_inputs, OTHER_MODES),
        ModelSpec(
            "vit", "patch embedding (strided conv), class token, pre-LayerNorm encoder",
            lambda: T.ViTForImageClassification(T.ViTConfig(
                image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=128, num_labels=10)),
            _image_inputs, OTHER_MODES),
        ModelSpec(
            "resnet", "convolutions, BatchNorm, max pooling, residual blocks",
            lambda: T.ResNetForImageClassification(T.ResNetConfig(
                embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
                num_labels=10)),
            _image_inputs, OTHER_MODES),
        ModelSpec(
            "convnext", "depthwise 7x7 convolutions, channels-last LayerNorm, layer scale",
            lambda: T.ConvNextForImageClassification(T.ConvNextConfig(
                num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)),
            _image_inputs, OTHER_MODES),
        ModelSpec(
            "whisper", "speech encoder-decoder: conv1d stem, sinusoidal positions, cross-attention",
            lambda: T.WhisperForConditionalGeneration(T.WhisperConfig(
                vocab_size=VOCAB, num_mel_bins=16, encoder_layers=2, decoder_layers=2, d_model=64,
                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                decoder_ffn_dim=128, max_source_positions=16, max_target_positions=32,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                suppress_tokens=[], begin_suppress_tokens=[])),
            _speech_inputs, OTHER_MODES),
    ]


SPECS = {s.name: s for s in _specs()}


def params(mode):
    """pytest params of the models that have `mode`; blocked ones are strict
    expected failures (raising Blocked) whose reason names the blockers."""
    import pytest

    out = []
    for spec in SPECS.values():
        if mode not in spec.modes:
            continue
        marks = ()
        if mode in spec.blocked:
            marks = pytest.mark.xfail(strict=True, raises=Blocked,
                                      reason=describe(spec.blocked[mode]))
        out.append(pytest.param(spec, id=spec.name, marks=marks))
    return out
