"""Talking to models: the `Model` protocol and its reply type, the client for any OpenAI-compatible
chat endpoint, and the text protocol for endpoints without native tool calling. No other module
speaks to a model endpoint.

- `model.py`: `Model`, `ModelReply`, `ToolCall`, `Usage`, `ModelError`.
- `textprotocol.py`: `<tool_call>` blocks in text, both ways; `TextProtocolModel`.
- `openai_client.py`: `Endpoint`, `ModelSettings`, `OpenAIModel`.
"""

from cuda_agent.llm.model import Model, ModelError, ModelReply, ToolCall, Usage
from cuda_agent.llm.openai_client import Endpoint, ModelSettings, OpenAIModel
from cuda_agent.llm.textprotocol import TextProtocolModel, parse_tool_calls, render_tool_call, to_text_messages

__all__ = ["Endpoint", "Model", "ModelError", "ModelReply", "ModelSettings", "OpenAIModel", "TextProtocolModel",
           "ToolCall", "Usage", "parse_tool_calls", "render_tool_call", "to_text_messages"]
