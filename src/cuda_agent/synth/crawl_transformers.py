"""Seeds crawled from transformers: its activation classes, and the building blocks of its models
(attention, MLPs, norms, rotary embeddings, embeddings, poolers, decoder layers).

For every model type transformers registers (or the families asked for), the modeling module's
own classes whose names end like a block (`...Attention`, `...MLP`, `...RMSNorm`, ...) are built
from a small config of the model's config class and run on a small (batch, tokens, dim) tensor in a
few call forms; the first form that returns a tensor of the expected shape becomes the seed. Blocks
whose forward is the same source as one already kept (most families copy Llama's) are dropped as
duplicates. Nothing here may crash the crawl: every failure is a `Dropped` with its reason.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import re
import sys

from cuda_agent.synth.categories import category_of_name
from cuda_agent.synth.crawl_torch import Dropped, trial
from cuda_agent.synth.seeds import SMALL_SHAPES, Seed, _is_stochastic

BLOCK_SUFFIXES = ("Attention", "MLP", "FeedForward", "RMSNorm", "LayerNorm", "RotaryEmbedding", "Embeddings",
                  "Pooler", "DecoderLayer", "EncoderLayer")
# The small config every block is built from; `{c}` and `{heads}` are the task's sizes.
# Dropout probabilities are zero: tasks run in training mode, as KernelBench's do, and must be deterministic. Each
# family names them its own way (HubertConfig's hidden_dropout and activation_dropout were 0.1: ten blocks of the 6k
# run's catalog were rejected at run time as stochastic, 2026-11-29); a config keeps a name it does not use.
_CONFIG_ARGS = ("hidden_size={c}, intermediate_size=2 * {c}, num_attention_heads={heads}, "
                "num_key_value_heads={heads}, head_dim={c} // {heads}, num_hidden_layers=1, vocab_size=128, "
                "max_position_embeddings=4096, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, "
                "attention_dropout=0.0, hidden_dropout=0.0, activation_dropout=0.0, dropout=0.0, attn_pdrop=0.0, "
                "resid_pdrop=0.0, embd_pdrop=0.0, layerdrop=0.0, feat_proj_dropout=0.0, final_dropout=0.0, "
                "classifier_dropout=0.0, ffn_dropout=0.0, dropout_rate=0.0")
_ROTARY_CONFIG_ARGS = ("hidden_size={c}, num_attention_heads=1, num_key_value_heads=1, head_dim={c}, "
                       "num_hidden_layers=1, max_position_embeddings=4096")
_POSITIONS = "torch.arange({x}.shape[1], device={x}.device)[None]"


def _offline() -> None:
    """No download while crawling: a block that wants a checkpoint (timm backbones) is dropped (unless
    HF_HUB_OFFLINE is set otherwise). huggingface_hub reads the variable when it is first imported; where
    it was imported before (a version check imports transformers), its flag is set too: without it, on a
    machine without a network, each such block tried the hub five times with back-off, 23 s a try, and a
    crawl of the catalog outlived its 300 s limit (this 2-core machine, 2026-11-29)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and os.environ["HF_HUB_OFFLINE"].strip().lower() in ("1", "true", "yes", "on"):
        constants.HF_HUB_OFFLINE = True


def crawl_activations() -> list[Seed]:
    """transformers' activation classes (ACT2CLS)."""
    _offline()
    try:
        from transformers.activations import ACT2CLS
    except Exception:
        return []
    seeds, seen = [], set()
    for key, entry in sorted(ACT2CLS.items()):
        cls = entry[0] if isinstance(entry, tuple) else entry
        if not inspect.isclass(cls) or _is_stochastic(cls.__name__) or cls.__name__ in seen:
            continue
        if cls.__module__ != "transformers.activations":  # torch's own (nn.ReLU...), crawled from torch.nn
            continue
        seen.add(cls.__name__)
        seeds.append(Seed(f"hf.{cls.__name__}", "activation", "transformers", "{m}({x})", "any",
                          ctor=f"{cls.__name__}()", imports=(f"from transformers.activations import {cls.__name__}",),
                          note=f"ACT2CLS[{key!r}]"))
    return seeds


def model_families() -> list[tuple[str, str, str]]:
    """(model type, module name, config class name) of every model transformers registers."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    return sorted((t, model_type_to_module_name(t), cfg) for t, cfg in CONFIG_MAPPING_NAMES.items())


def _block_forms(cls_name: str, modeling: str, config: str, rotary: str | None, apply_rope: bool) -> list[Seed]:
    """The ways a block may be built and called, most plain first."""
    cfg = f"{config}({_CONFIG_ARGS})"
    own, with_cfg = (f"from {modeling} import {cls_name}",), (f"from {modeling} import {cls_name}",
                                                              f"from transformers import {config}")
    forms: list[tuple[str, str, str | None, tuple[str, ...]]] = []  # (ctor, call, out_layout, imports)
    if cls_name.endswith("Pooler"):
        forms += [(f"{cls_name}({cfg})", "{m}({x})", "NF", with_cfg)]
    elif cls_name.endswith("RotaryEmbedding"):
        if apply_rope:  # rotate the tokens by their positions with the family's own function
            rot_cfg = f"{config}({_ROTARY_CONFIG_ARGS})"
            call = f"apply_rotary_pos_emb({{x}}[:, None], {{x}}[:, None], *{{m}}({{x}}, {_POSITIONS}))[0][:, 0]"
            imports = (*with_cfg, f"from {modeling} import apply_rotary_pos_emb")
            forms += [(f"{cls_name}({rot_cfg})", call, None, imports),
                      (f"{cls_name}(config={rot_cfg})", call, None, imports)]
    elif cls_name.endswith(("RMSNorm", "LayerNorm")):
        forms += [(f"{cls_name}({{c}})", "{m}({x})", None, own), (f"{cls_name}({cfg})", "{m}({x})", None, with_cfg)]
    elif cls_name.endswith("Embeddings"):
        forms += [(f"{cls_name}({cfg})", "{m}(inputs_embeds={x})", None, with_cfg)]
    else:  # attention, MLPs, layers
        for ctor in (f"{cls_name}({cfg})", f"{cls_name}({cfg}, layer_idx=0)"):
            forms += [(ctor, "{m}({x})", None, with_cfg), (ctor, "{m}({x})[0]", None, with_cfg),
                      (ctor, "{m}({x}, attention_mask=None)[0]", None, with_cfg)]
            if rotary:  # the block takes (cos, sin): the family's rotary embedding makes them
                pair = f"nn.ModuleList([{ctor}, {rotary}({cfg})])"
                rope = f"{{m}}[1]({{x}}, {_POSITIONS})"
                imports = (*with_cfg, f"from {modeling} import {rotary}")
                forms += [(pair, f"{{m}}[0]({{x}}, position_embeddings={rope}, attention_mask=None)", None, imports),
                          (pair, f"{{m}}[0]({{x}}, position_embeddings={rope}, attention_mask=None)[0]", None,
                           imports)]
    category = category_of_name(cls_name)
    if category is None:
        return []
    return [Seed(f"hf.{cls_name}", category, "transformers", call, "BTD", ctor=ctor, out_layout=out,
                 imports=imports, note=f"crawled: {modeling.split('.')[-1]}")
            for ctor, call, out, imports in forms]


def _forward_key(cls: type, prefix: str) -> str:
    """The block's __init__ and forward source with its family's name taken out: equal for copies."""
    try:
        src = inspect.getsource(cls.__init__) + inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return cls.__qualname__
    src = re.sub(r"\s+", " ", src.replace(prefix, "X"))
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def crawl_family(model_type: str, module: str, config: str, seen: dict[str, str]) -> tuple[list[Seed], list[Dropped]]:
    """The blocks of one model family that build and run; `seen` maps forward keys to kept seeds."""
    import torch.nn as nn

    modeling = f"transformers.models.{module}.modeling_{module}"
    try:
        mod = importlib.import_module(modeling)
    except Exception as e:
        return [], [Dropped(model_type, "transformers", f"import failed: {type(e).__name__}: {str(e)[:120]}")]
    own = {n: c for n, c in vars(mod).items() if inspect.isclass(c) and c.__module__ == modeling
           and issubclass(c, nn.Module)}
    rotary = next((n for n in sorted(own) if n.endswith("RotaryEmbedding")), None)
    apply_rope = callable(getattr(mod, "apply_rotary_pos_emb", None))
    prefix = config[: -len("Config")] if config.endswith("Config") else config
    seeds, dropped = [], []
    for name in sorted(own):
        if not name.endswith(BLOCK_SUFFIXES) or "PreTrained" in name:
            continue
        key = _forward_key(own[name], prefix)
        if key in seen:
            dropped.append(Dropped(f"hf.{name}", "transformers", f"same source as {seen[key]}"))
            continue
        forms = _block_forms(name, modeling, config, rotary, apply_rope)
        if not forms:
            dropped.append(Dropped(f"hf.{name}", "transformers", "no call form for this kind of block"))
            continue
        reasons = []
        for seed in forms:
            reason = _reason(seed)
            if not reason:
                seen[key] = seed.name
                seeds.append(seed)
                break
            reasons.append(reason)
        else:  # the plainest form's failure says most; the others mostly fail on what it tried to add
            more = f" (and {len(reasons) - 1} other call forms)" if len(reasons) > 1 else ""
            dropped.append(Dropped(f"hf.{name}", "transformers", reasons[0] + more))
    return seeds, dropped


def _reason(seed: Seed) -> str:
    """Why a block is unusable: it fails, or does not keep (batch, tokens, dim) or pool it to
    (batch, dim) as the composer expects of it."""
    why, shape = trial(seed)
    if why:
        return why
    dims = SMALL_SHAPES["BTD"]
    want = (dims[0], dims[-1]) if seed.out_layout == "NF" else dims
    return "" if shape == want else f"returns shape {shape}, not {want}"


def crawl_blocks(families: tuple[str, ...] | None = None) -> tuple[list[Seed], list[Dropped]]:
    """Blocks of the given model types (all that transformers registers when None)."""
    _offline()
    try:
        known = model_families()
    except Exception as e:
        return [], [Dropped("transformers", "transformers", f"not importable: {type(e).__name__}: {e}")]
    if families is not None:
        missing = set(families) - {t for t, _, _ in known}
        known = [f for f in known if f[0] in families]
    seeds, dropped, seen, modules = [], [], {}, set()
    for model_type, module, config in known:
        if module in modules:  # several model types share one modeling module (gpt-sw3 and gpt2)
            continue
        modules.add(module)
        s, d = crawl_family(model_type, module, config, seen)
        seeds += s
        dropped += d
    if families is not None:
        dropped += [Dropped(t, "transformers", "no such model type in this transformers") for t in sorted(missing)]
    return seeds, dropped
