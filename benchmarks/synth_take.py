"""A set of COUNT tasks taken from a run's journal, on any machine (no device): the dataset and its
summary.md, as the run itself would write them once it had accepted that many.

    python benchmarks/synth_take.py --out benchmarks/synth_h100_1k/ops.parquet --count 1000

The run's state folder (`<OUT stem>.synth/`: config.json, seeds.json, candidates.jsonl[.gz]) says
everything else: device, seed, mix, window, timing plan. A mix's class streams do not depend on the
count (synth/mix.py), so a longer run's journal copied into the folder gives the same set a run of
COUNT would have made, its first accepted tasks of each class in index order. Where the journal is
short of the set, this says so and writes nothing: resume the run on its device instead
(`benchmarks/device_check.sh synth`). config.json and bench.json (a device run's figures) are left as
they are.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

from cuda_agent.synth.pipeline import config_from_json, make_composer, run_catalog, write_dataset
from cuda_agent.synth.report import write_report
from cuda_agent.synth.run import Run


def _records(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return sum(1 for line in f if line.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the run's dataset (its state folder beside it)")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--recheck", action="store_true",
                    help="first hold the journal's accepted tasks of an older memory filter to the weights limit (their "
                         "code runs in a worker child, on the meta device), then write the set even if it is short, "
                         "as a run stopped by its time limit writes it")
    args = ap.parse_args(argv)
    state = args.out.with_suffix(".synth")
    if not (state / "config.json").exists():
        print(f"no run at {args.out}: {state}/config.json is missing", file=sys.stderr)
        return 2
    journal, packed = state / "candidates.jsonl", state / "candidates.jsonl.gz"
    if packed.exists() and (not journal.exists() or _records(packed) > _records(journal)):
        with gzip.open(packed, "rb") as src, open(journal, "wb") as dst:  # as committed: the journal a resume reads
            shutil.copyfileobj(src, dst)
    old = json.loads((state / "config.json").read_text())
    kb = Path(old["kernelbench"]) if old.get("kernelbench") and Path(old["kernelbench"]).exists() else None
    config = config_from_json(old, out=args.out, count=args.count, kernelbench=kb, max_seconds=0.0)
    catalog, _ = run_catalog(config, note=lambda text: print(text, flush=True))  # the run's own seeds.json
    run = Run(config, make_composer(config, catalog))
    try:
        if args.recheck:
            print(f"{run.recheck_weights()} accepted tasks refused by the weights limit", flush=True)
        short = not run.holds_set()
        rows = run.rows()
    finally:
        run.journal.close()
    if short and not args.recheck:  # config.json and the dataset are left as they are
        print(f"the journal holds {len(rows)} of {args.count} tasks: resume the run on its device "
              "(benchmarks/device_check.sh synth)", file=sys.stderr)
        return 1
    summary = state / "summary.md"   # its last device call's figures (synth_bench's `## Benchmark`) are kept
    bench = summary.read_text().partition("\n## Benchmark\n")[2] if summary.exists() else ""
    files = write_dataset(rows, config.out)
    records = sorted(run.journal.records.values(), key=lambda r: r["index"])
    report = write_report(records, rows, summary,
                          title=f"synth {args.out.name}: {len(rows)} tasks, the first of each class among the "
                                f"{sum(r['filter'] == 'accepted' for r in records)} accepted of the run's journal "
                                f"({len(records)} candidates), program composer, {old['device']}",
                          kernelbench=kb, target=config.mix.normalized if config.mix else None, device=old["device"],
                          timing_plans=config.timing_plans())
    if bench:
        with report.open("a") as f:
            f.write("\n## Benchmark\n" + bench)
    print(f"{len(rows)} tasks: {', '.join(str(f) for f in files)}; summary {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
