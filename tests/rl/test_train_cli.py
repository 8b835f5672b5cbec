"""`cuda-agent train`: every user error is one message naming the fix, exit code 2, no traceback;
overrides reach the stages they are meant for."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from typer.testing import CliRunner  # noqa: E402

from cuda_agent.cli import app  # noqa: E402
from cuda_agent.rl.driver.stages import (TrainError, hydra_value, load_run_config, mapping_overrides,  # noqa: E402
                                         route_overrides, split_override)
from cuda_agent.tasks import EXAMPLES_DIR  # noqa: E402

TASK = EXAMPLES_DIR / "scale_bias_relu.py"


def write_run(folder: Path, text: str | None = None) -> Path:
    path = folder / "run.yaml"
    path.write_text(text if text is not None else f"out: out\nmodel: {folder / 'model'}\nplatform: cpu\n"
                                                  f"tasks: [{TASK}]\n")
    return path


def train(*args: str):
    result = CliRunner().invoke(app, ["train", *args])
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


@pytest.mark.parametrize("args, message", [
    (["warmpu", "--config", "x.yaml"], "unknown stage 'warmpu'"),
    (["warmup"], "--config RUN.yaml is required"),
    (["all", "--config", "x.yaml", "--redo"], "--redo takes one stage"),
    (["warmup", "--config", "missing.yaml"], "no such run config"),
])
def test_argument_errors_are_one_message_and_exit_2(args, message):
    code, out = train(*args)
    assert code == 2 and message in out and "Traceback" not in out, out


@pytest.mark.parametrize("text, message", [
    ("out: [unclosed\n", "not valid YAML"),
    ("- a list\n", "a YAML mapping"),
    ("model: m\n", "`out` is missing"),
    ("out: o\nmodel: m\nepochs: 3\n", "unknown key(s) epochs"),
    ("out: o\nmodel: m\nplatform: tpu\n", "platform 'tpu'"),
    ("out: o\nmodel: m\nstages: {warmpu: {}}\n", "unknown: warmpu"),
    ("out: o\nmodel: m\nrft: {min_reward: 1, min_turns: 2}\n", "`rft` takes min_reward"),
])
def test_run_file_errors_name_the_file_and_the_key(tmp_path, text, message):
    code, out = train("warmup", "--config", str(write_run(tmp_path, text)))
    assert code == 2 and message in out and "run.yaml" in out and "Traceback" not in out, out


@pytest.mark.parametrize("override, message", [
    ("trainer.total_training_steps", "write key=value"),
    ("warmpu:trainer.total_training_steps=2", "'warmpu' is not a stage"),
    ("trainer.total_trainig_steps=2", "no stage config has `trainer.total_trainig_steps`"),
])
def test_bad_overrides_are_named(tmp_path, override, message):
    code, out = train("warmup", "--config", str(write_run(tmp_path)), override)
    assert code == 2 and message in out and "Traceback" not in out, out


def test_a_stage_whose_previous_stage_has_not_run_says_what_to_run(tmp_path):
    code, out = train("rft", "--config", str(write_run(tmp_path)))
    assert code == 2 and "warmup has not finished" in out and "cuda-agent train warmup --config" in out, out


def test_too_few_tasks_for_a_batch_is_a_user_error(tmp_path, tiny_model):
    run = write_run(tmp_path, f"out: out\nmodel: {tiny_model}\nplatform: cpu\ntasks: [{TASK}]\nval_fraction: 0\n")
    code, out = train("warmup", "--config", str(run))
    assert code == 2 and "1 training rows, fewer than data.train_batch_size=4" in out, out


def test_a_misspelt_reward_setting_stops_the_stage_before_verl_starts(tmp_path, tiny_model):
    run = write_run(tmp_path, f"out: out\nmodel: {tiny_model}\nplatform: gpu\ntasks: [{TASK}]\n")
    code, out = train("warmup", "--config", str(run), "++reward.custom_reward_function.reward_kwargs.timing_budjet=1")
    assert code == 2 and "unknown reward setting(s) timing_budjet" in out, out


def test_on_one_gpu_the_harness_shares_the_trainers_gpu_without_asking_ray():
    from cuda_agent.rl.driver.launch import compose
    from cuda_agent.rl.workers.reward import RewardSettings

    cfg = compose("warmup", ["actor_rollout_ref.model.path=/m", "critic.model.path=/m"])
    settings = RewardSettings.from_kwargs(dict(cfg.reward.custom_reward_function.reward_kwargs))
    assert settings.service_settings("cuda").shared_gpu == "0"
    assert settings.service_settings("cpu").shared_gpu is None


def test_an_agent_loop_that_does_not_import_stops_the_stage_before_verl_starts(tmp_path, tiny_model):
    loops = tmp_path / "loops.yaml"
    loops.write_text("- name: cuda_agent\n  _target_: cuda_agent.rl.no_such_module.Loop\n")
    run = write_run(tmp_path, f"out: out\nmodel: {tiny_model}\nplatform: cpu\ntasks: [{TASK}]\n")
    code, out = train("agentic", "--config", str(run), f"agentic:actor_rollout_ref.model.path={tiny_model}",
                      f"agentic:critic.model.path={tiny_model}",
                      f"agentic:actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}")
    assert code == 2 and "agent loop 'cuda_agent' is cuda_agent.rl.no_such_module.Loop" in out, out


def test_paths_in_the_run_file_are_relative_to_it(tmp_path):
    (tmp_path / "cfg").mkdir()
    run = load_run_config(write_run(tmp_path / "cfg", "out: ../runs/a\nmodel: hub/name\ntasks: [t.parquet]\n"))
    assert run.out == (tmp_path / "runs" / "a").resolve() and run.tasks == [(tmp_path / "cfg" / "t.parquet")]
    assert run.model == "hub/name" and run.harness_device == "cuda"


def test_bare_overrides_go_to_every_stage_that_has_the_key():
    has = {("warmup", "trainer.total_training_steps"), ("value", "trainer.total_training_steps"),
           ("rft", "trainer.total_training_steps"), ("rft", "model.path")}
    routed = route_overrides(["trainer.total_training_steps=3", "rft:trainer.total_epochs=1", "model.path=/m"],
                             ["warmup", "rft", "value"], lambda stage, key: (stage, key) in has)
    assert routed == {"warmup": ["trainer.total_training_steps=3"],
                      "rft": ["trainer.total_training_steps=3", "trainer.total_epochs=1", "model.path=/m"],
                      "value": ["trainer.total_training_steps=3"]}
    with pytest.raises(TrainError, match="say which stage"):
        route_overrides(["+trainer.new_key=1"], ["warmup", "rft"], lambda s, k: False)
    assert split_override("agentic:actor_rollout_ref.rollout.n=4") == ("agentic", "actor_rollout_ref.rollout.n=4")


def test_run_file_overrides_are_written_in_hydras_grammar():
    assert mapping_overrides({"trainer.logger": ["console", "file"], "a.b": None, "c": True, "d": 1e-6,
                              "e": "null", "f": "has space", "g": "/abs/path-1.parquet"}) == [
        "trainer.logger=[console,file]", "a.b=null", "c=true", "d=1e-06", "e='null'", "f='has space'",
        "g=/abs/path-1.parquet"]
    assert hydra_value({"device": "cpu"}) == "{device:cpu}"


def test_a_batch_that_micro_batches_do_not_divide_stops_the_stage_before_verl_starts(tmp_path, tiny_model):
    """On the H100 the value stage with data.train_batch_size=1 died in verl's worker after minutes
    (the one-GPU config computes log-probs in micro-batches of 2); now it is one message naming the fix."""
    from cuda_agent.rl.driver.launch import check_micro_batches, compose

    base = ["actor_rollout_ref.model.path=/m", "critic.model.path=/m"]
    cfg = compose("value", [*base, "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    with pytest.raises(TrainError) as e:
        check_micro_batches("value", cfg)
    assert "log_prob_micro_batch_size_per_gpu=2 does not divide the 1 rows" in str(e.value)
    assert "value:actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1" in str(e.value)
    fixed = [*base, "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
             "critic.ppo_micro_batch_size_per_gpu=1", "critic.forward_micro_batch_size_per_gpu=1"]
    check_micro_batches("value", compose("value", fixed))   # the frozen actor's update size does not matter
    with pytest.raises(TrainError, match="actor.ppo_micro_batch_size_per_gpu=2 does not divide the 1 rows"):
        check_micro_batches("agentic", compose("agentic", [*base, "data.train_batch_size=2", "actor_rollout_ref.rollout.n=1",
                                                           "actor_rollout_ref.actor.ppo_mini_batch_size=1"]))
    for stage in ("warmup", "value", "agentic"):   # the shipped configs as they are
        check_micro_batches(stage, compose(stage, base))


def test_a_run_folder_inside_the_installed_package_is_refused(tmp_path):
    from cuda_agent.rl.driver.stages import PACKAGE_DIR

    inside = PACKAGE_DIR / "rl" / "driver" / "config" / "runs" / "test_refused"
    code, out = train("sanity", "--config", str(write_run(tmp_path, f"out: {inside}\nmodel: m\n")))
    assert code == 2 and "inside the installed cuda_agent package" in out and not inside.exists(), out


def test_a_shipped_examples_run_folder_is_in_the_current_directory(tmp_path, monkeypatch):
    from cuda_agent.rl.driver.stages import CONFIG_DIR

    monkeypatch.chdir(tmp_path)
    assert load_run_config(CONFIG_DIR / "run.example.yaml").out == tmp_path / "runs" / "rl"
    cpu = load_run_config(CONFIG_DIR / "run.cpu.yaml")   # its task and trajectory are the package's examples
    assert cpu.out == tmp_path / "runs" / "cpu" and cpu.tiny and cpu.model == str(tmp_path / "runs" / "cpu" / "tiny_model")
    assert all(p.exists() for p in cpu.tasks) and all(Path(t).exists() for t in cpu.trajectories)


def test_the_shipped_example_runs_the_sanity_stage_as_shipped(tmp_path, tiny_model, monkeypatch):
    """It used to stop on 6 tasks against a batch of 8, after writing its data into the package.
    Everything up to verl's start runs here (the example's model is replaced by the tiny one)."""
    from cuda_agent.rl.driver import launch
    from cuda_agent.rl.driver.stages import CONFIG_DIR, PACKAGE_DIR

    started = []
    monkeypatch.setattr(launch, "run_logged", lambda cmd, *a, **k: started.append(cmd) or 0)
    monkeypatch.chdir(tmp_path)
    files = lambda: sorted(p for p in PACKAGE_DIR.rglob("*") if "__pycache__" not in p.parts)  # noqa: E731
    before = files()
    code, out = train("sanity", "--config", str(CONFIG_DIR / "run.example.yaml"),
                      f"sanity:actor_rollout_ref.model.path={tiny_model}", f"sanity:critic.model.path={tiny_model}")
    assert code == 0 and started and "verl.trainer.main_ppo" in started[0], out
    assert (tmp_path / "runs" / "rl" / "data" / "sanity" / "train.parquet").is_file()
    assert files() == before


def test_fewer_sanity_tasks_than_a_batch_is_said_before_anything_is_written(tmp_path):
    run = write_run(tmp_path, "out: out\nmodel: m\nplatform: cpu\nsanity: {train_tasks: 2}\n")
    code, out = train("sanity", "--config", str(run))
    assert code == 2 and "sanity.train_tasks is 2, fewer than data.train_batch_size=4" in out, out
    assert not (tmp_path / "out").exists()


def test_the_run_files_harness_settings_reach_the_reward_and_the_agent_loop(tmp_path, tiny_model, monkeypatch):
    import yaml

    from cuda_agent.journal import read_rows
    from cuda_agent.rl.driver import launch
    from cuda_agent.rl.driver.stages import HarnessSettings

    assert HarnessSettings().resolved("cpu")["build_workers"] == 0 and HarnessSettings().resolved("gpu")["build_workers"] >= 1
    monkeypatch.setattr(launch, "run_logged", lambda cmd, *a, **k: 0)
    run = write_run(tmp_path, f"out: out\nmodel: {tiny_model}\nplatform: cpu\n"
                              "harness: {evaluators_per_gpu: 2, cpu_evaluators: 3, build_workers: 4}\n")
    code, out = train("sanity", "--config", str(run), "++reward.custom_reward_function.reward_kwargs.build_workers=5")
    assert code == 0, out
    overrides = next(r for r in read_rows(tmp_path / "out" / "stages.jsonl") if r["event"] == "started")["overrides"]
    kwargs = {o.split("reward_kwargs.")[1] for o in overrides if "reward_kwargs." in o}
    assert {"evaluators_per_gpu=2", "evaluators=3", "build_workers=4"} <= kwargs
    assert overrides[-1].endswith("build_workers=5")   # the command line's comes last: it wins
    loops = {e["name"]: e for e in yaml.safe_load((tmp_path / "out" / "sanity" / "agent_loops.yaml").read_text())}
    assert loops["cuda_agent"]["service"] == {"evaluators_per_device": 2, "cpu_evaluators": 3, "build_workers": 4}


def test_rft_and_value_read_the_collected_runs_and_the_journal_says_so(tmp_path, tiny_model, monkeypatch):
    """The stages feed each other: RFT's candidates are the collect stage's runs (plus the run file's
    trajectories), value replays collect_rft's runs; each started record lists what it consumed."""
    import json
    import shutil

    from cuda_agent.journal import read_rows
    from cuda_agent.rl.driver import launch, train as train_mod

    recorded = Path(__file__).resolve().parent / "fixtures" / "scale_bias_relu.cpu.trajectory.jsonl"
    out = tmp_path / "out"
    for stage in ("collect", "collect_rft"):
        (out / stage / "runs" / "r1").mkdir(parents=True)
        shutil.copy(recorded, out / stage / "runs" / "r1" / "trajectory.jsonl")
    journal = [{"stage": "warmup", "event": "finished", "outputs": {"actor": str(tiny_model), "critic": str(tiny_model)}},
               {"stage": "collect", "event": "finished", "outputs": {"runs": str(out / "collect" / "runs")}},
               {"stage": "rft", "event": "finished", "outputs": {"actor": str(tiny_model)}},
               {"stage": "collect_rft", "event": "finished", "outputs": {"runs": str(out / "collect_rft" / "runs")}}]
    (out / "stages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in journal))
    monkeypatch.setattr(launch, "run_logged", lambda cmd, *a, **k: 0)
    monkeypatch.setattr(train_mod, "_outputs", lambda *a, **k: {"actor": str(tiny_model), "critic": str(tiny_model)})
    run = write_run(tmp_path, f"out: out\nmodel: {tiny_model}\nplatform: cpu\ntasks: [{TASK}]\nval_fraction: 0\n")
    code, text = train("rft", "--config", str(run), "--redo")   # the journal's rft stands for an earlier one
    assert code == 0 and "kept 1 of 1 trajectories" in text, text
    code, text = train("value", "--config", str(run), "value:data.train_batch_size=1",
                      "value:actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
                      "value:critic.ppo_micro_batch_size_per_gpu=1", "value:critic.forward_micro_batch_size_per_gpu=1")
    assert code == 0 and "1 trajectories to replay" in text, text
    started = {r["stage"]: r for r in read_rows(out / "stages.jsonl") if r["event"] == "started"}
    assert started["rft"]["inputs"]["from_collect"] == 1
    assert started["rft"]["inputs"]["trajectories"] == [str(out / "collect" / "runs")]
    assert started["value"]["inputs"]["trajectories"] == [str(out / "collect_rft" / "runs")]
    assert started["value"]["inputs"]["replayed"] == 1
