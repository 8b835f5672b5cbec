"""A tiny causal LM for plumbing tests of the RL stack, built offline and deterministically.

`build_tiny_model(dest)` writes a Hugging Face folder that verl, transformers and the `hf` rollout
load like any checkpoint:
- a byte-level BPE tokenizer trained here on cuda-agent's own `.py` files (vocabulary 4096), with
  the special tokens of a Qwen chat model: eos `<|im_end|>`, pad `<|endoftext|>`, and
  `<tool_call>`/`<tool_response>` for tools;
- a Qwen-style chat template of our own that renders tools and tool calls (hermes format, which
  verl's tool parser reads) and tool results;
- a randomly initialised `Qwen2ForCausalLM` (2 layers, hidden 256, tied embeddings; 2.2 M
  parameters, 9 MiB), seeded, so two builds from the same sources are identical.

It needs no network: only `tokenizers`, `transformers` and `torch`. Its output is noise; it exists
to exercise tokenisation, generation, weight sync and training end to end in seconds.

Run it as `python -m cuda_agent.rl.tools.tiny_model DEST`.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
                  "</tool_response>"]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# ChatML turns, tools listed in the system turn, calls as <tool_call>{json}</tool_call> (the hermes
# format), and consecutive tool results gathered into one user turn of <tool_response> blocks.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(first=0) -%}"
    "{%- if messages and messages[0].role == 'system' -%}{%- set ns.first = 1 -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if ns.first == 1 -%}{{ messages[0].content + '\\n\\n' }}{%- endif -%}"
    "{{ '# Tools\\n\\nYou may call one or more functions. Their signatures are inside <tools></tools>:' }}"
    "{{ '\\n<tools>\\n' }}"
    "{%- for tool in tools -%}{{ tool | tojson }}{{ '\\n' }}{%- endfor -%}"
    "{{ '</tools>\\n\\nFor each call, reply with a JSON object inside <tool_call></tool_call>:\\n<tool_call>\\n' }}"
    "{{ '{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif ns.first == 1 -%}"
    "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for m in messages[ns.first:] -%}"
    "{%- if m.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{ '<|im_start|>user\\n' }}"
    "{%- else -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- elif m.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls or [] -%}"
    "{%- set f = call.function if call.function is defined else call -%}"
    "{%- if not loop.first or m.content -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments | tojson }}{%- endif -%}"
    "{{ '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """The model's shape. The defaults give 2.2 M parameters."""

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 32768
    seed: int = 0


def training_files() -> list[Path]:
    """cuda-agent's own Python sources, in a fixed order: the tokenizer's training text."""
    import cuda_agent

    root = Path(cuda_agent.__file__).resolve().parent
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    if not files:
        raise FileNotFoundError(f"no .py files under {root} to train the tiny tokenizer on; is cuda_agent installed "
                                "from its sources or from a wheel?")
    return files


def build_tokenizer(spec: TinyModelSpec = TinyModelSpec()):
    """A byte-level BPE tokenizer trained on `training_files()`, with the chat template set."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([str(p) for p in training_files()], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
                                   additional_special_tokens=SPECIAL_TOKENS[3:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(dest: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write the tokenizer, config and seeded random weights of the tiny model to `dest`; return `dest`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    tokenizer.save_pretrained(dest)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
                         intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_hidden_layers,
                         num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
                         max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(dest)
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m cuda_agent.rl.tools.tiny_model",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="folder to write the model into (created if missing)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    dest = build_tiny_model(args.dest)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(f"tiny model in {dest} ({size / 2**20:.1f} MiB, {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
