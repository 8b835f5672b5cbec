"""The client for any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ...), with retries
and messages a user can act on."""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.llm.model import ModelError, ModelReply, ToolCall, Usage
from cuda_agent.llm.textprotocol import parse_tool_calls

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "CUDA_AGENT_MODEL"
# A server that takes this long to accept a connection is not there; the answer may take timeout_s.
CONNECT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ModelSettings:
    """How the client asks: time-outs, retries and sampling (the agent's config.toml [model])."""

    timeout_s: float = 600.0
    max_retries: int = 6
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0
    protocol: str = "native"           # "native" | "text"
    format_reminders: int = 3          # replies without a tool call answered with the protocol's syntax
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

    def check(self) -> None:
        """Fail now, before any work starts, if nothing listens at the server's host and port (refused,
        unknown host). A slow network passes: timeouts are the client's to retry. Through a proxy, or
        for the hosted API, there is nothing to check here."""
        if not self.base_url:
            return
        url = urllib.parse.urlsplit(self.base_url)
        if not url.hostname or (urllib.request.getproxies() and not urllib.request.proxy_bypass(url.hostname)):
            return
        try:
            socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                     timeout=CONNECT_TIMEOUT_S).close()
        except TimeoutError:
            return
        except OSError as e:
            raise ModelError(cannot_connect(f"model {self.model!r} at {self.base_url}", e)) from None


class OpenAIModel:
    """Any OpenAI-compatible chat endpoint with tool calling, through the official `openai` package.

    An endpoint that cannot be connected to before it has ever answered (nothing listens there, an
    unknown host) fails at once. Timeouts, rate limits, server errors and connections lost after an
    answer are retried with exponential back-off (honouring Retry-After), each retry told to
    `on_retry` as one line and kept in the reply; other refusals end the run with the endpoint's message.
    """

    def __init__(self, endpoint: Endpoint, settings: ModelSettings, on_retry: Callable[[str], None] | None = None):
        try:
            import openai
        except ImportError:
            raise ModelError("talking to a model endpoint needs the openai package: "
                             "pip install 'cuda-agent[llm]'") from None
        self._openai = openai
        self.name = endpoint.model
        self.endpoint = endpoint
        self.settings = settings
        self.on_retry = on_retry or (lambda note: None)
        self._answered = False   # whether the endpoint has answered once: then a refused connection is a lost one
        # Our own retry loop, so that back-off and the messages are ours and tests can shorten them.
        timeout = openai.Timeout(settings.timeout_s, connect=min(settings.timeout_s, CONNECT_TIMEOUT_S))
        self.client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                    timeout=timeout, max_retries=0)

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        kwargs: dict[str, Any] = {"model": self.name, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if self.settings.max_tokens is not None:
            kwargs["max_tokens"] = self.settings.max_tokens
        start = time.monotonic()
        retries: list[str] = []
        response = self._create_with_retries(kwargs, retries)
        reply = self._reply(response, time.monotonic() - start)
        reply.retries = retries
        return reply

    def _create_with_retries(self, kwargs: dict[str, Any], retries: list[str]) -> Any:
        openai = self._openai
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
        attempts = self.settings.max_retries + 1
        for attempt in range(attempts):
            try:
                response = self.client.chat.completions.create(**kwargs)
                self._answered = True
                return response
            except retryable as e:
                if not self._answered and _transport_error(e) == "ConnectError":
                    raise ModelError(cannot_connect(self._where(), e.__cause__)) from e
                if attempt + 1 == attempts:
                    raise ModelError(f"{self._where()}: {self._describe(e)}, still after {attempts} attempts; "
                                     "check that the server is up and not overloaded, then resume the run "
                                     "with --resume") from e
                delay = self._delay(attempt, e)
                note = f"model: {self._describe(e)}; retry {attempt + 1} of {attempts - 1} in {delay:.3g} s"
                retries.append(note)
                self.on_retry(note)
                time.sleep(delay)
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

    def _describe(self, error: Exception) -> str:
        status = getattr(error, "status_code", None)
        if status == 429:
            return "rate limited (429)"
        if status is not None:
            return f"server error ({status})"
        if _transport_error(error) == "ConnectError":
            return f"cannot connect ({error.__cause__})"
        if _transport_error(error) == "ConnectTimeout":
            return f"no connection within {min(self.settings.timeout_s, CONNECT_TIMEOUT_S):g} s"
        if isinstance(error, self._openai.APITimeoutError):
            return f"no answer within {self.settings.timeout_s:g} s (timeout_s)"
        return f"connection lost ({error.__cause__ or error})"

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


def _transport_error(error: Exception) -> str:
    """The class name of the transport's error under an API error: `ConnectError` when no connection
    could be made (refused, unknown host), `ConnectTimeout`, `ReadTimeout`, ... By name, because the
    openai package's transport is httpx or, in newer releases, httpx2."""
    return type(error.__cause__).__name__ if error.__cause__ is not None else ""


def cannot_connect(where: str, error: object) -> str:
    return (f"{where}: cannot connect ({error}); check that the server is running and that --base-url names "
            "it (http://HOST:PORT/v1)")
