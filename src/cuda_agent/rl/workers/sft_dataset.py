"""verl's multi-turn SFT dataset for the Parquet that rl/data/rows.py writes: the `tools` column holds
the tool schemas as one JSON text (Parquet would give every tool the properties of all of them), and
a message marked `train: false` stays in the text but out of the loss (a demonstration's deliberate
mistake, rl/driver/fill_demos.py: the model learns the fix that follows it, not to make it).

verl loads it with `data.custom_cls.path=pkg://cuda_agent.rl.workers.sft_dataset
data.custom_cls.name=ToolSchemaSFTDataset` (the rft stage config sets both)."""

from __future__ import annotations

import json

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset


class ToolSchemaSFTDataset(MultiTurnSFTDataset):
    """MultiTurnSFTDataset whose tools arrive as JSON text; an empty list means no tools."""

    def _read_files_and_process(self):
        super()._read_files_and_process()
        if self.tools is not None:
            self.tools = [_schemas(t) for t in self.tools]

    def _process_single_message(self, index, message, *args, **kwargs):
        input_ids, loss_mask, attention_mask, inputs = super()._process_single_message(index, message, *args, **kwargs)
        if message.get("train") is not None and not message["train"]:   # Parquet gives the others None
            loss_mask = loss_mask * 0
        return input_ids, loss_mask, attention_mask, inputs


def _schemas(value):
    if value is None or not isinstance(value, str):
        return value or None
    tools = json.loads(value)
    return tools or None
