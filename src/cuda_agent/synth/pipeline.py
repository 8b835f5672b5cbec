"""From a config to a dataset: the checked catalog, the composer, the run, the files.

`synthesize` is what `cuda-agent synth` calls; it can be called again on the same OUT to resume.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from cuda_agent.synth.filters import Window
from cuda_agent.synth.run import Run, SynthConfig
from cuda_agent.synth.seedcheck import build_catalog, load_catalog, save_catalog
from cuda_agent.synth.seeds import Catalog

COLUMNS = ("name", "code", "ops", "categories", "task_class", "composer", "structure", "eager_ms", "compile_ms",
           "compile_speedup", "nearest_kernelbench", "kernelbench_similarity", "batch", "device", "index",
           "fingerprint", "filter_versions")
_RUN_KEYS = ("composer", "device", "seed")  # a resume must not change these


class SynthError(RuntimeError):
    """A run that cannot start or continue as asked; the message says what to do."""


def _config_json(config: SynthConfig) -> dict:
    d = asdict(config)
    d["out"] = str(config.out)
    d["kernelbench"] = str(config.kernelbench) if config.kernelbench else None
    d["window"] = asdict(config.resolved_window())
    return d


def _check_resume(config: SynthConfig) -> None:
    path = config.state_dir / "config.json"
    if path.exists():
        old = json.loads(path.read_text())
        changed = [k for k in _RUN_KEYS if old.get(k) != _config_json(config)[k]]
        if changed:
            k = changed[0]
            raise SynthError(f"{config.out} was started with {k}={old.get(k)!r}, not {_config_json(config)[k]!r}; "
                             f"resume with the same {k}, or write to another --out")
    config.state_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_config_json(config), indent=1))


def run_catalog(config: SynthConfig, progress: Callable | None = None) -> Catalog:
    """The run's catalog: the one saved in its state folder (resume), else freshly checked."""
    path = config.state_dir / "seeds.json"
    if path.exists():
        return load_catalog(path)
    from cuda_agent.home import subdir

    catalog = build_catalog(config.device, config.state_dir / "work" / "seeds",
                            cache=subdir("synth") / f"seeds-{config.device}.json", progress=progress,
                            families=config.hf_families)
    save_catalog(catalog, path, config.device, config.hf_families)
    return catalog


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
            raise SynthError("writing Parquet needs pyarrow: pip install 'cuda-agent[data]', "
                             "or give an --out ending in .jsonl") from None
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
               on_seed: Callable | None = None, service=None) -> tuple[list[dict], list[Path], Run]:
    """Run (or resume) until `count` tasks are accepted; write the dataset and return its rows.
    The candidates run on `service` (an EvalService), else on one started for the run."""
    _check_resume(config)
    catalog = run_catalog(config, on_seed)
    composer = make_composer(config, catalog, llm)
    run = Run(config, composer, on_record)
    try:
        rows = run.run(service)
    finally:
        run.journal.close()
    return rows, write_dataset(rows, config.out, config.jsonl), run


def default_window(device: str, text: str | None) -> Window:
    return Window.parse(text) if text else Window.for_device(device)
