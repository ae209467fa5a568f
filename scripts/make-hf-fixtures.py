#!/usr/bin/env python3
"""Builds the Hugging Face reference fixtures under tests/data/hf_fixtures/.

Run once by a developer with torch and transformers installed; the tests do not need
them. For every architecture and config variant Switchyard supports, this builds a
tiny random-weight model with transformers, runs it in float64, and stores:

  * the config.json the model directory gets: the one transformers' save_pretrained
    writes (transformers 5 layout), or for the LEGACY variants the hand-written
    transformers 4 layout (top-level rope_theta, rope_scaling) it was built from, or
    for the DUMPS (one per architecture) a full dump: every field to_dict() writes,
    the generic PretrainedConfig ones at their defaults, with those transformers 4
    also wrote (GENERIC_V4) added, which transformers then loads and runs,
  * the tensors' names and shapes, and the seed, scale and offset that regenerate
    each one (the Rust test rebuilds the weights bit-exactly from them),
  * for four prompts (one longer than any sliding window): transformers' token ids,
    then the top-10 logits and the top-1 margin at the last prompt position and at 8
    teacher-forced positions after it.

The tokenizer is a byte-level BPE trained here on a fixed text (tokenizer.json,
shared by every fixture), so the fixtures stay small.

Weights: element i of a tensor is splitmix64(seed + (i + 1) * GOLDEN), its top 24
bits u give (u / 2**24 - 0.5) * 2 * scale + offset, computed in float64 and rounded
to float32. The seed is fnv1a64(name) xor the fixture's seed.
"""

import json
import pathlib
import sys
import tempfile

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_fixtures"
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
VOCAB = 384
FORCED = 8

CORPUS = """
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins
with a single step. Rotary position embeddings rotate pairs of query and key
dimensions by an angle that grows with the position. Sliding window attention lets
each token see only the most recent keys. The capital of France is Paris, and the
capital of Italy is Rome. Once upon a time there was a small model that wanted to
compute exactly what the reference computes, no more and no less. Numbers like 12,
345 and 6789 appear in text too, as do symbols such as (parentheses), [brackets]
and "quotes". Grouped-query attention shares each key and value head among several
query heads. Tied embeddings reuse the token table as the output projection.
"""

PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "Rotary position embeddings rotate pairs",
    # Longer than any sliding window below (16 tokens).
    "A journey of a thousand miles begins with a single step, and sliding window "
    "attention lets each token see only the most recent keys of the sequence.",
]
CONTINUATION = " the quick brown fox jumps over the lazy dog"


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def splitmix_uniform(seed, n):
    """float64 values (u / 2**24 - 0.5) for element counters 1..n."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64)
    return u / float(1 << 24) - 0.5


def generate(seed, name, shape, scale, offset):
    n = int(np.prod(shape))
    values = splitmix_uniform(fnv1a64(name) ^ seed, n) * (2.0 * scale) + offset
    return values.astype(np.float32).reshape(shape)


def scale_of(name, shape, model_type):
    """(scale, offset): norms near 1 (Gemma stores w and scales by 1 + w), biases
    small, matrices ~ U(±1.5·sqrt(3/fan_in))."""
    if name.endswith("norm.weight"):
        return 0.25, 0.0 if model_type.startswith("gemma") else 1.0
    if name.endswith(".bias"):
        return 0.5, 0.0
    if "embed_tokens" in name or name == "lm_head.weight":
        # Gemma multiplies the embedding by sqrt(hidden): keep the residual stream
        # from being just the current token's own row.
        return (0.3 if model_type.startswith("gemma") else 1.0), 0.0
    fan_in = shape[-1]
    return float(np.sqrt(3.0 / fan_in)) * 1.5, 0.0


def build_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 4, trainer)
    return tok


BASE = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "bos_token_id": None,
    "eos_token_id": 0,
    "pad_token_id": None,
}


def variant(model_type, **changes):
    config = dict(BASE, model_type=model_type)
    config.update(changes)
    return config


# Variants stored in the hand-written transformers 4 layout rather than as written.
LEGACY = {"llama_base", "llama_linear", "llama3_rope", "qwen2", "gemma3_legacy", "phi3_longrope"}

# name -> config given to transformers.
VARIANTS = {
    "llama_base": variant("llama", rope_theta=10000.0),
    "llama_rope_parameters": variant(
        "llama", rope_parameters={"rope_type": "default", "rope_theta": 500000.0}
    ),
    "llama_linear": variant(
        "llama", rope_theta=10000.0, rope_scaling={"type": "linear", "factor": 4.0}
    ),
    "llama3_rope": variant(
        "llama",
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "llama_head_dim": variant("llama", rope_theta=10000.0, head_dim=24),
    "llama_bias": variant(
        "llama", rope_theta=10000.0, attention_bias=True, mlp_bias=True
    ),
    "llama_gelu_tanh": variant(
        "llama", rope_theta=10000.0, hidden_act="gelu_pytorch_tanh"
    ),
    "llama_untied_eps": variant(
        "llama", rope_theta=10000.0, tie_word_embeddings=False, rms_norm_eps=0.05
    ),
    "mistral_window": variant("mistral", rope_theta=10000.0, sliding_window=16),
    "qwen2": variant(
        "qwen2", rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False
    ),
    "qwen3": variant("qwen3", rope_theta=1000000.0, head_dim=32),
    "qwen3_window": variant(
        "qwen3",
        rope_theta=1000000.0,
        head_dim=16,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=1,
    ),
}
VARIANTS["llama3_rope_v5"] = VARIANTS["llama3_rope"]
GEMMA = dict(
    num_hidden_layers=4,
    head_dim=16,
    query_pre_attn_scalar=24,
    sliding_window=16,
    tie_word_embeddings=True,
    hidden_activation="gelu_pytorch_tanh",
)
VARIANTS["gemma2"] = variant(
    "gemma2", rope_theta=10000.0, attn_logit_softcapping=2.0, final_logit_softcapping=8.0, **GEMMA
)
VARIANTS["gemma3"] = variant(
    "gemma3_text",
    rope_theta=1000000.0,
    rope_local_base_freq=10000.0,
    sliding_window_pattern=2,
    **GEMMA,
)
VARIANTS["phi3_window"] = variant("phi3", rope_theta=10000.0, sliding_window=24)
VARIANTS["phi3_longrope"] = variant(
    "phi3",
    rope_theta=10000.0,
    partial_rotary_factor=0.75,
    original_max_position_embeddings=128,
    rope_scaling={
        "type": "longrope",
        "short_factor": [1.0, 1.1, 1.3, 1.8, 2.5, 4.0],
        "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0],
    },
)
VARIANTS["gemma3_legacy"] = variant(
    "gemma3_text",
    rope_theta=1000000.0,
    rope_local_base_freq=20000.0,
    rope_scaling={"rope_type": "linear", "factor": 8.0},
    sliding_window_pattern=2,
    **GEMMA,
)

# What a GGUF conversion can express (the converter writes no query_pre_attn_scalar
# and no Gemma 3 sliding pattern; llama.cpp takes 1/sqrt(head_dim) and a pattern of 6).
VARIANTS["gemma2_gguf"] = dict(VARIANTS["gemma2"], query_pre_attn_scalar=16)
VARIANTS["gemma3_gguf"] = dict(
    VARIANTS["gemma3_legacy"],
    query_pre_attn_scalar=16,
    rope_local_base_freq=10000.0,
    sliding_window_pattern=6,
    num_hidden_layers=6,
)
VARIANTS["llama_gelu"] = variant("llama", rope_theta=10000.0, hidden_act="gelu")
VARIANTS["llama_yarn"] = variant(
    "llama",
    rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 64,
    },
)
VARIANTS["llama_dynamic"] = variant(
    "llama", rope_theta=10000.0, rope_scaling={"type": "dynamic", "factor": 2.0}
)
LEGACY.add("llama_dynamic")


# One full config dump per architecture: name -> the variant it dumps.
DUMPS = {
    "full_dump_llama": "llama_base",
    "full_dump_mistral": "mistral_window",
    "full_dump_qwen2": "qwen2",
    "full_dump_qwen3": "qwen3",
    "full_dump_gemma2": "gemma2",
    "full_dump_gemma3": "gemma3",
    "full_dump_phi3": "phi3_window",
}
for dump, base in DUMPS.items():
    VARIANTS[dump] = VARIANTS[base]

# The generic fields of transformers 4.57's PretrainedConfig().to_dict() that
# transformers 5's no longer writes, at their defaults: dumps by older transformers,
# and by merge and conversion tools, carry them.
GENERIC_V4 = {
    "torchscript": False,
    "pruned_heads": {},
    "is_decoder": False,
    "cross_attention_hidden_size": None,
    "add_cross_attention": False,
    "tie_encoder_decoder": False,
    "finetuning_task": None,
    "task_specific_params": None,
    "tokenizer_class": None,
    "prefix": None,
    "sep_token_id": None,
    "decoder_start_token_id": None,
    "max_length": 20,
    "min_length": 0,
    "do_sample": False,
    "early_stopping": False,
    "num_beams": 1,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "typical_p": 1.0,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "num_return_sequences": 1,
    "output_scores": False,
    "return_dict_in_generate": False,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "remove_invalid_values": False,
    "exponential_decay_length_penalty": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "tf_legacy_loss": False,
    "use_bfloat16": False,
}


def full_dump(config_json):
    """The variant's config as a full dump, reloaded by transformers from its file."""
    config = transformers.AutoConfig.for_model(**json.loads(json.dumps(config_json)))
    written = dict(GENERIC_V4, **config.to_dict())
    for key, value in transformers.PretrainedConfig().to_dict().items():
        assert key in written, f"the dump lacks the generic field {key}"
        if key not in ("transformers_version", "model_type", "_name_or_path"):
            assert written[key] == value or key in config_json, f"{key} is not at its default"
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "config.json").write_text(json.dumps(written))
        return written, transformers.AutoConfig.from_pretrained(d)


def top(logits, k=10):
    order = np.argsort(-logits, kind="stable")[:k]
    margin = float(logits[order[0]] - logits[order[1]])
    return [[int(i), float(logits[i])] for i in order], margin


def make(name, config_json, tokenizer, seed):
    if name in DUMPS:
        written, config = full_dump(config_json)
    else:
        config = transformers.AutoConfig.for_model(**json.loads(json.dumps(config_json)))
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).double().eval()
    tensors = []
    with torch.no_grad():
        for pname, param in model.named_parameters():
            shape = list(param.shape)
            scale, offset = scale_of(pname, shape, config_json["model_type"])
            values = generate(seed, pname, shape, scale, offset)
            param.copy_(torch.from_numpy(values.astype(np.float64)))
            tensors.append({"name": pname, "shape": shape, "scale": scale, "offset": offset})
    if name in LEGACY:
        written = config_json
    elif name not in DUMPS:
        with tempfile.TemporaryDirectory() as d:
            model.save_pretrained(d)
            written = json.loads((pathlib.Path(d) / "config.json").read_text())
    forced = tokenizer.encode(CONTINUATION).ids[:FORCED]
    assert len(forced) == FORCED
    prompts = []
    for text in PROMPTS:
        ids = tokenizer.encode(text).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids + forced])).logits[0].numpy()
        positions = []
        for p in range(len(ids) - 1, len(ids) + FORCED):
            top10, margin = top(logits[p])
            positions.append({"top10": top10, "margin": margin})
        prompts.append({"text": text, "ids": ids, "positions": positions})
    return {
        "name": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": seed,
        "config": written,
        "tensors": tensors,
        "forced": forced,
        "prompts": prompts,
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save(str(OUT / "tokenizer.json"))
    tokenizer = Tokenizer.from_file(str(OUT / "tokenizer.json"))
    only = set(sys.argv[1:])
    for i, (name, config) in enumerate(VARIANTS.items()):
        if only and name not in only:
            continue
        fixture = make(name, config, tokenizer, seed=1000 + i)
        margins = [p["margin"] for pr in fixture["prompts"] for p in pr["positions"]]
        print(f"{name}: min margin {min(margins):.3f}, median {np.median(margins):.3f}")
        (OUT / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")


if __name__ == "__main__":
    main()
