#!/usr/bin/env python3
"""(GPU machine) A Hugging Face folder of random weights with the shape of Qwen2.5-0.5B(-Instruct).

The shared random_model.py has no qwen2 shape; this one matters because its width, 896, is no
multiple of 256: llama-quantize's K mixes (and `cera quantize`, which reproduces them) store most of
its tensors as Q5_0 / Q8_0 instead of Q4_K / Q6_K — the GPU's Q5_0 path is what a user of the
popular Qwen2.5-0.5B-Instruct-Q4_K_M.gguf runs.

usage: random_qwen2.py OUTDIR          (needs the pack's .device/tools/make_fixtures.py for the tokenizer)
"""
import os, sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".device", "tools"))
from make_fixtures import train_tokenizer, QWEN_RE, QWEN_SPECIALS, CHATML_TEMPLATE

if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                      max_position_embeddings=32768, tie_word_embeddings=True)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    tok = train_tokenizer(QWEN_RE, QWEN_SPECIALS, None)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: qwen2.5-0.5b shape, {n/1e6:.1f}M parameters")
