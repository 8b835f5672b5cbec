"""The client for any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ...), with retries
and messages a user can act on."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from cuda_agent.llm.model import ModelError, ModelReply, ToolCall, Usage
from cuda_agent.llm.textprotocol import parse_tool_calls

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "CUDA_AGENT_MODEL"


@dataclass(frozen=True)
class ModelSettings:
    """How the client asks: time-outs, retries and sampling (the agent's config.toml [model])."""

    timeout_s: float = 600.0
    max_retries: int = 6
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0
    protocol: str = "native"           # "native" | "text"
    temperature: float | None = None   # None: the endpoint's default
    max_tokens: int | None = None


@dataclass(frozen=True)
class Endpoint:
    model: str
    base_url: str | None
    api_key: str

    @classmethod
    def resolve(cls, model: str | None = None, base_url: str | None = None,
                api_key: str | None = None) -> "Endpoint":
        """Flags first, then OPENAI_BASE_URL, OPENAI_API_KEY and CUDA_AGENT_MODEL."""
        model = model or os.environ.get(ENV_MODEL)
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        api_key = api_key or os.environ.get(ENV_API_KEY)
        if not model:
            raise ModelError("no model named: pass --model NAME (the name the endpoint serves) or set "
                             f"{ENV_MODEL}; `cuda-agent demo` runs without one")
        if not base_url and not api_key:
            raise ModelError("no model endpoint configured: pass --base-url URL for a local server (vLLM, "
                             f"SGLang: http://HOST:PORT/v1), or set {ENV_BASE_URL} and/or {ENV_API_KEY} "
                             "for a hosted one")
        # Local servers accept any key, but the client insists on one.
        return cls(model=model, base_url=base_url, api_key=api_key or "EMPTY")


class OpenAIModel:
    """Any OpenAI-compatible chat endpoint with tool calling, through the official `openai` package.

    Retries with exponential back-off (honouring Retry-After) on rate limits, server errors,
    timeouts and lost connections; other refusals end the run with the endpoint's message.
    """

    def __init__(self, endpoint: Endpoint, settings: ModelSettings):
        try:
            import openai
        except ImportError:
            raise ModelError("talking to a model endpoint needs the openai package: "
                             "pip install 'cuda-agent[llm]'") from None
        self._openai = openai
        self.name = endpoint.model
        self.endpoint = endpoint
        self.settings = settings
        # Our own retry loop, so that back-off and the messages are ours and tests can shorten them.
        self.client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                    timeout=settings.timeout_s, max_retries=0)

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        kwargs: dict[str, Any] = {"model": self.name, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if self.settings.max_tokens is not None:
            kwargs["max_tokens"] = self.settings.max_tokens
        start = time.monotonic()
        response = self._create_with_retries(kwargs)
        return self._reply(response, time.monotonic() - start)

    def _create_with_retries(self, kwargs: dict[str, Any]) -> Any:
        openai = self._openai
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
        attempts = self.settings.max_retries + 1
        for attempt in range(attempts):
            try:
                return self.client.chat.completions.create(**kwargs)
            except retryable as e:
                if attempt + 1 == attempts:
                    raise ModelError(f"{self._where()}: {_describe(e)}, still after {attempts} attempts; "
                                     "check that the server is up and not overloaded, then resume the run "
                                     "with --resume") from e
                time.sleep(self._delay(attempt, e))
            except openai.APIStatusError as e:
                hint = ""
                if e.status_code == 400 and "tool" in str(e.message).lower():
                    hint = "; if the server has no tool calling, pass --tool-protocol text"
                elif e.status_code in (401, 403):
                    hint = f"; check the API key (--api-key or {ENV_API_KEY})"
                elif e.status_code == 404:
                    hint = "; check --model (the name the server serves) and --base-url (usually ends in /v1)"
                raise ModelError(f"{self._where()} refused the request ({e.status_code}): {e.message}{hint}") from e
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, error: Exception) -> float:
        delay = self.settings.backoff_s * 2 ** attempt
        response = getattr(error, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        try:
            if retry_after is not None:
                delay = max(delay, float(retry_after))
        except ValueError:
            pass
        return min(delay, self.settings.backoff_max_s)

    def _where(self) -> str:
        return f"model {self.name!r} at {self.endpoint.base_url or 'the OpenAI API'}"

    def _reply(self, response: Any, seconds: float) -> ModelReply:
        if not getattr(response, "choices", None):
            raise ModelError(f"{self._where()} answered without a choice: {str(response)[:300]}")
        message = response.choices[0].message
        content = message.content or ""
        calls = [ToolCall(id=tc.id or f"call_{i}", name=tc.function.name or "", arguments=tc.function.arguments or "")
                 for i, tc in enumerate(message.tool_calls or [])]
        if not calls and "<tool_call>" in content:
            # Servers without a tool-call parser pass the model's own call syntax through as text.
            content, calls = parse_tool_calls(content)
        usage = response.usage
        return ModelReply(content=content, tool_calls=calls, seconds=seconds,
                          usage=Usage(getattr(usage, "prompt_tokens", 0) or 0,
                                      getattr(usage, "completion_tokens", 0) or 0))


def _describe(error: Exception) -> str:
    status = getattr(error, "status_code", None)
    if status == 429:
        return "rate limited (429)"
    if status is not None:
        return f"server error ({status})"
    name = type(error).__name__
    return "timed out" if "Timeout" in name else f"connection failed ({error})"
