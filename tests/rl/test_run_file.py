"""The RL run file's values are checked for their types when it is read, before any stage starts:
FILE: key: expected ..., got ... (without verl: the run file is read before verl is imported)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.rl.driver.stages import TrainError, load_run_config


@pytest.mark.parametrize("text, said", [
    ("gpus: two\n", "gpus: expected an integer, got 'two'"),
    ("seed: 1.5\n", "seed: expected an integer, got 1.5"),
    ("val_fraction: some\n", "val_fraction: expected a number, got 'some'"),
    ("tasks: 3\n", "tasks: expected a string or a list, got 3"),
    ("trajectories: [a, 2]\n", "trajectories[1]: expected a string, got 2"),
    ("rft: {min_reward: high}\n", "rft.min_reward: expected a number, got 'high'"),
    ("harness: {build_workers: many}\n", "harness.build_workers: expected an integer, got 'many'"),
    ("sanity: {shuffle: sometimes}\n", "sanity.shuffle: expected true or false, got 'sometimes'"),
    ("fill: {rft_ops: affine}\n", "fill.rft_ops: expected a list, got 'affine'"),
    ("agent_config: agent.toml\n", "agent_config: {dir}/agent.toml: limits.max_turns: expected an integer, got 'ten'"),
])
def test_a_wrong_value_is_named_by_file_and_key(tmp_path, text, said):
    (tmp_path / "agent.toml").write_text('[limits]\nmax_turns = "ten"\n')
    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\n" + text)
    with pytest.raises(TrainError) as e:
        load_run_config(run)
    assert str(e.value) == f"{run}: " + said.format(dir=tmp_path), str(e.value)


def test_right_values_are_taken_as_typed(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\ngpus: 2\nval_fraction: 1\ntasks: t.parquet\nrft: {min_reward: 2}\n")
    config = load_run_config(run)
    assert (config.gpus, config.val_fraction, config.rft.min_reward) == (2, 1.0, 2.0)
    assert config.tasks == [tmp_path / "t.parquet"] and isinstance(config.val_fraction, float)


def test_verl_starts_its_local_ray_with_token_auth_said_so_ray_does_not_warn(tmp_path, monkeypatch):
    from cuda_agent.rl.driver.launch import remove_ray_tmp, stage_env

    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\n")
    config = load_run_config(run)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    env = stage_env(config, tmp_path / "stage", 0)
    assert env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_ADDRESS"] == "local"  # a Ray of its own, not the last one `ray start` made on the host
    remove_ray_tmp(env)
    monkeypatch.setenv("RAY_ADDRESS", "auto")       # a cluster's own setting is left to it
    env = stage_env(config, tmp_path / "stage", 0)
    assert "RAY_AUTH_MODE" not in env and env["RAY_ADDRESS"] == "auto"


def test_a_stages_local_ray_keeps_its_sessions_where_only_we_can_enter(tmp_path, monkeypatch):
    """Ray makes /tmp/ray and its sessions 0777 without the sticky bit: a sandbox user could replace the
    sockets and runtime files Ray's root workers use. A stage's own Ray keeps them in a 0700 folder."""
    from cuda_agent.rl.driver.launch import remove_ray_tmp, stage_env

    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\n")
    config = load_run_config(run)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    env = stage_env(config, tmp_path / "stage", 0)
    private = Path(env["RAY_TMPDIR"])
    assert private.is_dir() and private.stat().st_mode & 0o777 == 0o700
    remove_ray_tmp(env)
    assert not private.exists()
    mine = tmp_path / "my_ray_tmp"
    mine.mkdir()
    monkeypatch.setenv("RAY_TMPDIR", str(mine))     # a folder the user named is theirs: used, never removed
    env = stage_env(config, tmp_path / "stage", 0)
    assert env["RAY_TMPDIR"] == str(mine)
    remove_ray_tmp(env)
    assert mine.is_dir()
