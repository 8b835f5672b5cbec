"""The `cuda-agent` command (placeholder until the CLI lands)."""

def main() -> None:
    raise SystemExit("cuda-agent: CLI not built yet")
