"""`cuda-agent synth`: build a dataset of tasks; `cuda-agent synth seeds`: list the seed catalog.

Register with `app.add_typer(synth_app, name="synth")` (the run is the group's callback, `seeds`
its sub-command), or register `synth_command` and `seeds_command` as plain commands.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cuda_agent.cli.errors import err, fail, positive
from cuda_agent.devices import check_device
from cuda_agent.synth.filters import Window
from cuda_agent.usage import UsageError, output_file, require

out = Console()
synth_app = typer.Typer(help="Synthesize KernelBench-form tasks: seeds, composition, filters.",
                        invoke_without_command=True)
KERNELBENCH_ENV = "CUDA_AGENT_KERNELBENCH"   # the KernelBench JSONL when --kernelbench is not given


def _kernelbench(given: Optional[Path]) -> Optional[Path]:
    """The KernelBench JSONL that synthesized tasks are kept apart from: --kernelbench, else
    $CUDA_AGENT_KERNELBENCH; None with `--kernelbench none`, or (said) when neither is given."""
    if str(given) == "none":
        return None
    path = given or (Path(os.environ[KERNELBENCH_ENV]) if os.environ.get(KERNELBENCH_ENV) else None)
    if path is None:
        err.print(f"[yellow]warning:[/] no KernelBench to compare with, so the similarity filter is off and tasks may "
                  f"copy KernelBench's: give --kernelbench FILE.jsonl (or set ${KERNELBENCH_ENV}), or "
                  "--kernelbench none to skip it knowingly", highlight=False)
        return None
    if not path.is_file():
        where = "--kernelbench" if given else f"${KERNELBENCH_ENV}"
        fail(f"{where} {path}: no such file; give the KernelBench JSONL (one task a line: name, code, level), or "
             "`--kernelbench none` to skip the similarity filter")
    return path


def _llm(model: Optional[str], base_url: Optional[str], api_key: Optional[str]):
    from cuda_agent.llm import Endpoint, ModelError, ModelSettings, OpenAIModel

    try:
        return OpenAIModel(Endpoint.resolve(model, base_url, api_key), ModelSettings())
    except ModelError as e:
        fail(str(e))


def synth_command(
        out_path: Path = typer.Option(..., "--out", help="the dataset to write (.parquet, or .jsonl); run it "
                                                         "again with the same --out to resume"),
        count: int = typer.Option(100, min=1, help="accepted tasks wanted"),
        composer: str = typer.Option("program", help="program (no LLM) or llm"),
        device: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda when a GPU is present)"),
        seed: int = typer.Option(0, help="run seed: candidate i is drawn from (seed, i)"),
        window: Optional[str] = typer.Option(None, help="eager runtime window LOW,HIGH in ms "
                                                        "(default 1,100 on cuda, 0.05,50 on cpu)"),
        similarity: float = typer.Option(0.7, min=0.0, max=1.0, help="reject when this similar to a KernelBench "
                                                                     "task (0..1)"),
        kernelbench: Optional[Path] = typer.Option(None, help="KernelBench JSONL (name, code) to compare with; "
                                                              "`none` to skip"),
        workers: Optional[int] = typer.Option(None, min=1, help="evaluators per GPU (or on the CPU) executing candidates"),
        address: Optional[str] = typer.Option(None, help="a Ray cluster for the evaluation service (default: "
                                                         "$RAY_ADDRESS, else a local Ray)"),
        max_candidates: Optional[int] = typer.Option(None, min=1, help="stop after this many candidates (default 50x count)"),
        mix: str = typer.Option("kernelbench", help="task classes to aim at: `kernelbench` (levels 1-3's shares), "
                                                    "`free` (any seed), or CLASS=SHARE,... e.g. conv=0.5,gemm=0.3,norm=0.2"),
        hf_families: Optional[str] = typer.Option(None, help="transformers model types to crawl blocks from, "
                                                              "comma-separated (default: all; `none` for none)"),
        seeds: Optional[Path] = typer.Option(None, help="start from this saved catalog (a run's seeds.json) when it "
                                                        "was made with this device, torch, transformers and families"),
        max_seconds: Optional[float] = typer.Option(None, min=0.0, help="start no candidate after this "
                                                    "many seconds (the catalog counted); the dataset is written, and "
                                                    "the same command resumes"),
        grace_seconds: float = typer.Option(30.0, min=0.0, help="with --max-seconds: how long candidates in flight "
                                                                "may run on before they are cancelled"),
        quiet_timing: bool = typer.Option(False, "--quiet-timing", help="on a GPU, the size search's timing "
                                          "waits for the other workers' runs (slower; the set's figures are timed "
                                          "alone either way)"),
        retime: bool = typer.Option(False, "--retime", help="a resume times its new candidates with this "
                                    "version's timing plan, not the one the run started with (each task names its plan)"),
        jsonl: bool = typer.Option(False, "--jsonl", help="write JSONL beside the Parquet"),
        model: Optional[str] = typer.Option(None, help="llm composer: the model name"),
        base_url: Optional[str] = typer.Option(None, help="llm composer: the OpenAI-compatible endpoint"),
        api_key: Optional[str] = typer.Option(None, help="llm composer: the API key"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress view"),
        as_json: bool = typer.Option(False, "--json", help="print the summary as JSON")) -> None:
    """Compose and filter tasks until COUNT are accepted; write the dataset and a summary.

    How long: about 90 s to crawl the seed operators (or none with --seeds FILE), then each candidate
    runs eager and torch.compile (seconds each, over --workers); --max-seconds bounds a run, which resumes."""
    from cuda_agent.synth.mix import Mix, MixError
    from cuda_agent.synth.pipeline import SynthError, synthesize
    from cuda_agent.synth.report import funnel, write_report
    from cuda_agent.synth.run import SynthConfig

    from cuda_agent.synth.seedcheck import check_catalog_file

    # everything a user gave is checked here, before the catalog's crawl (minutes) starts
    if out_path.suffix not in (".parquet", ".jsonl"):
        out_path = out_path.with_name(out_path.name + ".parquet")
        err.print(f"--out has no .parquet or .jsonl suffix: writing {out_path}", highlight=False)
    if composer not in ("program", "llm"):
        fail(f"--composer {composer}: use program (no LLM) or llm")
    try:
        dev = check_device(device)
        output_file(out_path, "--out")
        if out_path.suffix == ".parquet":
            require("pyarrow", "synth writes its dataset as Parquet", "pip install pyarrow (a dependency of "
                    "cuda-agent: `bash scripts/setup.sh` installs it), or give an --out ending in .jsonl")
        if seeds is not None:
            check_catalog_file(seeds, "--seeds")
        win = Window.parse(window) if window else None
        target = Mix.parse(mix)
    except UsageError as e:
        fail(str(e))
    kb = _kernelbench(kernelbench)
    llm = _llm(model, base_url, api_key) if composer == "llm" else None
    config = SynthConfig(out=out_path, count=count, composer=composer, device=dev, seed=seed, window=win,
                         similarity_threshold=similarity, kernelbench=kb, workers=workers, address=address,
                         max_candidates=max_candidates, jsonl=jsonl, mix=target, hf_families=_families(hf_families),
                         seeds=seeds, max_seconds=max_seconds, grace_s=grace_seconds, quiet_timing=quiet_timing,
                         retime=retime)
    start = time.time()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=err, disable=quiet)
    with progress:
        seeds_bar = progress.add_task("checking seeds", total=None, note="")
        bar = progress.add_task("accepted", total=count, note="")
        tried = {"n": 0, "ok": 0}

        def on_seed(seed, ok):
            progress.update(seeds_bar, advance=1, note=seed.name)

        def on_record(rec):
            tried["n"] += 1
            tried["ok"] += rec["filter"] == "accepted"
            progress.update(bar, completed=min(count, tried["ok"] + done0),
                            note=f"{tried['n']} tried, last: {rec['filter']}")

        done0 = 0
        try:
            from cuda_agent.journal import read_rows

            done0 = sum(r.get("filter") == "accepted" for r in read_rows(config.state_dir / "candidates.jsonl"))
            progress.update(bar, completed=min(done0, count))
            rows, files, run = synthesize(config, llm, on_record, on_seed,
                                          note=lambda text: progress.console.print(text, highlight=False))
        except (SynthError, MixError, FileNotFoundError) as e:
            fail(str(e))
    records = sorted(run.journal.records.values(), key=lambda r: r["index"])
    report = write_report(records, rows, config.state_dir / "summary.md",
                          title=f"synth {out_path.name} ({composer}, {dev})", wall_s=time.time() - start,
                          kernelbench=kb, target=target.normalized if target else None, device=dev,
                          accepted_in_run=tried["ok"] if done0 else None, timing_plans=run.config.timing_plans())
    summary = {"accepted": len(rows), "candidates": len(records), "files": [str(f) for f in files],
               "summary": str(report), "filters": {f: n for f, n, _ in funnel(records)},
               "stopped_at_limit": run.stopped_at_limit, "cancelled": len(run.cancelled)}
    if as_json:
        print(json.dumps(summary))
        return
    table = Table(title=f"{len(rows)} tasks accepted of {len(records)} candidates")
    for col in ("filter", "rejected", "left"):
        table.add_column(col, justify="left" if col == "filter" else "right")
    for f, n, left in funnel(records):
        table.add_row(f, str(n), str(left))
    out.print(table)
    out.print(f"dataset: {', '.join(summary['files'])}\nsummary: {report}")
    if run.stopped_at_limit:
        err.print(f"[yellow]stopped at --max-seconds with {len(rows)} of {count} tasks[/]: run the same command "
                  "again to go on")
    elif len(rows) < count:
        err.print(f"[yellow]only {len(rows)} of {count} tasks[/]: raise --max-candidates, or widen --window")


def _families(text: Optional[str]) -> Optional[tuple[str, ...]]:
    if text is None:
        return None
    return () if text == "none" else tuple(t.strip() for t in text.split(",") if t.strip())


def seeds_command(device: Optional[str] = typer.Option(None, help="cuda or cpu: where each seed is checked"),
                  check: bool = typer.Option(True, help="run every seed once (in a child process)"),
                  hf_families: Optional[str] = typer.Option(None, help="transformers model types to crawl blocks "
                                                                        "from, comma-separated (default: all)"),
                  show_all: bool = typer.Option(False, "--all", help="list every seed, failed ones too"),
                  as_json: bool = typer.Option(False, "--json", help="one JSON object per seed per line")) -> None:
    """List the seed catalog, with counts per category and per source."""
    from cuda_agent.home import subdir
    from cuda_agent.synth.seedcheck import build_catalog

    dev = check_device(device)
    cache = subdir("synth") / f"seeds-{dev}.json" if check else None
    catalog = build_catalog(dev, subdir("synth") / "seedcheck", cache=cache, check=check,
                            families=_families(hf_families), log=subdir("synth") / "crawl.log",
                            note=lambda text: err.print(text, highlight=False))
    seeds = catalog.seeds if show_all else catalog.usable()
    if as_json:
        for s in seeds:
            print(json.dumps(s.to_dict()))
        return
    table = Table(title=f"{len(catalog.usable())} usable seeds of {len(catalog.seeds)} ({dev})")
    for col in ("name", "category", "source", "layout", "snippet", "checked"):
        table.add_column(col)
    for s in seeds:
        table.add_row(s.name, s.category, s.source, s.layout, s.ctor or s.call,
                      {True: "ok", False: f"failed: {s.note}", None: "-"}[s.checked])
    out.print(table)
    for key in ("category", "source"):
        out.print(f"per {key}: " + ", ".join(f"{k} {n}" for k, n in catalog.counts(key).items()))
    failed = Counter(s.source for s in catalog.seeds if s.checked is False)
    dropped = Counter(d["source"] for d in catalog.dropped)
    out.print(f"dropped by the crawl: {len(catalog.dropped)} ({', '.join(f'{k} {n}' for k, n in dropped.items())}); "
              f"failed their check: {sum(failed.values())} ({', '.join(f'{k} {n}' for k, n in failed.items())})")
    if show_all:
        for d in catalog.dropped:
            out.print(f"  dropped {d['name']} ({d['source']}): {d['reason']}", highlight=False)


@synth_app.callback()
def _synth_group(ctx: typer.Context,
                 out_path: Optional[Path] = typer.Option(None, "--out", help="the dataset to write"),
                 count: int = typer.Option(100, min=1), composer: str = typer.Option("program"),
                 device: Optional[str] = typer.Option(None), seed: int = typer.Option(0),
                 window: Optional[str] = typer.Option(None), similarity: float = typer.Option(0.7, min=0.0, max=1.0),
                 kernelbench: Optional[Path] = typer.Option(None), workers: Optional[int] = typer.Option(None, min=1),
                 address: Optional[str] = typer.Option(None),
                 max_candidates: Optional[int] = typer.Option(None, min=1), jsonl: bool = typer.Option(False, "--jsonl"),
                 mix: str = typer.Option("kernelbench"), hf_families: Optional[str] = typer.Option(None),
                 seeds: Optional[Path] = typer.Option(None),
                 max_seconds: Optional[float] = typer.Option(None, min=0.0),
                 grace_seconds: float = typer.Option(30.0, min=0.0),
                 quiet_timing: bool = typer.Option(False, "--quiet-timing", help="on a GPU, the size search's "
                                                   "timing waits for the other workers' runs"),
                 retime: bool = typer.Option(False, "--retime", help="a resume times its new candidates with "
                                             "this version's timing plan"),
                 model: Optional[str] = typer.Option(None), base_url: Optional[str] = typer.Option(None),
                 api_key: Optional[str] = typer.Option(None), quiet: bool = typer.Option(False, "--quiet", "-q"),
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Synthesize tasks (`--out DATASET`), or list the seed catalog (`seeds`)."""
    if ctx.invoked_subcommand is not None:
        return
    if out_path is None:
        fail("give --out DATASET (.parquet or .jsonl) to synthesize, or `cuda-agent synth seeds` to list seeds")
    synth_command(out_path=out_path, count=count, composer=composer, device=device, seed=seed, window=window,
                  similarity=similarity, kernelbench=kernelbench, workers=workers, address=address,
                  max_candidates=max_candidates, mix=mix, hf_families=hf_families, seeds=seeds,
                  max_seconds=max_seconds, grace_seconds=grace_seconds, quiet_timing=quiet_timing, retime=retime,
                  jsonl=jsonl, model=model, base_url=base_url, api_key=api_key, quiet=quiet, as_json=as_json)


synth_app.command("seeds")(seeds_command)
