"""Decoders without / with a KV cache, written the two ways a user writes one (issue 32, INFER030's held-out miss):

  hand_<size>_{nocache,cache}  issue29_inference.py's decoder (imported) in a hand loop, one prof.step() per token:
                               `model(ids)` on the whole sequence + `torch.cat` of the new token, or the same model
                               fed the new token against `past_key_values` (the Fix)
  hf_{nocache,cache}           a Hugging Face Llama (random weights from a LlamaConfig: nothing is downloaded) under
                               `model.generate(ids, use_cache=False)` / `use_cache=True`, one prof.step() per
                               generate() call (a request of NEW_TOKENS tokens): several forwards in each step

3 profiled steps after 1 wait + 1 warm-up step (the held-out pairs' schedule: 2 steady steps once the first is
taken as warm-up), record_shapes=True. Made after INFER030's mechanism was changed and used for no fitting of it.

  python3 decode_kv_pairs.py --out DIR [--only NAME,...] [--steps N]  -> DIR/kv_NAME.pt.trace.json
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))
import issue29_inference as iq  # noqa: E402

HAND = {  # name -> (vocab, d, heads, layers, batch, prompt): the size issue29_inference.decode is given
    "small": (32000, 512, 8, 8, 16, 96),     # launch-bound: kernels of a few us
    "mid": (32000, 1536, 12, 8, 96, 192),    # GPU-bound without the cache
}
HF = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=8,
          vocab_size=32000, max_position_embeddings=1024)
HF_BATCH, HF_PROMPT, NEW_TOKENS = 16, 160, 6


def hand(size_name, use_cache):
    def run(s):
        iq.size = lambda _full, small: HAND[size_name] if iq.CUDA else small  # decode() reads iq.size when called
        iq.decode(s, use_cache)
    return run


def hf(use_cache):
    def run(s):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(**HF, attn_implementation="sdpa")
        dt = torch.bfloat16 if iq.CUDA else torch.float32
        model = LlamaForCausalLM(cfg).to(dt).to(iq.DEV).eval()
        ids = torch.randint(3, cfg.vocab_size, (HF_BATCH, HF_PROMPT), device=iq.DEV)
        mask = torch.ones_like(ids)
        for t in range(s.iters):
            with s.step(t), torch.no_grad():
                model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                               do_sample=False, use_cache=use_cache, pad_token_id=0)
        if iq.CUDA:
            torch.cuda.synchronize()
    return run


WORKLOADS = {**{f"hand_{k}_{v}": hand(k, v == "cache") for k in HAND for v in ("nocache", "cache")},
             "hf_nocache": hf(False), "hf_cache": hf(True)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in (a.only.split(",") if a.only else list(WORKLOADS)):
        t0 = time.time()
        tag = f"kv_{name}"
        iq.TIMELINE[tag] = WORKLOADS[name]
        try:
            iq.run_timeline(tag, "torch", a.steps, a.out)
            print(f"{name}: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:  # one broken workload must not lose the others
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
        if iq.CUDA:
            import torch
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
