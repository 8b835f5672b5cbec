"""From a config to a dataset: the checked catalog, the composer, the run, the files.

`synthesize` is what `cuda-agent synth` calls; it can be called again on the same OUT to resume.
The catalog comes from the run's own state (a resume), else from `config.seeds` (a catalog saved by
an earlier run, carried to a fresh machine), else from the crawl (cached under CUDA_AGENT_HOME).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Callable

from cuda_agent.measure import TimingPlan
from cuda_agent.synth.execute import Limits
from cuda_agent.synth.filters import Window
from cuda_agent.synth.mix import Mix
from cuda_agent.synth.run import Run, SynthConfig
from cuda_agent.synth.seedcheck import CatalogError, build_catalog, load_catalog, mismatch, save_catalog
from cuda_agent.synth.seeds import Catalog
from cuda_agent.usage import UsageError

COLUMNS = ("name", "code", "ops", "categories", "task_class", "composer", "structure", "eager_ms", "compile_ms",
           "compile_speedup", "nearest_kernelbench", "kernelbench_similarity", "batch", "device", "index",
           "fingerprint", "filter_versions")
_RUN_KEYS = ("composer", "device", "seed")  # a resume must not change these


class SynthError(UsageError, RuntimeError):
    """A run that cannot start or continue as asked; the message says what to do."""


def _config_json(config: SynthConfig) -> dict:
    d = asdict(config)
    d.pop("retime")  # what one call asked for; the plans it led to are `timing` and `timings_before`
    d["out"] = str(config.out)
    d["kernelbench"] = str(config.kernelbench) if config.kernelbench else None
    d["seeds"] = str(config.seeds) if config.seeds else None
    d["window"] = asdict(config.resolved_window())
    d["timings_before"] = list(config.timings_before)
    return d


def config_from_json(d: dict, **changes) -> SynthConfig:
    """The SynthConfig a config.json holds (what `_config_json` wrote), with `changes`."""
    known = {f.name for f in fields(SynthConfig)}
    kw = {k: v for k, v in d.items() if k in known}
    kw["out"] = Path(kw["out"])
    for k in ("kernelbench", "seeds"):
        kw[k] = Path(kw[k]) if kw.get(k) else None
    kw["window"] = Window(**kw["window"]) if kw.get("window") else None
    if kw.get("timing"):
        kw["timing"] = TimingPlan.from_dict(kw["timing"])
    if kw.get("limits"):
        kw["limits"] = Limits(**kw["limits"])
    kw["mix"] = Mix.from_dict(kw["mix"]) if kw.get("mix") else None
    kw["hf_families"] = tuple(kw["hf_families"]) if kw.get("hf_families") is not None else None
    kw["timings_before"] = tuple(kw.get("timings_before") or ())
    return replace(SynthConfig(**kw), **changes)


def _mix_text(mix: dict | None) -> str:
    """A config.json's mix as `--mix` writes it (a run from before mixes drew any seed: `free`)."""
    return Mix.from_dict(mix).text() if mix else "free"


def _check_resume(config: SynthConfig, note: Callable[[str], None] = lambda text: None) -> SynthConfig:
    """The config a run goes on with: refused where it would change what a candidate index is, and with
    the run's own timing plan where it had one (a set's figures all timed alike, as its catalog is fixed)
    unless `config.retime` (its new candidates timed with `config.timing`, the run's earlier plans kept)."""
    path = config.state_dir / "config.json"
    if path.exists():
        old = json.loads(path.read_text())
        before = tuple(old.get("timings_before") or ())
        if old.get("timing") and old["timing"] != config.timing.to_dict():
            if config.retime:
                note(f"retiming {config.out}: its new candidates are timed with plan {config.timing.key()} "
                     f"({config.timing.to_dict()}); those it has keep plan "
                     f"{TimingPlan.from_dict(old['timing']).key()} ({old['timing']})")
                before += (old["timing"],)
            else:
                note(f"resuming {config.out} with the timing plan it started with ({old['timing']}), not "
                     f"{config.timing.to_dict()} (--retime times its new candidates with the latter)")
                config = replace(config, timing=TimingPlan.from_dict(old["timing"]))
        config = replace(config, timings_before=before)
        new = _config_json(config)
        new_mix = new["mix"]
        if old.get("mix") != new_mix:  # the mix fixes which class each candidate index is composed for
            raise SynthError(f"{config.out} was started with --mix {_mix_text(old.get('mix'))}, not --mix "
                             f"{_mix_text(new_mix)}; resume with the same --mix, or write to another --out")
        changed = [k for k in _RUN_KEYS if old.get(k) != new[k]]
        if changed:
            k = changed[0]
            raise SynthError(f"{config.out} was started with {k}={old.get(k)!r}, not {new[k]!r}; "
                             f"resume with the same {k}, or write to another --out")
    config.state_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_config_json(config), indent=1))
    return config


def run_catalog(config: SynthConfig, progress: Callable | None = None,
                note: Callable[[str], None] | None = None) -> tuple[Catalog, str]:
    """The run's catalog and where it came from: the one saved in its state folder (a resume keeps
    its catalog, whatever made it), else `config.seeds` when it was made for this device, torch,
    transformers and families, else the crawl (cached). The run's copy is `seeds.json` in its
    state folder, the file to carry to the next machine."""
    note = note or (lambda text: None)
    path = config.state_dir / "seeds.json"
    if path.exists():
        why = mismatch(path, config.device, config.hf_families)
        if why:
            note(f"this run's catalog {path} was made elsewhere ({why}); a run keeps its catalog: "
                 "seeds that do not run here are rejected as candidates")
        return load_catalog(path), f"the run's own, {path}"
    if config.seeds is not None:
        if not config.seeds.exists():
            raise SynthError(f"--seeds {config.seeds}: no such file; give a catalog a run saved (its seeds.json), "
                             "or leave --seeds out to crawl")
        why = mismatch(config.seeds, config.device, config.hf_families)
        if why is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(config.seeds, path)
            return load_catalog(path), str(config.seeds)
        note(f"--seeds {config.seeds} was made for another setting ({why}); its transformers blocks may be "
             f"missing or behave otherwise here, so the catalog is crawled again, into {path}")
    from cuda_agent.home import subdir

    cache = subdir("synth") / f"seeds-{config.device}.json"
    try:
        cached = cache.exists() and mismatch(cache, config.device, config.hf_families) is None
    except CatalogError:   # a damaged cache: build_catalog crawls again
        cached = False
    catalog = build_catalog(config.device, config.state_dir / "work" / "seeds", cache=cache, progress=progress,
                            families=config.hf_families, log=config.state_dir / "crawl.log", note=note)
    save_catalog(catalog, path, config.device, config.hf_families)
    return catalog, f"the cache {cache}" if cached else "the crawl"


def make_composer(config: SynthConfig, catalog: Catalog, llm=None):
    if config.composer == "program":
        from cuda_agent.synth.compose import ProgramComposer

        return ProgramComposer(catalog.usable(), config.seed, max_ops=config.mix.max_ops if config.mix else 5)
    if config.composer == "llm":
        from cuda_agent.synth.llm_compose import LLMComposer

        if llm is None:
            raise SynthError("--composer llm needs a model endpoint: pass --model and --base-url "
                             "(or set CUDA_AGENT_MODEL and OPENAI_BASE_URL)")
        return LLMComposer(llm, catalog.usable(), config.seed)
    raise SynthError(f"unknown composer {config.composer!r}: use program or llm")


def write_dataset(rows: list[dict], out: Path, jsonl: bool = False) -> list[Path]:
    """The accepted tasks as Parquet at `out` (JSONL when `out` ends in .jsonl; both with `jsonl`)."""
    rows = [{k: r.get(k) for k in COLUMNS} for r in rows]
    written = []
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix != ".jsonl":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise SynthError("writing Parquet needs pyarrow: pip install pyarrow (a dependency of cuda-agent: "
                             "`bash scripts/setup.sh` installs it), or give an --out ending in .jsonl") from None
        tmp = out.with_name(out.name + ".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(out)
        written.append(out)
    if out.suffix == ".jsonl" or jsonl:
        path = out if out.suffix == ".jsonl" else out.with_suffix(".jsonl")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)
        written.append(path)
    return written


def synthesize(config: SynthConfig, llm=None, on_record: Callable[[dict], None] | None = None,
               on_seed: Callable | None = None, service=None,
               note: Callable[[str], None] | None = None) -> tuple[list[dict], list[Path], Run]:
    """Run (or resume) until `count` tasks are accepted, or `config.max_seconds` (counted from
    this call, the catalog included) have passed; write the dataset and return its rows. The
    candidates run on `service` (an EvalService), else on one started for the run. `note` hears of
    each phase as it ends; `run.phases` has their times."""
    t0 = time.time()
    note = note or (lambda text: None)
    deadline = t0 + config.max_seconds if config.max_seconds is not None else None
    config = _check_resume(config, note)
    catalog, source = run_catalog(config, on_seed, note)
    catalog_s = time.time() - t0
    note(f"seed catalog: {len(catalog.usable())} usable seeds of {len(catalog.seeds)}, from {source}, "
         f"in {catalog_s:.0f} s")
    composer = make_composer(config, catalog, llm)
    run = Run(config, composer, on_record, deadline, note)
    run.phases.catalog_s, run.phases.catalog_from = catalog_s, source
    try:
        rows = run.run(service)
    finally:
        run.journal.close()
    if run.first_claim_at is not None:
        run.phases.first_candidate_s = run.first_claim_at - t0
    t = time.time()
    files = write_dataset(rows, config.out, config.jsonl)
    run.phases.write_s = time.time() - t
    if run.stopped_at_limit:
        note(f"stopped at the time limit: {len(rows)} tasks in the dataset, {len(run.cancelled)} candidates "
             "cut short (a resume runs them again: the same command with the same --out)")
    return rows, files, run


def default_window(device: str, text: str | None) -> Window:
    return Window.parse(text) if text else Window.for_device(device)
