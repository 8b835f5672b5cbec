"""Fixtures of the RL tests: the tiny model, built once per session (needs transformers and tokenizers), an
agent config overlay for the agent loop's runs, and the live loops' evaluation service started on the main
thread."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("transformers", reason="the tiny model needs transformers (install cuda-agent[rl])")
    from cuda_agent.rl.tools.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def agent_toml(tmp_path_factory) -> Path:
    """An agent config overlay for the loop's tests: commands run as this user (no tool user to claim)."""
    path = tmp_path_factory.mktemp("agent") / "agent.toml"
    path.write_text("[run]\nisolation = false\n\n[limits]\nbash_timeout_s = 60\n")
    return path


@pytest.fixture(scope="module")
def loop_service():
    """The evaluation service a live `cuda_agent` loop of these tests asks for (device cpu, the loop's
    default options), started here on the main thread. The loop would start it in the agent's thread,
    and a local Ray started off the main thread takes 15 s to shut down (Ray 2.60: its driver's
    shutdown waits out timeouts) against 1.5 s for one started on it. The module's own fixture closes it."""
    from cuda_agent.rl.rollout.evaluation import service_settings, shared_service

    return shared_service(service_settings("cpu", None))


# ChatML without tools, as many small chat models ship it (SmolLM2's renders no tools either): a
# template of our own for the tests, the shape of the ones rl/rollout/chat_template.py tells apart
PLAIN_CHATML = ("{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


def copy_with_template(src: Path, dest: Path, template: str) -> Path:
    """A copy of the model folder `src` whose tokenizer has `template`."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(src, dest)
    tok = AutoTokenizer.from_pretrained(dest)
    tok.chat_template = template
    tok.save_pretrained(dest)
    return dest


@pytest.fixture(scope="session")
def plain_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model with a chat template that shows no tools (as SmolLM2 comes)."""
    return copy_with_template(tiny_model, tmp_path_factory.mktemp("plain") / "model", PLAIN_CHATML)


@pytest.fixture(scope="session")
def tool_model(plain_model, tmp_path_factory) -> Path:
    """The tiny model given cuda-agent's tool template the way SmolLM2 gets it (add_tool_template)."""
    from cuda_agent.rl.rollout.chat_template import add_tool_template

    dest = copy_with_template(plain_model, tmp_path_factory.mktemp("tools") / "model", PLAIN_CHATML)
    assert add_tool_template(dest)
    return dest
