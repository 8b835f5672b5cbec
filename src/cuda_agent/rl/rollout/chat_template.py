"""A chat template that shows tools, tool calls and tool results, for models whose own template does not.

The agent loop's policy calls tools in the hermes format of Qwen-style ChatML templates
(`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, read by llm/textprotocol.py), and it
can learn that only if its prompt lists the tools and the conversation shows its earlier calls and
their results. SmolLM2-135M-Instruct's template shows none of it: it drops `tools`, drops an
assistant message's `tool_calls`, and writes a tool result as a turn of a role the model never saw.
`renders_tool_calls` tells such a template apart (it renders a conversation with one tool call and
reads the call back with the agent's own parser); `TOOL_TEMPLATE` is ours, ChatML with hermes calls.

Where it is set: in the model folder's tokenizer files (`add_tool_template`, which
`python -m cuda_agent.rl.tools.pretrained OUT --tool-template` runs after converting SmolLM2), not by a
stage option. Every reader of a model takes the template from its folder: verl's SFT dataset,
verl's rollout workers (and through them the agent loop's token builder), fill_eval, vLLM or
SGLang servers; and verl's exported checkpoints carry it into the next stage's actor. A stage
option would have to reach each of them on its own (verl's `custom_chat_template` for rollouts,
another way for SFT, a third for evaluation), and one missed would train on one text and sample
on another. The stages that run the agent loop refuse an actor whose template shows no hermes
tool call (the driver's `launch.require_tool_template`, from launch.check_ppo and the fill_agentic_rft
stage) and say how to add ours: `python -m cuda_agent.rl.rollout.chat_template FOLDER`.

Two choices in the template keep every route on the same text:
- plain conversations (system, user, assistant, no tools) render as a ChatML template without tools
  renders them (`<|im_start|>role\\ncontent<|im_end|>\\n`), so the single-turn stages read the same
  text with either template;
- each tool result is a user turn of its own (`<tool_response>` inside), not gathered with the next
  one as Qwen's template gathers them: verl's SFT dataset renders a conversation message by message,
  and only then do its pieces equal the whole, so the SFT rows hold the rollout's text exactly.
verl picks the rollout's token builder by config.json's `model_type`; a type it does not know
(SmolLM2's `llama`) gets the default builder, which drops the newline after each `<|im_end|>` where
tool results are appended. `token_builder` gives a model with this template verl's ChatML builder
(the Qwen one), which puts it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# ChatML; the tools as JSON schemas in the system turn, with how to call them; an assistant's calls as
# <tool_call> blocks after its text; each tool result a user turn holding a <tool_response> block.
TOOL_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system = messages[0].content -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set system = none -%}{%- set rest = messages -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\n' }}{%- if system -%}{{ system + '\\n\\n' }}{%- endif -%}"
    "{{ '# Tools\\n\\nThe functions you can call, one JSON schema a line:\\n<tools>\\n' }}"
    "{%- for tool in tools -%}{{ tool | tojson }}{{ '\\n' }}{%- endfor -%}"
    "{{ '</tools>\\n\\nTo call functions, write one block a call after your text, a JSON object with the '"
    "   + 'function\\'s name and its arguments:\\n<tool_call>\\n{\"name\": \"NAME\", \"arguments\": {...}}\\n'"
    "   + '</tool_call><|im_end|>\\n' }}"
    "{%- elif system is not none -%}{{ '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for m in rest -%}"
    "{%- if m.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls or [] -%}"
    "{%- set f = call.function if call.function is defined else call -%}"
    "{%- if m.content or not loop.first -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments | tojson }}{%- endif -%}"
    "{{ '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' -%}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# a conversation with one call of a tool no template knows, and its result
_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool_b41e", "description": "A probe.",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}
_PROBE = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"id": "call_0", "type": "function", "function": {"name": "probe_tool_b41e",
                                                                "arguments": {"x": "probe-argument-77c2"}}}]},
          {"role": "tool", "tool_call_id": "call_0", "content": "probe-result-3f9d"}]


def renders_tool_calls(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template lists the tools, writes an assistant's tool call as a
    hermes `<tool_call>` block that the agent's parser reads back, and shows the tool's result."""
    from cuda_agent.llm import parse_tool_calls

    try:
        text = tokenizer.apply_chat_template(_PROBE, tools=[_PROBE_TOOL], tokenize=False)
    except Exception:   # a template that refuses tools or the tool role
        return False
    # listed and called: the name twice; and the result shown
    if not isinstance(text, str) or text.count("probe_tool_b41e") < 2 or "probe-result-3f9d" not in text:
        return False
    _, calls = parse_tool_calls(text)
    return any(c.name == "probe_tool_b41e" and _arguments(c.arguments) == {"x": "probe-argument-77c2"} for c in calls)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def add_tool_template(folder: str | Path) -> bool:
    """Write TOOL_TEMPLATE into the model folder's tokenizer files when the folder's own template
    cannot show tool calls (True); a folder whose template can is left as it is (False)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if renders_tool_calls(tokenizer):
        return False
    tokenizer.chat_template = TOOL_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    return True


def token_builder(builder: Any, tokenizer: Any) -> Any:
    """The agent loop's token builder: verl's ChatML builder (Qwen's) for a model with TOOL_TEMPLATE
    that verl gave the default builder (a model type it does not know), else `builder` itself."""
    from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, QwenContinuousTokenBuilder

    if type(builder) is ContinuousTokenBuilder and getattr(tokenizer, "chat_template", None) == TOOL_TEMPLATE:
        return QwenContinuousTokenBuilder(tokenizer, chat_template_kwargs=builder.chat_template_kwargs)
    return builder


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cuda_agent.rl.rollout.chat_template",
                                 description="Give a Hugging Face model folder cuda-agent's tool template, "
                                             "unless its own shows hermes tool calls.")
    ap.add_argument("folder", help="the model folder (its tokenizer files are rewritten)")
    args = ap.parse_args(argv)
    written = add_tool_template(args.folder)
    print(f"{args.folder}: {'tool template written' if written else 'its own template shows tool calls; unchanged'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
