"""rl/rollout/chat_template: a model whose chat template shows no tools (SmolLM2-135M-Instruct) gets
cuda-agent's, in its folder, and every route reads the same text from it: verl's SFT rows (turn by
turn), the rollout's tokens (verl's token builder), and conversations without tools as before. The
agent-loop stages refuse an actor that could never call a tool."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from conftest import PLAIN_CHATML, copy_with_template  # noqa: E402
from cuda_agent.agent.tools import SCHEMAS  # noqa: E402
from cuda_agent.rl.data.rows import sft_row, write_parquet  # noqa: E402
from cuda_agent.rl.driver import launch  # noqa: E402
from cuda_agent.rl.driver.launch import require_tool_template  # noqa: E402
from cuda_agent.rl.driver.stages import TrainError  # noqa: E402
from cuda_agent.rl.rollout.chat_template import (TOOL_TEMPLATE, add_tool_template, renders_tool_calls,  # noqa: E402
                                                 token_builder)
from cuda_agent.rl.rollout.token_trajectory import for_template  # noqa: E402
from cuda_agent.rl.tools import pretrained  # noqa: E402

PLAIN = [{"role": "system", "content": "You complete CUDA kernels."}, {"role": "user", "content": "y = ???"},
         {"role": "assistant", "content": "fminf(v, 1.0f)"}]


def call(i: int, name: str, args: dict) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


# a fill run's shape: two calls in one reply, their two results, a fix, a last reply
AGENTIC = [{"role": "system", "content": "SKILL"}, {"role": "user", "content": "Fill ???."},
           {"role": "assistant", "content": "Writing it.",
            "tool_calls": [call(1, "edit_file", {"path": "k.cpp", "old_str": "y = ???;", "new_str": "y = -v;"}),
                           call(2, "verify", {})]},
           {"role": "tool", "tool_call_id": "call_1", "content": "edited k.cpp"},
           {"role": "tool", "tool_call_id": "call_2", "content": "verify: FAILED at stage 'correctness'"},
           {"role": "assistant", "content": "The sign.",
            "tool_calls": [call(3, "edit_file", {"path": "k.cpp", "old_str": "y = -v;", "new_str": "y = v;"}),
                           call(4, "verify", {})]},
           {"role": "tool", "tool_call_id": "call_3", "content": "edited k.cpp"},
           {"role": "tool", "tool_call_id": "call_4", "content": "verify: PASSED"},
           {"role": "assistant", "content": "Done."}]


@pytest.fixture(scope="module")
def tok(tiny_model):
    t = AutoTokenizer.from_pretrained(tiny_model)
    t.chat_template = TOOL_TEMPLATE
    return t


def test_a_template_that_shows_no_tool_calls_is_told_apart(tiny_model, tok):
    plain = AutoTokenizer.from_pretrained(tiny_model)
    plain.chat_template = PLAIN_CHATML
    assert not renders_tool_calls(plain)
    assert renders_tool_calls(tok)
    assert renders_tool_calls(AutoTokenizer.from_pretrained(tiny_model))   # the tiny model's own (Qwen-like)


def test_conversations_without_tools_read_as_before(tiny_model, tok):
    """The single-turn stages see the same text with either template."""
    plain = AutoTokenizer.from_pretrained(tiny_model)
    plain.chat_template = PLAIN_CHATML
    assert tok.apply_chat_template(PLAIN, tokenize=False) == plain.apply_chat_template(PLAIN, tokenize=False)
    assert (tok.apply_chat_template(PLAIN[:2], tokenize=False, add_generation_prompt=True)
            == plain.apply_chat_template(PLAIN[:2], tokenize=False, add_generation_prompt=True))


def test_sft_rows_rendered_turn_by_turn_equal_the_whole_conversation(tok, tiny_model, tmp_path):
    """verl's SFT dataset renders each message alone; with our template the pieces equal the whole
    (its check is on), so SFT trains on the rollout's text. The tiny model's template, which gathers
    consecutive tool results into one turn, fails that check."""
    from cuda_agent.rl.workers.sft_dataset import ToolSchemaSFTDataset

    data = write_parquet([sft_row(AGENTIC, SCHEMAS)], tmp_path / "sft.parquet")
    config = OmegaConf.create({"max_length": 4096, "truncation": "error", "ignore_input_ids_mismatch": False,
                               "messages_key": "messages", "tools_key": "tools"})
    row = ToolSchemaSFTDataset(str(data), tok, config)[0]
    ids = row["input_ids"][row["attention_mask"].bool()].tolist()
    assert tok.decode(ids) == tok.apply_chat_template(AGENTIC, tools=SCHEMAS, tokenize=False)
    with pytest.raises(AssertionError, match="apply_chat_template to each turn separately"):
        ToolSchemaSFTDataset(str(data), AutoTokenizer.from_pretrained(tiny_model), config)[0]


def test_the_rollout_keeps_the_newline_after_each_turn_for_a_model_type_verl_does_not_know(tok):
    """SmolLM2 is a `llama` model: verl gives it its default token builder, which drops the template's
    newline after the reply's <|im_end|> when it appends the tool results; token_builder swaps in
    verl's ChatML builder, and the rollout's tokens are the template's."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    first, reply, results = AGENTIC[:2], for_template(AGENTIC[2]), AGENTIC[3:5]
    whole = tok.apply_chat_template(first + [reply] + results, tools=SCHEMAS, add_generation_prompt=True,
                                    tokenize=True, return_dict=True)["input_ids"]
    head = tok.apply_chat_template(first, tools=SCHEMAS, add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"]
    sampled = whole[len(head):whole.index(tok.convert_tokens_to_ids("<|im_end|>"), len(head)) + 1]  # stops at <|im_end|>
    default = create_continuous_token_builder(tok, hf_model_type="llama")

    def rollout(builder):
        ids = builder.merge_assistant_tokens(builder.build_initial_tokens(first, tools=SCHEMAS), sampled).token_ids
        return builder.merge_context_tokens(first + [reply], first + [reply] + results, ids, tools=SCHEMAS).token_ids

    assert rollout(default) != whole and len(rollout(default)) == len(whole) - 1
    assert rollout(token_builder(default, tok)) == whole
    qwen = create_continuous_token_builder(tok, hf_model_type="qwen2")
    assert token_builder(qwen, tok) is qwen   # a builder verl chose for the model type is kept


def test_the_tool_template_is_written_into_a_folder_that_has_none(plain_model, tiny_model, tmp_path):
    folder = copy_with_template(plain_model, tmp_path / "model", PLAIN_CHATML)
    assert add_tool_template(folder)
    assert AutoTokenizer.from_pretrained(folder).chat_template == TOOL_TEMPLATE
    assert not add_tool_template(folder)                      # once
    own = copy_with_template(tiny_model, tmp_path / "own", AutoTokenizer.from_pretrained(tiny_model).chat_template)
    assert not add_tool_template(own)                         # a template that shows tool calls is kept
    # the SmolLM2 conversion's flag, on a folder converted before
    again = copy_with_template(plain_model, tmp_path / "converted", PLAIN_CHATML)
    assert pretrained.convert(again, tool_template=True) == again
    assert AutoTokenizer.from_pretrained(again).chat_template == TOOL_TEMPLATE


def test_an_agent_loop_stage_refuses_an_actor_that_could_never_call_a_tool(plain_model, tool_model):
    cfg = launch.compose("collect", [f"actor_rollout_ref.model.path={plain_model}", "trainer.n_gpus_per_node=1"])
    with pytest.raises(TrainError, match="does not show tool calls") as e:
        launch.check_ppo("fill_collect", cfg, 100, "cpu")
    assert "--tool-template" in str(e.value) and f"python -m cuda_agent.rl.rollout.chat_template {plain_model}" in str(e.value)
    require_tool_template(tool_model, "fill_collect")          # given ours: accepted
    require_tool_template("Org/a-hub-model", "fill_collect")  # not a folder here: verl's to find
