"""`cuda-agent cache`: what CUDA_AGENT_HOME holds; `cuda-agent cache prune`: trim the build cache."""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

cache_app = typer.Typer(help="What CUDA_AGENT_HOME holds (`cache`), and trimming its build cache (`cache prune`).",
                        invoke_without_command=True)
out = Console()
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """`2G`, `500M`, `1.5G`, `0` (bytes, powers of 1024) as bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if m is None:
        raise typer.BadParameter(f"{text!r} is not a size: write e.g. 2G, 500M or 0")
    return int(float(m[1]) * UNITS[m[2].upper()])


def shown(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n >= UNITS[unit]:
            return f"{n / UNITS[unit]:.1f} {unit}B"
    return f"{n} B"


@cache_app.callback()
def cache_command(ctx: typer.Context) -> None:
    """Sizes of what CUDA_AGENT_HOME holds: build cache, baselines, peaks, synth catalogs, ..."""
    if ctx.invoked_subcommand is not None:
        return
    from cuda_agent.harness import build_cache_usage
    from cuda_agent.home import home, usage

    parts = usage()
    out.print(f"{home()}: {shown(sum(parts.values()))}", highlight=False)
    table = Table()
    table.add_column("folder")
    table.add_column("size", justify="right")
    for name, size in parts.items():
        table.add_row(name, shown(size))
    out.print(table)
    build = build_cache_usage()
    out.print("build: " + ", ".join(f"{k} {shown(v)}" for k, v in build.parts.items()), highlight=False)
    out.print("`cuda-agent cache prune` trims the build cache (--max-size, default 2G); the rest is small or "
              "costly to measure again (baselines, peaks)", highlight=False)


@cache_app.command("prune")
def prune_command(
    max_size: Annotated[int, typer.Option(parser=parse_size, show_default="2G", metavar="SIZE",
                                          help="Keep at most this much in the build cache (e.g. 2G, 500M, "
                                          "0), least recently used entries removed first.")] = 2 << 30,
    keep_recent: Annotated[float, typer.Option(min=0.0, help="Seconds: entries used this recently are kept, "
                                               "for builds running beside the prune.")] = 600.0,
) -> None:
    """Remove what killed builds and evaluations left behind, then trim the build cache to --max-size.
    Whatever is removed is built again when next needed (a precompiled header in about a minute)."""
    from cuda_agent.harness import prune_build_cache

    pruned = prune_build_cache(max_size, keep_recent_s=keep_recent)
    out.print(f"build cache: {shown(pruned.before)} -> {shown(pruned.after)}; removed {pruned.removed} entries "
              f"({pruned.leftovers} left behind by killed builds or evaluations)", highlight=False)
