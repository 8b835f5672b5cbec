"""Checking the seed catalog: each seed runs once, alone, on small inputs, in the worker child (a
seed that crashes the process is contained and marked failed). Seeds for `any` layout must keep the
shape, because the composer treats them as shape-preserving.

A checked catalog is saved as JSON with what it depends on: the device it was checked on, torch's
and transformers' versions and the transformers families crawled. One saved with other values is
not reused (`mismatch` says how it differs): the blocks it names may be missing or behave otherwise
under another transformers, and a catalog is cheap to make again next to a device call's limit
(imports, crawl and check took about two minutes on the H100 machine, judging by the log's clocks).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from cuda_agent.synth.compose import _DIM_NAMES, _feature_dim, Line, Program, emit
from cuda_agent.synth.execute import Executor
from cuda_agent.synth.crawl import crawl_catalog
from cuda_agent.synth.seeds import SMALL_SHAPES, Catalog, Seed, group_size, render
from cuda_agent.usage import UsageError

CHECK_FEATURES_OUT = 16  # a multiple of every group count (8, 4, 2, 1): grouped convolutions need it


def single_seed_program(seed: Seed) -> Program:
    """A one-op task for `seed` on the small shape of its layout (NCHW for `any`)."""
    layout = "NCHW" if seed.layout == "any" else seed.layout
    dims = SMALL_SHAPES[layout]
    feat_name = _DIM_NAMES[layout][_feature_dim(layout)]
    c = dims[_feature_dim(layout)]
    params = [(feat_name, c)]
    values: dict[str, object] = {"c": feat_name, "heads": group_size(c), "groups": group_size(c), "x": "x"}
    if seed.changes_features:
        params.append(("out_features", CHECK_FEATURES_OUT))
        values["c_out"] = "out_features"
    attr = "op" if seed.ctor else None
    values["m"] = "self.op"
    line = Line("x", render(seed.call, values), seed.name, attr, render(seed.ctor, values) if seed.ctor else None)
    return Program(layout, dims, tuple(params), (line,), seed.imports)


def check_seed(executor: Executor, seed: Seed, device: str) -> tuple[bool, str]:
    program = single_seed_program(seed)
    reply = executor.request({"op": "probe", "code": emit(program), "device": device}, timeout_s=120)
    if not reply.get("ok"):
        return False, str(reply.get("reason", "failed"))[:200]
    if seed.layout == "any" and reply["shapes"] != [list(program.dims)]:
        return False, f"changes the shape {list(program.dims)} -> {reply['shapes'][0]}; `any` seeds must keep it"
    return True, ""


def check_catalog(catalog: Catalog, device: str, workdir: Path,
                  progress: Callable[[Seed, bool], None] | None = None) -> Catalog:
    """Every seed run once in a child on `device`; failures are kept, marked `checked=False`."""
    executor = Executor(workdir)
    results = {}
    try:
        for seed in catalog.seeds:
            ok, why = check_seed(executor, seed, device)
            results[seed.name] = (ok, why)
            if progress:
                progress(seed, ok)
    finally:
        executor.clean()
    return catalog.with_check(results)


def _versions(families: tuple[str, ...] | None) -> dict:
    """What a cached catalog depends on: torch's and transformers' versions and the families crawled."""
    import torch

    try:
        import transformers

        hf = transformers.__version__
    except Exception:
        hf = None
    return {"torch": torch.__version__, "transformers": hf,
            "families": None if families is None else sorted(families)}


def save_catalog(catalog: Catalog, path: Path, device: str, families: tuple[str, ...] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**_versions(families), "device": device, "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "seeds": [s.to_dict() for s in catalog.seeds], "dropped": catalog.dropped}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


class CatalogError(UsageError):
    """A file that is not a saved seed catalog."""


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CatalogError(f"{path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise CatalogError(f"{path}: not a seed catalog (not valid JSON: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("seeds"), list):
        raise CatalogError(f"{path}: not a seed catalog (it has no list of seeds)")
    return data


def load_catalog(path: Path) -> Catalog:
    data = _read(path)
    try:
        return Catalog([Seed.from_dict(d) for d in data["seeds"]], data.get("dropped", []))
    except (TypeError, KeyError, AttributeError) as e:
        raise CatalogError(f"{path}: not a seed catalog of this version ({type(e).__name__}: {e})") from None


def check_catalog_file(path: Path, what: str = "--seeds") -> None:
    """UsageError unless `path` is a catalog that a run saved (its seeds.json)."""
    if not path.is_file():
        raise UsageError(f"{what} {path}: no such file; give a catalog a run saved (its seeds.json), or leave "
                         f"{what} out to crawl")
    try:
        load_catalog(path)
    except CatalogError as e:
        raise UsageError(f"{what} {e}; give a catalog a run saved (its seeds.json), or leave {what} out to "
                         "crawl") from None


def mismatch(path: Path, device: str, families: tuple[str, ...] | None = None) -> str | None:
    """How the catalog saved at `path` differs from one made here for `device` and `families`
    ("transformers 5.10.4, here 5.17.0; ..."), or None when it does not."""
    data = _read(path)
    here = {**_versions(families), "device": device}
    diffs = [f"{k} {data.get(k)}, here {v}" for k, v in here.items() if data.get(k) != v]
    return "; ".join(diffs) or None


def build_catalog(device: str, workdir: Path, cache: Path | None = None, check: bool = True,
                  progress: Callable[[Seed, bool], None] | None = None,
                  families: tuple[str, ...] | None = None, log: Path | None = None,
                  note: Callable[[str], None] | None = None) -> Catalog:
    """The crawled catalog (transformers blocks from `families`, all when None), checked on
    `device`; read from `cache` when it was made there with these versions and families (delete the
    file to re-check). The crawled libraries' warnings go to `log`; `note` hears what happened."""
    note = note or (lambda text: None)
    if cache is not None and cache.exists():
        try:
            why = mismatch(cache, device, families)
            if why is None:
                return load_catalog(cache)
        except CatalogError as e:
            why = str(e)
        note(f"the cached catalog {cache} does not fit ({why}): crawling again")
    t, counts = time.time(), Counter()
    catalog = crawl_catalog(families, log, counts)
    note(f"crawled {len(catalog.seeds)} seeds in {time.time() - t:.0f} s; transformers' {counts['transformers']} "
         f"log messages ({counts['transformers_errors']} at ERROR, about the crawl's small configs) and "
         f"{counts['warnings']} warnings went to {log or 'nowhere'}")
    if check:
        t = time.time()
        catalog = check_catalog(catalog, device, workdir, progress)
        note(f"checked them on {device} in {time.time() - t:.0f} s: {len(catalog.usable())} usable")
    if cache is not None:
        save_catalog(catalog, cache, device, families)
    return catalog
