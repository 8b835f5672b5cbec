"""`cuda-agent optimize` with a small real model, in both tool protocols: how far does it get?
(issue 26: turns reached, tool calls made, final verdict.)

    python benchmarks/smollm2_agent.py --out /tmp/smollm2-runs                  # this tree
    python benchmarks/smollm2_agent.py --out /tmp/smollm2-runs --src OTHER/src  # another tree (before)

Starts benchmarks/smollm2_server.py (SmolLM2-135M-Instruct on the CPU, greedy, replies of at most
256 tokens) unless --base-url names a running one, runs the bundled scale_bias_relu task on the CPU
device with --max-turns, once per protocol, and prints a table read from each run's trajectory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wait_for(url: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url + "/models", timeout=5)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"no server at {url} after {seconds:g} s")
            time.sleep(2)


def summary(out: Path) -> dict:
    """Turns, tool calls and reminders from the trajectory; the verdict from report.json."""
    records = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines() if line.strip()]
    messages = [r["message"] for r in records if r.get("type") == "message"]
    calls = Counter(c["function"]["name"] or "(no name)" for m in messages for c in m.get("tool_calls") or [])
    report = json.loads((out / "report.json").read_text())
    return {"turns": report["turns"], "tool_calls": sum(calls.values()), "by_tool": dict(calls),
            "reminders": sum(bool(r.get("reminder")) for r in records), "status": report["status"],
            "reward": report["reward"], "seconds": report["seconds"], "error": report["error"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--src", type=Path, default=HERE.parent / "src", help="the cuda_agent sources to run")
    p.add_argument("--base-url", help="a running server (default: start benchmarks/smollm2_server.py)")
    p.add_argument("--model-dir", default="/tmp/est/smollm2")
    p.add_argument("--max-turns", type=int, default=8)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    server = None
    url = args.base_url
    if url is None:
        port = 18600 + os.getpid() % 100
        url = f"http://127.0.0.1:{port}/v1"
        server = subprocess.Popen([sys.executable, str(HERE / "smollm2_server.py"), "--model", args.model_dir,
                                   "--port", str(port)], stdout=open(args.out / "server.log", "w"),
                                  stderr=subprocess.STDOUT)
    config = args.out / "smollm2.toml"
    config.write_text("[model]\nmax_tokens = 256\n")
    rows = []
    try:
        wait_for(url)
        for protocol in ("native", "text"):
            out = args.out / protocol
            command = [sys.executable, "-m", "cuda_agent", "optimize", "scale_bias_relu", "--model", "smollm2",
                       "--base-url", url, "--device", "cpu", "--max-turns", str(args.max_turns), "--config",
                       str(config), "--tool-protocol", protocol, "--out", str(out), "--force", "--quiet"]
            print("$", " ".join(command), flush=True)
            subprocess.run(command, env={**os.environ, "PYTHONPATH": str(args.src)}, check=False)
            rows.append((protocol, summary(out)))
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    print("\n| protocol | turns | tool calls (by tool) | format reminders | status | reward | seconds |")
    print("|---|---|---|---|---|---|---|")
    for protocol, s in rows:
        by_tool = ", ".join(f"{k} {v}" for k, v in sorted(s["by_tool"].items())) or "-"
        print(f"| {protocol} | {s['turns']} | {s['tool_calls']} ({by_tool}) | {s['reminders']} | {s['status']} | "
              f"{s['reward']:g} | {s['seconds']:.0f} |")
    for protocol, s in rows:
        if s["error"]:
            print(f"{protocol}: {s['error']}")
    (args.out / "summary.json").write_text(json.dumps(dict(rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
