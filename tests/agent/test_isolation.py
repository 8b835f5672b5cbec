"""The agent's tools isolated end to end (the isolation itself: tests/sandbox/test_isolation.py)."""

from __future__ import annotations

import json
import re

from .conftest import root_only

pytestmark = root_only


def test_optimize_isolates_the_tools_of_a_real_run(task, tmp_path, fast_config):
    """End to end with isolation on: the run's report says how, and the model's writes are the tool user's."""
    from cuda_agent.agent.config import override
    from cuda_agent.agent.run import optimize

    from .fakes import FAST_MODEL_NEW, ChatServer, FakeEvaluator, reply

    config = override(fast_config, run={"isolation": True})
    script = [reply("", ("write_file", {"path": "model_new.py", "content": FAST_MODEL_NEW}),
                    ("bash", {"command": "echo more >> model_new.py && stat -c %U model_new.py"})),
              reply("done")]
    out = tmp_path / "out"   # under pytest's private tmp: the workspace goes to a shared folder, linked
    with ChatServer(script) as server:
        result = optimize(task, model="m", base_url=server.url, device="cpu", out=out, config=config,
                          evaluator=lambda ws, device, timing: FakeEvaluator(ws))
    assert re.fullmatch(r"user cuda-agent-tool-\d+, no network", result.isolation)
    assert (out / "workspace").is_symlink()
    records = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    bash_result = [r for r in records if r["type"] == "message" and r["message"]["role"] == "tool"][1]
    assert re.fullmatch(r"cuda-agent-tool-\d+", bash_result["message"]["content"].splitlines()[0])
