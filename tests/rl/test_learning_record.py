"""The committed learning run (benchmarks/rl/learning/): its summary's figures are remade from the committed
held-out verdicts by the committed table script, so a figure in summary.json cannot drift from its rows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEARNING = ROOT / "benchmarks" / "rl" / "learning"
RFT_OPS = ["affine", "clamp", "leaky_relu", "abs", "sigmoid", "silu"]


def figures(run: str, tmp_path: Path, fleet: str = "run4_fleet") -> dict[str, dict]:
    out = tmp_path / f"{fleet}_{run}.json"
    table = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl" / "ops_by_step.py"),
                            str(LEARNING / fleet / run / "validation"), "--rft-ops", *RFT_OPS, "--json", str(out)],
                           capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src")}, check=True)
    assert table.stdout.startswith("| step | pass |"), table.stdout
    return json.loads(out.read_text())


def test_summary_figures_are_remade_from_the_committed_verdicts(tmp_path):
    """The top level is run 7 (issue 23's H100 proof: PPO and its control on one H100)."""
    summary = json.loads((LEARNING / "summary.json").read_text())
    stages, goal = summary["stages"], summary["goal"]
    runs = {name: figures(name, tmp_path, "run7_h100") for name in ("ppo", "control")}
    assert all(step["prompts"] == summary["heldout_prompts"] == 73 for run in runs.values() for step in run.values())
    for stage in ("ppo", "control"):
        for key in ("pass", "compile", "reward_mean", "rft_ops_pass", "held_back_ops_pass", "unseen_ops_pass"):
            assert stages[stage][key] == runs[stage]["12"][key], (stage, key)
            assert stages["rft"][key] == round(sum(run["0"][key] for run in runs.values()) / 2, 4), ("rft", key)
        assert stages[stage]["pass_by_step"] == {step: f["pass"] for step, f in runs[stage].items()}
    assert stages["rft"]["runs"] == [runs["ppo"]["0"]["pass"], runs["control"]["0"]["pass"]]
    rft = stages["rft"]["pass"]
    assert goal["ppo_minus_rft"] == round(stages["ppo"]["pass"] - rft, 4)
    assert goal["ppo_minus_pretrained"] == round(stages["ppo"]["pass"] - stages["pretrained"]["pass"], 4)
    assert goal["control_minus_rft"] == round(stages["control"]["pass"] - rft, 4)
    assert goal["met"] == {"ppo >= rft + 0.10": stages["ppo"]["pass"] >= rft + 0.10,
                           "ppo >= pretrained + 0.30": stages["ppo"]["pass"] >= stages["pretrained"]["pass"] + 0.30,
                           "control <= rft + 0.03": stages["control"]["pass"] <= rft + 0.03}
    assert all(goal["met"].values())


def test_run6_figures_are_remade_from_the_committed_verdicts(tmp_path):
    """Run 6 (4x H200: 8 replies a prompt, its control and a second data order)."""
    summary = json.loads((LEARNING / "summary.json").read_text())["run6"]
    stages, goal = summary["stages"], summary["goal"]
    runs = {name: figures(name, tmp_path, "run6_repeat") for name in ("ppo", "s7", "control")}
    last = {"ppo": runs["ppo"]["14"], "ppo_s7": runs["s7"]["16"], "control": runs["control"]["16"]}
    assert all(step["prompts"] == summary["heldout_prompts"] == 73 for run in runs.values() for step in run.values())
    for stage, figures_at_end in last.items():
        for key in ("pass", "compile", "reward_mean", "rft_ops_pass", "held_back_ops_pass", "unseen_ops_pass"):
            assert stages[stage][key] == figures_at_end[key], (stage, key)
    zeros = [runs[name]["0"] for name in ("ppo", "control", "s7")]
    assert stages["rft"]["runs"] == [z["pass"] for z in zeros]
    rft = round(sum(z["pass"] for z in zeros) / 3, 4)
    assert stages["rft"]["pass"] == rft and stages["rft"]["compile"] == round(sum(z["compile"] for z in zeros) / 3, 4)
    assert stages["ppo"]["pass_by_step"] == {step: f["pass"] for step, f in runs["ppo"].items()}
    assert goal["ppo_minus_rft"] == round(stages["ppo"]["pass"] - rft, 4)
    assert goal["control_minus_rft"] == round(stages["control"]["pass"] - rft, 4)
    assert goal["met"] == {"ppo >= rft + 0.10": stages["ppo"]["pass"] >= rft + 0.10,
                           "ppo_s7 >= rft + 0.10": stages["ppo_s7"]["pass"] >= rft + 0.10,
                           "ppo >= pretrained + 0.30": stages["ppo"]["pass"] >= stages["pretrained"]["pass"] + 0.30,
                           "control <= rft + 0.03": stages["control"]["pass"] <= rft + 0.03}


def test_run4_figures_are_remade_from_the_committed_verdicts(tmp_path):
    summary = json.loads((LEARNING / "summary.json").read_text())["run4"]
    stages = summary["stages"]
    ppo, control = figures("ppo", tmp_path), figures("control", tmp_path)
    assert all(step["prompts"] == summary["heldout_prompts"] == 73 for step in [*ppo.values(), *control.values()])
    last = ppo["10"]
    for key in ("pass", "compile", "reward_mean", "rft_ops_pass", "held_back_ops_pass", "unseen_ops_pass"):
        assert stages["ppo"][key] == last[key], key
        assert stages["control"][key] == control["10"][key], key
    assert stages["rft"]["runs"] == [control["0"]["pass"], ppo["0"]["pass"]]
    assert stages["ppo"]["pass_by_step"] == {step: f["pass"] for step, f in ppo.items()}
    goal = summary["goal"]
    assert goal["ppo_minus_rft"] == round(stages["ppo"]["pass"] - stages["rft"]["pass"], 4)
    assert goal["met"]["ppo >= rft + 0.10"] is (stages["ppo"]["pass"] >= stages["rft"]["pass"] + 0.10)


def test_run5_figures_are_remade_from_the_committed_verdicts(tmp_path):
    run5 = json.loads((LEARNING / "summary.json").read_text())["run5_n8"]
    stages, goal = run5["stages"], run5["goal"]
    n4, n8 = figures("ppo", tmp_path, "run5_fleet"), figures("n8", tmp_path, "run5_fleet")
    for key in ("pass", "compile", "reward_mean", "rft_ops_pass", "held_back_ops_pass", "unseen_ops_pass"):
        assert stages["ppo_n4"][key] == n4["16"][key], key
        assert stages["ppo_n8"][key] == n8["16"][key], key
    assert stages["rft"]["runs"] == [n4["0"]["pass"], n8["0"]["pass"]]
    assert goal["ppo_n8_minus_rft_same_run"] == round(n8["16"]["pass"] - n8["0"]["pass"], 4)
    assert goal["met"]["ppo n=8 >= rft + 0.10"] is (n8["16"]["pass"] >= n8["0"]["pass"] + 0.10)
    assert goal["met"]["ppo n=4 >= rft + 0.10"] is (n4["16"]["pass"] >= n4["0"]["pass"] + 0.10)


def test_json_is_refused_for_training_rollouts(tmp_path):
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl" / "ops_by_step.py"), str(rollouts),
                           "--json", str(tmp_path / "x.json")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 2 and "reads a validation folder" in done.stderr
