"""How the agent picks its model from the config (the clients themselves: tests/llm)."""

from __future__ import annotations

import pytest

from cuda_agent.agent.config import override
from cuda_agent.llm import TextProtocolModel


def test_the_text_protocol_is_chosen_by_config(fast_config):
    from cuda_agent.agent.run import make_model

    model = make_model(model="m", base_url="http://h:1/v1", config=override(fast_config, model={"protocol": "text"}))
    assert isinstance(model, TextProtocolModel) and model.name == "m"
    with pytest.raises(ValueError, match="use 'native' or 'text'"):
        make_model(model="m", base_url="http://h:1/v1", config=override(fast_config, model={"protocol": "xml"}))
