#!/usr/bin/env python3
"""Builds the special-token fixtures under tests/data/special_tokens/ and records what
Hugging Face transformers makes of each: the ids of a plain prompt, the ids of a
rendered chat (apply_chat_template), and the ids that end a generation.

Run once by a developer (needs `tokenizers`, `transformers` and `jinja2`; no torch, no
network); the tests only read the committed output. Each case is a tiny Hugging Face
tokenizer directory with a byte-level BPE vocabulary:

  llama3         BOS only from tokenizer.json's TemplateProcessing (Llama 3 style), a
                 template that writes {{ bos_token }}, two EOS ids in
                 generation_config.json.
  llama2         BOS from the post-processor and add_bos_token: true, tokens written as
                 AddedToken objects, the template writes {{ bos_token }}.
  plain          no post-processor, add_bos_token: false, a pad token, a truncation
                 setting in tokenizer.json that transformers ignores, eos_token_id
                 from config.json (no generation_config.json).
  bos_eos        post-processor adds BOS and EOS, add_eos_token: true, the template
                 in chat_template.jinja.
  contradiction  add_bos_token: true but a post-processor that adds nothing (refused).
"""

import json
import os
import shutil
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "special_tokens")
SPECIALS = ["<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
          ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d")]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
            "{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROMPT = "hello world"
MESSAGES = [{"role": "user", "content": "hello world"}]


def tokenizer(post):
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab.setdefault(ch, len(vocab))
    for a, b in MERGES:
        vocab.setdefault(a + b, len(vocab))
    tk = Tokenizer(models.BPE(vocab, MERGES))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    ids = {t: vocab[t] for t in SPECIALS}
    if post == "bos":
        tk.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", ids["<s>"])])
    elif post == "bos_eos":
        tk.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> $B </s>",
            special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])])
    return tk


def added(content):
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False, "special": True}


CASES = {
    "llama3": dict(post="bos", config={"bos_token": "<s>", "eos_token": "</s>",
                                       "chat_template": TEMPLATE},
                   generation={"eos_token_id": [1, 4]}),
    "llama2": dict(post="bos", config={"bos_token": added("<s>"), "eos_token": added("</s>"),
                                       "add_bos_token": True, "add_eos_token": False,
                                       "chat_template": TEMPLATE},
                   generation={"eos_token_id": 1}),
    "plain": dict(post=None, config={"bos_token": "<s>", "eos_token": "<|im_end|>",
                                     "pad_token": "<pad>", "add_bos_token": False,
                                     "chat_template": TEMPLATE},
                  model_config={"eos_token_id": 4}, truncate=1),
    "bos_eos": dict(post="bos_eos", config={"bos_token": "<s>", "eos_token": "</s>",
                                            "add_bos_token": True, "add_eos_token": True},
                    jinja=TEMPLATE),
    "contradiction": dict(post=None, config={"bos_token": "<s>", "eos_token": "</s>",
                                             "add_bos_token": True}),
}


def main():
    from transformers import AutoTokenizer, GenerationConfig, __version__

    expected = {"transformers": __version__, "prompt": PROMPT, "messages": MESSAGES,
                "cases": {}}
    for name, case in CASES.items():
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        tk = tokenizer(case["post"])
        if case.get("truncate"):
            tk.enable_truncation(case["truncate"])
        tk.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(case["config"], f, indent=1)
        model_config = {"model_type": "llama", **case.get("model_config", {})}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(model_config, f, indent=1)
        if "generation" in case:
            with open(os.path.join(d, "generation_config.json"), "w") as f:
                json.dump(case["generation"], f, indent=1)
        if "jinja" in case:
            with open(os.path.join(d, "chat_template.jinja"), "w") as f:
                f.write(case["jinja"])
        hf = AutoTokenizer.from_pretrained(d)
        out = {"prompt_ids": hf(PROMPT)["input_ids"]}
        if hf.chat_template:
            out["chat_ids"] = hf.apply_chat_template(
                MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        eos = GenerationConfig.from_pretrained(d).eos_token_id \
            if "generation" in case else model_config.get("eos_token_id")
        out["generation_eos"] = eos if isinstance(eos, list) else [eos] if eos is not None else []
        out["pad_id"] = hf.pad_token_id
        expected["cases"][name] = out
        print(name, out, file=sys.stderr)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
