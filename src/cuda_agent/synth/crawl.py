"""The whole crawl: the curated table, torch's modules and functions, torch's convolution variants,
recurrent cells and losses, and transformers' activations and model blocks, as one unchecked
catalog with the operators that were dropped and why (seedcheck.py then runs each seed in a child).

Building hundreds of transformers blocks from small configs makes transformers log (token ids
outside the small vocabulary, RoPE settings; "Can't set head_dim ... for FalconConfig" with the
whole config dumped, at ERROR level, for a setting that config does not take) and torch warn: 1,300
lines on the H100 machine that say nothing about the catalog. The crawl sends them to a log file,
counted, instead of the terminal. What does say something stays: every block that fails is a
`Dropped` with its reason (in the catalog), transformers' CRITICAL messages still reach its own
handlers, and an exception that escapes the crawl (a bug of ours) is raised as ever.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Iterator, TextIO

from cuda_agent.synth.crawl_torch import crawl_torch_blocks
from cuda_agent.synth.crawl_transformers import _offline, crawl_activations, crawl_blocks
from cuda_agent.synth.seeds import CURATED, Catalog, _unique, crawl_functional, crawl_nn_modules, crawl_op_db


def crawl_catalog(families: tuple[str, ...] | None = None, log: Path | None = None,
                  counts: Counter | None = None) -> Catalog:
    """Every seed the crawl finds (names unique, the curated table first); `families`: the
    transformers model types to take blocks from (None: all it registers; () : none). What the
    crawled libraries print and warn goes to `log` (nowhere when None), counted in `counts`."""
    curated_ctors = {s.ctor for s in CURATED}
    with quiet(log, counts if counts is not None else Counter()):
        hf_blocks, hf_dropped = crawl_blocks(families) if families != () else ([], [])  # first: it sets offline mode
        torch_blocks, dropped = crawl_torch_blocks()
        crawled = [s for s in [*crawl_nn_modules(), *torch_blocks] if s.ctor not in curated_ctors]
        seeds = _unique([*CURATED, *crawled, *crawl_functional(), *crawl_op_db(), *crawl_activations(), *hf_blocks])
    return Catalog(seeds, [asdict(d) for d in [*dropped, *hf_dropped]])


class _ToLog(logging.Handler):
    """transformers' messages, into the crawl's log, counted ("transformers", of which
    "transformers_errors" at ERROR)."""

    def __init__(self, stream: TextIO, counts: Counter):
        super().__init__(logging.NOTSET)
        self.stream, self.counts = stream, counts
        self.setFormatter(logging.Formatter("[%(name)s] %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.counts["transformers"] += 1
        self.counts["transformers_errors"] += record.levelno >= logging.ERROR
        self.stream.write(self.format(record) + "\n")


@contextlib.contextmanager
def quiet(log: Path | None, counts: Counter) -> Iterator[None]:
    """Inside: transformers' log messages, Python warnings and what is printed on stdout go to
    `log` (or nowhere), counted in `counts` ("transformers", "transformers_errors", "warnings");
    only transformers' CRITICAL messages still reach its own handlers (stderr)."""
    _offline()  # before transformers is imported
    try:
        import transformers  # noqa: F401  (its logger and handlers exist once it is imported)
    except Exception:  # no transformers: the crawl takes no blocks from it, and says why
        pass
    hf = logging.getLogger("transformers")
    saved = [(h, h.level) for h in hf.handlers]
    propagate = hf.propagate
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    with open(log if log is not None else os.devnull, "w") as stream:
        handler = _ToLog(stream, counts)
        for h, _ in saved:
            h.setLevel(max(h.level, logging.CRITICAL))
        hf.addHandler(handler)
        hf.propagate = False
        try:
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(stream):
                yield
        finally:
            hf.removeHandler(handler)
            hf.propagate = propagate
            for h, level in saved:
                h.setLevel(level)
            seen = Counter(f"{w.category.__name__}: {str(w.message).splitlines()[0] if str(w.message) else ''} "
                           f"({os.path.basename(w.filename)}:{w.lineno})" for w in caught)
            counts["warnings"] += sum(seen.values())
            stream.writelines(f"{n} x {text}\n" for text, n in seen.most_common())
