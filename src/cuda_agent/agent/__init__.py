"""The agent: a model works in a task's workspace with tools (bash, files, search, and the harness's
compile/verify/profile) until it is done or out of budget; the best solution the harness verified
is kept.

- `optimize`, `optimize_many`, `demo` (run.py): runs and their output folders.
- `Agent` (loop.py): the loop. `Model`: the protocol, from `cuda_agent.llm` (an OpenAI-compatible
  client, the text protocol), with replay in replay.py. `Tools` (tools.py), `Evaluator` (evaluator.py): what the model acts on.
"""

from cuda_agent.agent.config import AgentConfig, load_config, override
from cuda_agent.agent.loop import Agent, Outcome
from cuda_agent.llm import Model, ModelError, ModelReply, OpenAIModel, ToolCall, Usage
from cuda_agent.agent.report import RunResult
from cuda_agent.agent.run import demo, make_model, optimize, optimize_many

__all__ = ["Agent", "AgentConfig", "Model", "ModelError", "ModelReply", "OpenAIModel", "Outcome", "RunResult",
           "ToolCall", "Usage", "demo", "load_config", "make_model", "optimize", "optimize_many", "override"]
