"""The tiny offline model: deterministic, loadable, and with a chat template verl's Qwen token builder accepts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers", reason="the tiny model needs transformers (install cuda-agent[rl])")

from cuda_agent.rl.tools.tiny_model import build_tiny_model  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "compile", "description": "Build kernels/",
                                            "parameters": {"type": "object", "properties": {}}}}]


def test_two_builds_are_byte_identical(tiny_model, tmp_path):
    again = build_tiny_model(tmp_path / "again")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_model / name).read_bytes(), name


def test_tokenizer_has_qwen_special_tokens(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert len(tok.encode("\n", add_special_tokens=False)) == 1  # verl's Qwen builder needs a one-token newline
    for special in ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_start|>"):
        assert len(tok.encode(special, add_special_tokens=False)) == 1, special
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["eos_token_id"] == tok.eos_token_id and config["model_type"] == "qwen2"


def test_chat_template_renders_tools_calls_and_results(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": "You write CUDA."}, {"role": "user", "content": "Make relu fast."},
                {"role": "assistant", "content": "Building.",
                 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "compile", "arguments": {}}}]},
                {"role": "tool", "content": "ok 1"}, {"role": "tool", "content": "ok 2"},
                {"role": "assistant", "content": "Done."}]
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou write CUDA.\n\n# Tools\n")
    assert '{"name": "compile"' in text.split("<tools>\n")[1].split("</tools>")[0]
    assert ('<|im_start|>assistant\nBuilding.\n<tool_call>\n{"name": "compile", "arguments": {}}\n</tool_call>'
            '<|im_end|>\n') in text
    assert ("<|im_start|>user\n<tool_response>\nok 1\n</tool_response>\n<tool_response>\nok 2\n</tool_response>"
            "<|im_end|>\n") in text
    assert text.endswith("<|im_start|>assistant\nDone.<|im_end|>\n")
    prompt = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert prompt == ("<|im_start|>system\nYou write CUDA.<|im_end|>\n<|im_start|>user\nMake relu fast.<|im_end|>\n"
                      "<|im_start|>assistant\n")


def test_verl_tool_parser_reads_a_rendered_call(tiny_model):
    pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[rl]')")
    import asyncio

    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.tool_parser import ToolParser

    tok = AutoTokenizer.from_pretrained(tiny_model)
    reply = tok.encode('Building.\n<tool_call>\n{"name": "compile", "arguments": {"flags": "-O3"}}\n</tool_call>'
                       "<|im_end|>", add_special_tokens=False)
    text, calls = asyncio.run(ToolParser.get_tool_parser("hermes", tok).extract_tool_calls(reply))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("compile", {"flags": "-O3"})]
