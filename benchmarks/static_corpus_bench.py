"""How many released kernels the static checks refuse, and why, read without building or running
anything: CUDA-L1's `custom_code` rows (deepreinforce-ai/CUDA-L1, optimized_cuda_code/*.json, one
JSON object a line) and the KernelBench leaderboard's solutions (anneouyang/KernelBenchLeaderboard,
docs/assets/solutions/*.py), where fetched.

    scripts/fetch_corpora.sh                      # once: clones the corpora into ./corpora
    python benchmarks/static_corpus_bench.py [--corpus corpora/CUDA-L1] [--leaderboard corpora/KernelBenchLeaderboard]
                                             [--policy relaxed] [--top 15] [--json OUT]

Prints markdown tables: per file the rows with code, those refused, those among them refused
because the solution itself cannot run (a syntax error, a name defined nowhere: a verdict on its
merits, which the runtime would give too) and the share refused by policy; the rules behind the
refusals (a row counts once per rule it breaks, and once for its first finding); the most common
messages (what exactly was refused).
Rows whose custom_code is missing or "None" are left out (CUDA-L1 released no kernel for them).
Run it on another checkout (PYTHONPATH=that/src) to compare two versions of the checks.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import time
from pathlib import Path

FILES = ("a100", "3090", "l40", "h20", "h100")


# Findings that say the solution cannot run at all, whatever the policy: a verdict on its merits.
BROKEN = {"syntax", "undefined-name"}


def sources(corpus: Path, leaderboard: Path | None) -> dict[str, list[str]]:
    """model_new.py texts by file: CUDA-L1's GPU files, then the leaderboard's solutions."""
    out = {}
    for name in FILES:
        path = corpus / "optimized_cuda_code" / f"{name}.json"
        if path.exists():
            items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            out[f"CUDA-L1 {name}"] = [r["custom_code"] for r in items if r.get("custom_code") not in (None, "", "None")]
    solutions = leaderboard / "docs" / "assets" / "solutions" if leaderboard else None
    if solutions and solutions.is_dir():
        out["leaderboard"] = [p.read_text() for p in sorted(solutions.glob("*.py"))]
    if not out:
        raise SystemExit(f"no optimized_cuda_code/*.json under {corpus}: run scripts/fetch_corpora.sh first")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("corpora/CUDA-L1"))
    parser.add_argument("--leaderboard", type=Path, default=Path("corpora/KernelBenchLeaderboard"))
    parser.add_argument("--policy", default="relaxed")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from cuda_agent.harness.static import check_solution

    t0 = time.perf_counter()
    per_file, any_rule, first_rule = {}, collections.Counter(), collections.Counter()
    messages = collections.Counter()
    for name, code in sources(args.corpus, args.leaderboard).items():
        refused = broken = 0
        for source in code:
            report = check_solution({"model_new.py": source}, args.policy)
            if not report.ok:
                refused += 1
                broken += any(f.rule in BROKEN for f in report.findings)
                any_rule.update({f.rule for f in report.findings})
                messages.update({(f.rule, re.sub(r"\d+", "N", f.message.split(":")[0])[:90]) for f in report.findings})
                first_rule[report.findings[0].rule] += 1
        per_file[name] = (len(code), refused, broken)
    print(f"## Released kernels, static checks only, policy {args.policy} ({time.perf_counter() - t0:.0f} s)\n")
    print("| file | rows with code | refused | of which broken | refused by policy |\n|---|---:|---:|---:|---:|")
    groups = {"CUDA-L1 all": [v for k, v in per_file.items() if k.startswith("CUDA-L1")], "all": list(per_file.values())}
    for name, (n, r, b) in [*per_file.items(), *((k, tuple(map(sum, zip(*v)))) for k, v in groups.items() if v)]:
        print(f"| {name} | {n} | {r} | {b} | {(r - b) / max(n, 1):.1%} |")
    print("\n| rule | rows breaking it | rows where it is the first finding |\n|---|---:|---:|")
    for rule, n in any_rule.most_common(args.top):
        print(f"| {rule} | {n} | {first_rule.get(rule, 0)} |")
    print("\n| rule | what (first words of the message) | rows |\n|---|---|---:|")
    for (rule, what), n in messages.most_common(args.top):
        print(f"| {rule} | {what} | {n} |")
    if args.json:
        args.json.write_text(json.dumps({"policy": args.policy, "files": per_file, "rules": any_rule,
                                         "first": first_rule}, indent=1))


if __name__ == "__main__":
    main()
