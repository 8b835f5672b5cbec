"""How well a model fills the kernel: its replies to the held-out prompts of rl/data/fill.py, judged by the
harness through the reward route (the same verdicts PPO trains on).

    python -m cuda_agent.rl.tools.fill_eval --model FOLDER --device cuda --out stage.json [--sampled 4] [--tier 2]

Greedy replies to every held-out prompt give `pass` (share judged correct), `compile` (share that
built), `reward_mean`; `--sampled K` adds K sampled replies per prompt (temperature 1) and the same
figures over them. Per-prompt verdicts go beside the summary, split by seen and unseen operators.
`--tier 2` asks tier 2's prompts (the expression and EPT) and times every correct reply, adding the
shares faster than eager and than torch.compile, and how often each EPT was chosen.

The multi-turn form (rl/data/fill_agent.py) is run by `cuda-agent train fill_collect`; its runs are read here:

    python -m cuda_agent.rl.tools.fill_eval --runs RUN/fill_collect/runs --out turns.json

gives the share of runs that had passed by turn k (and by the k-th verification), for every k, overall
and for the operators seen in training and those held out whole.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
import json
import os
import time
from pathlib import Path
from typing import Any

from cuda_agent.rl.data import fill
from cuda_agent.rl.data.rows import FILL
from cuda_agent.rl.workers.reward import compute_score


def load_model(folder: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    return tok, model


def generate(tok, model, conversations: list[list[dict[str, str]]], *, sample: bool, max_new_tokens: int = 64,
             batch: int = 64, seed: int = 0) -> list[str]:
    """One reply per conversation (greedy, or sampled at temperature 1)."""
    import torch

    torch.manual_seed(seed)
    out: list[str] = []
    for i in range(0, len(conversations), batch):
        texts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
                 for c in conversations[i:i + batch]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=sample,
                                 temperature=1.0 if sample else None, top_p=None, top_k=None,
                                 pad_token_id=tok.pad_token_id)
        out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


async def _judge_all(rows: list[dict[str, Any]], replies: list[str], reward_kwargs: dict[str, Any]) -> list[dict]:
    jobs = [compute_score(FILL, reply, row["reward_model"]["ground_truth"], row["extra_info"], **reward_kwargs)
            for row, reply in zip(rows, replies)]
    return list(await asyncio.gather(*jobs))


def judge(rows: list[dict[str, Any]], replies: list[str], reward_kwargs: dict[str, Any]) -> list[dict]:
    """The reward route's verdict on each reply (equal replies to one task are judged once)."""
    return asyncio.run(_judge_all(rows, replies, reward_kwargs))


def evaluate_model(folder: str, device: str, sampled: int = 0, reward_kwargs: dict[str, Any] | None = None,
                   limit: int | None = None, tier: int = 1) -> dict[str, Any]:
    """The summary and per-prompt verdicts of one model on the held-out prompts of a tier."""
    items = fill.items("val", device, tier)[:limit]
    rows = [fill.fill_row(it, i, device) for i, it in enumerate(items)]
    convs = [it.messages() for it in items]
    kwargs = {"device": device, **(reward_kwargs or {})}
    t0 = time.monotonic()
    tok, model = load_model(folder, device)
    greedy = generate(tok, model, convs, sample=False)
    samples = [generate(tok, model, convs, sample=True, seed=k + 1) for k in range(sampled)]
    t_gen = time.monotonic() - t0
    verdicts = judge(rows, greedy, kwargs)
    sampled_verdicts = [judge(rows, s, kwargs) for s in samples]
    out: dict[str, Any] = {"model": folder, "device": device, "tier": tier, "prompts": len(items),
                           **fill.summary_of(verdicts),
                           "seen_ops": fill.summary_of([v for v, it in zip(verdicts, items) if it.op.seen]),
                           "unseen_ops": fill.summary_of([v for v, it in zip(verdicts, items) if not it.op.seen]),
                           "seconds": {"generate": round(t_gen, 1), "judge": round(time.monotonic() - t0 - t_gen, 1)}}
    if tier == 2:
        out["ept_chosen"] = choices(greedy)
    if sampled:
        flat = [v for vs in sampled_verdicts for v in vs]
        out["sampled"] = {"k": sampled, **fill.summary_of(flat)}
    out["replies"] = [{"op": it.op.name, "seen": it.op.seen, "answer": it.answer, "reply": r, "score": v["score"],
                       "milestone": v["milestone"], "stage": v["stage"], "reason": v["reason"][:160]}
                      for it, r, v in zip(items, greedy, verdicts)]
    return out


def choices(replies: list[str]) -> dict[str, int]:
    """How often each EPT was chosen by tier-2 replies that passed the guard (`none`: refused)."""
    parsed = (fill.tier2_reply(reply)[0] for reply in replies)
    return dict(sorted(Counter(str(p[1]) if p else "none" for p in parsed).items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.rl.tools.fill_eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a Hugging Face model folder")
    ap.add_argument("--runs", nargs="+", help="instead: folders of agent runs (fill_collect's runs/): "
                                                "pass after turn k")
    ap.add_argument("--device", default=None, help="cuda | cpu (default: this machine's)")
    ap.add_argument("--out", required=True, help="the JSON file written")
    ap.add_argument("--sampled", type=int, default=0, help="sampled replies per prompt, beside the greedy one")
    ap.add_argument("--limit", type=int, default=None, help="only the first N held-out prompts (a quick look)")
    ap.add_argument("--build-workers", type=int, default=None, help="builders of the reward route")
    ap.add_argument("--tier", type=int, default=1, choices=fill.TIERS,
                    help="the family's tier (2: the expression and EPT)")
    ap.add_argument("--profile", action="store_true",
                    help="time the correct replies too (reward 2-3 possible); default: correctness only, as tier 1 "
                         "trains (tier 2 always times)")
    ap.add_argument("--evaluators", type=int, default=None,
                    help="CPU backend: evaluations at once (default: half the cores)")
    args = ap.parse_args(argv)
    if bool(args.model) == bool(args.runs):
        ap.error("give --model (the single-turn prompts, judged now) or --runs (agent runs, read)")
    if args.runs:
        from cuda_agent.rl.data.fill_agent import runs_summary

        return _write(runs_summary(args.runs), args.out)
    from cuda_agent.devices import default_device

    device = args.device or default_device()
    kwargs: dict = {"profile": args.profile or args.tier == 2}
    if args.build_workers is not None:
        kwargs["build_workers"] = args.build_workers
    if device == "cpu":
        kwargs["evaluators"] = args.evaluators or max(1, (os.cpu_count() or 2) // 2)
    return _write(evaluate_model(args.model, device, args.sampled, kwargs, args.limit, args.tier), args.out)


def _write(result: dict[str, Any], out: str) -> int:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "replies"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
