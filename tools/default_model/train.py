#!/usr/bin/env python3
"""Trains cera's embedded default model: a small LFM2 (Hugging Face Lfm2ForCausalLM) on the corpus that
make_corpus.sh builds, and writes a Hugging Face folder that `cera convert` turns into models/default.gguf.

Runs on a GPU machine (torch, transformers, tokenizers, safetensors):
    PYTHONUNBUFFERED=1 python3 tools/default_model/train.py --corpus models/corpus --out OUT [--train-seconds 390]

Steps: (1) byte-level BPE tokenizer (HF tokenizers) with LFM2's special tokens, pre-tokenizer and BOS
post-processor (the lfm2-tiny fixture's tokenizer.json is the skeleton); (2) Lfm2ForCausalLM trained with
AdamW + warmup/cosine, bf16 autocast, on random windows of the tokenized training text whose first token is
replaced by BOS (the layout cera perplexity evaluates); the checkpoint with the lowest validation loss is kept;
(3) held-out perplexity in float32 of the bf16-rounded weights with llama-perplexity's chunking (same as
`cera perplexity`); (4) the HF folder (weights in bf16) packed as OUT/hf.tar split into pieces < 16 MiB
(hf.tar.00, hf.tar.01, ...), plus OUT/metrics.json and OUT/train.log.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tarfile
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, Regex

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "hf_template")
SPECIALS = ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>", "<|fim_suf|>",
            "<|im_start|>", "<|im_end|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>",
            "<|tool_call_end|>", "<|tool_response_start|>", "<|tool_response_end|>"]
BOS = 1

LOG = None


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG:
        LOG.write(s + "\n")
        LOG.flush()


def build_tokenizer(train_text, vocab_size):
    skel = json.load(open(os.path.join(TEMPLATE, "tokenizer_skeleton.json"), encoding="utf-8"))
    regex = skel["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    docs = train_text.split("\n\n")
    tok.train_from_iterator(docs, trainer=trainer)
    trained = json.loads(tok.to_str())
    # Everything but the BPE tables comes from the LFM2 skeleton (added tokens, pre-tokenizer, BOS
    # post-processor, decoder); ignore_merges as in LFM2 / Llama-3.
    skel["model"]["vocab"] = trained["model"]["vocab"]
    skel["model"]["merges"] = trained["model"]["merges"]
    skel["model"]["ignore_merges"] = True
    for i, s in enumerate(SPECIALS):
        assert skel["added_tokens"][i]["content"] == s and skel["added_tokens"][i]["id"] == i
        assert skel["model"]["vocab"][s] == i, (s, skel["model"]["vocab"].get(s))
    return skel


def encode_docs(tok, text):
    # Documents are joined by one blank line; encoding "doc\n\n" pieces equals encoding the whole text
    # (the pre-tokenizer splits after a newline run), and is much faster in a batch.
    docs = text.split("\n\n")
    pieces = [d + "\n\n" for d in docs[:-1]] + [docs[-1]]
    ids = []
    for e in tok.encode_batch(pieces, add_special_tokens=False):
        ids.extend(e.ids)
    return ids


def chunked_ppl(model, tokens, n_ctx, device):
    """llama-perplexity: tokens (BOS first) cut into floor(n/n_ctx) chunks; each evaluated from an empty
    context with its first token replaced by BOS; positions n_ctx/2 .. n_ctx-2 predict the next token."""
    n_chunk = len(tokens) // n_ctx
    first = n_ctx // 2
    nll = 0.0
    nll2 = 0.0
    count = 0
    model.eval()
    with torch.no_grad():
        for c in range(n_chunk):
            chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
            chunk[0] = BOS
            x = torch.tensor([chunk], device=device)
            logits = model(input_ids=x).logits[0].double()
            lp = torch.log_softmax(logits[first:n_ctx - 1], dim=-1)
            tgt = x[0, first + 1:n_ctx]
            v = -lp.gather(1, tgt[:, None])[:, 0]
            nll += v.sum().item()
            nll2 += (v * v).sum().item()
            count += v.numel()
    mean = nll / count
    var = nll2 / count - mean * mean
    err = math.sqrt(var / (count - 1)) * math.exp(mean) if var > 0 else 0.0
    return math.exp(mean), err, n_chunk, count


def add_dropout(model, p):
    """Training-only dropout on the output of every token mixer (conv / attention), every feed-forward block
    and the embedding (LFM2 has none of its own; the corpus is small). Inactive in eval mode; the saved model
    has no trace of it."""
    if p <= 0:
        return 0
    def hook(mod, inp, out):
        if not mod.training:
            return out
        if isinstance(out, tuple):
            return (torch.nn.functional.dropout(out[0], p, True),) + tuple(out[1:])
        return torch.nn.functional.dropout(out, p, True)
    n = 0
    for layer in model.model.layers:
        for name in ("self_attn", "conv", "feed_forward"):
            if hasattr(layer, name):
                getattr(layer, name).register_forward_hook(hook)
                n += 1
    model.model.embed_tokens.register_forward_hook(hook)
    return n + 1


def train_one(args, hp, train_seconds, tok, train_ids, valid_ids, dev):
    torch.manual_seed(args.seed)
    from transformers import Lfm2Config, Lfm2ForCausalLM
    layer_types = ["conv" if c == "C" else "full_attention" for c in args.layers]
    cfg = Lfm2Config(vocab_size=tok.get_vocab_size(), hidden_size=hp['hidden'], intermediate_size=hp['ff'],
                     num_hidden_layers=len(layer_types), num_attention_heads=hp['heads'],
                     num_key_value_heads=hp['kv_heads'], max_position_embeddings=4096, norm_eps=1e-5,
                     conv_bias=False, conv_L_cache=3, block_auto_adjust_ff_dim=False, layer_types=layer_types,
                     tie_word_embeddings=True, bos_token_id=1, eos_token_id=7, pad_token_id=0,
                     rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"}, initializer_range=0.02)
    model = Lfm2ForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.get_input_embeddings().weight.numel()
    n_drop = add_dropout(model, hp["dropout"])
    log(f"model: {n_params} parameters ({n_embed} in the tied embedding), layers {layer_types}, dropout {hp['dropout']} on {n_drop} branches")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    train_gpu = train_ids.to(dev)
    tokens_per_step = args.batch * args.seq

    def batch():
        starts = torch.randint(0, len(train_ids) - args.seq - 1, (args.batch,), generator=gen).to(dev)
        idx = starts[:, None] + torch.arange(args.seq + 1, device=dev)[None, :]
        b = train_gpu[idx]
        b[:, 0] = BOS
        return b[:, :-1], b[:, 1:]

    def valid_loss():
        ppl, _, _, _ = chunked_ppl(model, valid_ids, args.seq, dev)
        model.train()
        return math.log(ppl)

    # Measure speed over the first steps, then fix the schedule: as many steps as fit in train_seconds,
    # but no more than max_epochs passes over the training tokens.
    warm = 100
    total = None
    step = 0
    best = (float("inf"), -1, None)
    model.train()
    t_train = time.time()
    history = []
    while True:
        if total is None and step == 30:
            torch.cuda.synchronize()
            t_probe = time.time()
        if total is None and step == 30 + 50:
            torch.cuda.synchronize()
            sps = 50 / (time.time() - t_probe)
            budget = train_seconds - (time.time() - t_train)
            by_time = int(step + budget * sps * 0.93)  # leave room for evaluations
            by_epochs = int(hp['max_epochs'] * len(train_ids) / tokens_per_step)
            total = max(step + 10, min(by_time, by_epochs))
            log(f"speed: {sps:.1f} steps/s = {sps * tokens_per_step / 1e6:.2f} M tokens/s; schedule {total} steps "
                f"(time allows {by_time}, {hp['max_epochs']} epochs = {by_epochs})")
        T = total if total is not None else 10 ** 9
        lr = args.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / T))))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        done = total is not None and step >= total
        if step % args.eval_every == 0 or done:
            vl = valid_loss()
            tl = loss.item()
            el = time.time() - t_train
            history.append({"step": step, "train_loss": tl, "valid_loss": vl, "lr": lr, "seconds": el})
            mark = ""
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
                mark = " *"
            log(f"step {step}/{total} train {tl:.4f} valid {vl:.4f} (ppl {math.exp(vl):.2f}) lr {lr:.2e} "
                f"{el:.0f}s{mark}")
        if done:
            break
    train_secs = time.time() - t_train
    log(f"trained {step} steps, {step * tokens_per_step} tokens ({step * tokens_per_step / len(train_ids):.2f} epochs) "
        f"in {train_secs:.0f}s; best valid loss {best[0]:.4f} at step {best[1]}")
    model.load_state_dict(best[2])
    return {"model": model, "cfg": cfg, "hp": hp, "params": n_params, "embedding_params": n_embed, "steps": step,
            "tokens_per_step": tokens_per_step, "train_seconds": train_secs, "best_valid_loss": best[0],
            "best_step": best[1], "history": history}



def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-seconds", type=float, default=390)
    ap.add_argument("--max-epochs", type=float, default=12.0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=str, default="CCACCACA")  # C conv, A full attention
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--sweep", type=str, default="",
                    help="';'-separated configs 'hidden,ff,heads,kv_heads,dropout,epochs'; each is trained in turn "
                         "(train-seconds split by estimated cost) and the one with the lowest validation loss is kept")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    LOG = open(os.path.join(args.out, "train.log"), "w")
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t_start = time.time()
    log("torch", torch.__version__, "device", torch.cuda.get_device_name(0), "args", vars(args))

    rd = lambda n: open(os.path.join(args.corpus, n), encoding="utf-8").read()
    train_text, valid_text, held_text, test_text = rd("train.txt"), rd("valid.txt"), rd("heldout.txt"), rd("heldout_test.txt")

    # 1. tokenizer
    t0 = time.time()
    tj = build_tokenizer(train_text, args.vocab)
    tok = Tokenizer.from_str(json.dumps(tj, ensure_ascii=False))
    log(f"tokenizer: vocab {tok.get_vocab_size()} merges {len(tj['model']['merges'])} in {time.time() - t0:.1f}s")
    train_ids = torch.tensor(encode_docs(tok, train_text), dtype=torch.long)
    valid_ids = tok.encode(valid_text).ids  # whole text, BOS added by the post-processor (as cera does)
    held_ids = tok.encode(held_text).ids
    test_ids = tok.encode(test_text).ids
    assert held_ids[0] == BOS and encode_docs(tok, held_text) == held_ids[1:], "doc-wise encoding differs"
    log(f"tokens: train {len(train_ids)} valid {len(valid_ids)} heldout {len(held_ids)} test slice {len(test_ids)} "
        f"({len(train_text) / len(train_ids):.2f} chars/token)")

    # 2. model(s)
    configs = []
    if args.sweep:
        for c in args.sweep.split(";"):
            h, ff, nh, nkv, dr, ep = c.split(",")
            configs.append(dict(hidden=int(h), ff=int(ff), heads=int(nh), kv_heads=int(nkv), dropout=float(dr),
                                max_epochs=float(ep)))
    else:
        configs.append(dict(hidden=args.hidden, ff=args.ff, heads=args.heads, kv_heads=args.kv_heads,
                            dropout=args.dropout, max_epochs=args.max_epochs))
    cost = [c["max_epochs"] * (c["hidden"] / 384) ** 1.5 for c in configs]
    runs = []
    best_run = None
    for ci, c in enumerate(configs):
        seconds = args.train_seconds * cost[ci] / sum(cost)
        log(f"=== config {ci}: {c}, time budget {seconds:.0f}s")
        r = train_one(args, c, seconds, tok, train_ids, valid_ids, dev)
        runs.append({k: v for k, v in r.items() if k not in ("model", "cfg")})
        if best_run is None or r["best_valid_loss"] < best_run["best_valid_loss"]:
            best_run = r
        else:
            del r
        torch.cuda.empty_cache()
    log("sweep: " + "; ".join(f"{r['hp']} -> valid {r['best_valid_loss']:.4f}" for r in runs))
    model, cfg = best_run["model"], best_run["cfg"]
    n_params, n_embed = best_run["params"], best_run["embedding_params"]
    step, tokens_per_step, train_secs = best_run["steps"], best_run["tokens_per_step"], best_run["train_seconds"]
    best = (best_run["best_valid_loss"], best_run["best_step"])
    history = best_run["history"]
    log(f"kept config {best_run['hp']}: best valid loss {best[0]:.4f} at step {best[1]}")

    # 3. bf16 weights (what is saved), evaluated in float32
    model = model.to(torch.bfloat16).to(torch.float32)
    held = chunked_ppl(model, held_ids, args.seq, dev)
    test = chunked_ppl(model, test_ids, args.seq, dev)
    test256 = chunked_ppl(model, test_ids, 256, dev)
    log(f"held-out PPL (n_ctx {args.seq}, float32 of bf16 weights): {held[0]:.4f} +/- {held[1]:.5f} "
        f"({held[2]} chunks, {held[3]} scored tokens)")
    log(f"test-slice PPL n_ctx {args.seq}: {test[0]:.4f} +/- {test[1]:.5f} ({test[2]} chunks); "
        f"n_ctx 256: {test256[0]:.4f} +/- {test256[1]:.5f} ({test256[2]} chunks)")

    # greedy samples, for the log
    samples = {}
    for prompt in ["In the beginning", "The meaning of life is", "And the LORD said unto Moses,", "A computer"]:
        try:
            ids = torch.tensor([tok.encode(prompt).ids], device=dev)
            with torch.no_grad():
                outp = model.generate(ids, max_new_tokens=48, do_sample=False, pad_token_id=0)
            samples[prompt] = tok.decode(outp[0, ids.shape[1]:].tolist())
        except Exception as e:  # samples are for the log only
            samples[prompt] = f"(generate failed: {e})"
        log(f"sample: {prompt!r} -> {samples[prompt]!r}")

    # 4. the HF folder
    hf = os.path.join(args.out, "hf")
    if os.path.exists(hf):
        shutil.rmtree(hf)
    model.to(torch.bfloat16).save_pretrained(hf, safe_serialization=True)
    with open(os.path.join(hf, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)
    for n in ["tokenizer_config.json", "chat_template.jinja", "generation_config.json"]:
        shutil.copy(os.path.join(TEMPLATE, n), os.path.join(hf, n))
    with open(os.path.join(hf, "heldout_test_ids.json"), "w") as f:
        json.dump(test_ids, f)
    metrics = {
        "params": n_params, "embedding_params": n_embed, "config": cfg.to_dict(), "steps": step,
        "sweep": runs, "kept": best_run["hp"], "tokens_per_step": tokens_per_step, "tokens_seen": step * tokens_per_step, "train_tokens": len(train_ids),
        "train_seconds": train_secs, "train_seconds_all": sum(r["train_seconds"] for r in runs), "best_step": best[1], "best_valid_loss": best[0], "history": history,
        "heldout_ppl": {"n_ctx": args.seq, "ppl": held[0], "err": held[1], "chunks": held[2], "scored": held[3]},
        "test_slice_ppl": {"n_ctx": args.seq, "ppl": test[0], "err": test[1], "chunks": test[2], "scored": test[3]},
        "test_slice_ppl_256": {"n_ctx": 256, "ppl": test256[0], "err": test256[1], "chunks": test256[2]},
        "samples": samples, "total_seconds": time.time() - t_start, "args": vars(args),
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1, default=str)
    tar_path = os.path.join(args.out, "hf.tar")
    with tarfile.open(tar_path, "w") as t:
        t.add(hf, arcname="hf")
    shutil.rmtree(hf)
    data = open(tar_path, "rb").read()
    os.remove(tar_path)
    piece = 15 * 1024 * 1024
    for i in range(0, len(data), piece):
        with open(f"{tar_path}.{i // piece:02d}", "wb") as f:
            f.write(data[i:i + piece])
    log(f"wrote {tar_path}.* ({len(data)} bytes), total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
