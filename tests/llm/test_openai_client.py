"""The OpenAI-compatible client against a real HTTP server speaking the chat API."""

from __future__ import annotations

import json
import sys
import time

import pytest

from dataclasses import replace

from cuda_agent.llm import Endpoint, ModelError, ModelSettings, OpenAIModel
from cuda_agent.llm.textprotocol import TextProtocolModel, parse_tool_calls

from .fakes import ChatServer, error, reply, slow

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
SCHEMAS = [{"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": []}}}
    for name in ("bash", "read_file", "verify")]
TEXT_PROTOCOL = "\n\nCall a tool with <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>. Tools:\n{tools}"


@pytest.fixture
def settings() -> ModelSettings:
    """Quick retries and timeouts."""
    return ModelSettings(backoff_s=0.01, backoff_max_s=0.05, timeout_s=2.0, max_retries=3)


def client(server: ChatServer, settings: ModelSettings) -> OpenAIModel:
    return OpenAIModel(Endpoint("test-model", server.url, "EMPTY"), settings)


def test_native_tool_calls_and_usage_are_read(settings):
    with ChatServer([reply("looking", ("read_file", {"path": "model.py"}), prompt_tokens=321)]) as server:
        r = client(server, settings).query(MESSAGES, SCHEMAS)
    assert r.content == "looking"
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("read_file", {"path": "model.py"})]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (321, 20)
    sent = server.requests[0]
    assert sent["model"] == "test-model" and sent["messages"] == MESSAGES
    assert {t["function"]["name"] for t in sent["tools"]} == {"bash", "read_file", "verify"}


def test_rate_limit_is_retried_with_backoff(settings):
    script = [error(429, "slow down", {"retry-after": "0.01"}), error(429), reply("ok")]
    with ChatServer(script) as server:
        r = client(server, settings).query(MESSAGES, [])
    assert r.content == "ok" and len(server.requests) == 3


def test_read_timeout_is_retried(settings):
    config = replace(settings, timeout_s=0.5)
    with ChatServer([slow(3.0, reply("too late")), reply("in time")]) as server:
        start = time.monotonic()
        r = client(server, config).query(MESSAGES, [])
    assert r.content == "in time"
    assert time.monotonic() - start < 3.0, "the client waited past its timeout"


def test_server_errors_are_retried(settings):
    with ChatServer([error(500), error(503), reply("ok")]) as server:
        assert client(server, settings).query(MESSAGES, []).content == "ok"


def test_endless_rate_limits_end_with_a_clear_error(settings):
    with ChatServer([error(429)] * 10) as server:
        with pytest.raises(ModelError, match=r"rate limited \(429\), still after 4 attempts.*--resume"):
            client(server, settings).query(MESSAGES, [])


def test_refused_tools_suggest_the_text_protocol(settings):
    with ChatServer([error(400, '"auto" tool choice requires --enable-auto-tool-choice')]) as server:
        with pytest.raises(ModelError, match="--tool-protocol text"):
            client(server, settings).query(MESSAGES, SCHEMAS)
    assert len(server.requests) == 1, "a 400 is not worth retrying"


def test_no_endpoint_configured_says_what_to_do(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "CUDA_AGENT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ModelError, match="--model NAME"):
        Endpoint.resolve()
    with pytest.raises(ModelError, match="--base-url URL"):
        Endpoint.resolve(model="m")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://h:1/v1")
    monkeypatch.setenv("CUDA_AGENT_MODEL", "m")
    assert Endpoint.resolve() == Endpoint("m", "http://h:1/v1", "EMPTY")


def test_missing_openai_package_says_how_to_install(monkeypatch, settings):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ModelError, match=r"pip install 'cuda-agent\[llm\]'"):
        OpenAIModel(Endpoint("m", "http://h:1/v1", "k"), settings)


def test_tool_call_blocks_in_text_become_calls(settings):
    text = 'I will read it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "model.py"}}\n</tool_call>'
    with ChatServer([reply(text)]) as server:
        r = client(server, settings).query(MESSAGES, SCHEMAS)
    assert r.content == "I will read it."
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("read_file", {"path": "model.py"})]


def test_malformed_tool_call_block_becomes_a_call_without_name():
    content, calls = parse_tool_calls('<tool_call>{"name": "bash", "arguments": {"command": </tool_call>')
    assert content == "" and len(calls) == 1
    assert calls[0].name == "" and calls[0].arguments.startswith('{"name"')


def test_text_protocol_sends_plain_chat(settings):
    history = MESSAGES + [
        {"role": "assistant", "content": "look", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "model.py"}]
    answer = '<tool_call>{"name": "verify", "arguments": {}}</tool_call>'
    with ChatServer([reply(answer)]) as server:
        model = TextProtocolModel(client(server, settings), TEXT_PROTOCOL)
        r = model.query(history, SCHEMAS)
    assert [c.name for c in r.tool_calls] == ["verify"]
    sent = server.requests[0]
    assert "tools" not in sent
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    assert '"name": "read_file"' in sent["messages"][0]["content"]        # the schemas, in the prompt
    assert '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}' in sent["messages"][2]["content"]
    assert sent["messages"][3]["content"] == "<tool_response>\nmodel.py\n</tool_response>"


def _free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_fails_at_once_without_retries():
    notes: list[str] = []
    model = OpenAIModel(Endpoint("m", f"http://127.0.0.1:{_free_port()}/v1", "EMPTY"),
                        ModelSettings(max_retries=6, backoff_s=2.0), on_retry=notes.append)
    start = time.monotonic()
    with pytest.raises(ModelError, match=r"cannot connect \(.*Connection refused.*\); check that the server is "
                                         r"running and that --base-url names it") as caught:
        model.query(MESSAGES, [])
    assert time.monotonic() - start < 1.9, "it waited for a back-off (2 s) before failing"
    assert notes == [] and "\n" not in str(caught.value)


def test_a_server_gone_after_answering_is_retried_as_a_lost_connection(settings):
    notes: list[str] = []
    with ChatServer([reply("first")]) as server:
        model = OpenAIModel(Endpoint("m", server.url, "EMPTY"), settings, on_retry=notes.append)
        assert model.query(MESSAGES, []).content == "first"
    with pytest.raises(ModelError, match=r"cannot connect .*, still after 4 attempts.*--resume"):
        model.query(MESSAGES, [])                # the server is down now: a restart, maybe
    assert [n.split(";")[1].split(" in ")[0] for n in notes] == [" retry 1 of 3", " retry 2 of 3", " retry 3 of 3"]


def test_timeouts_are_retried_and_each_retry_is_told_and_kept(settings):
    notes: list[str] = []
    config = replace(settings, timeout_s=0.5)
    with ChatServer([slow(3.0, reply("too late")), reply("in time")]) as server:
        r = OpenAIModel(Endpoint("m", server.url, "EMPTY"), config, on_retry=notes.append).query(MESSAGES, [])
    assert r.content == "in time"
    assert len(notes) == 1 and notes[0].startswith("model: no answer within 0.5 s (timeout_s); retry 1 of 3 in ")
    assert r.retries == notes, "the reply carries its retries, for the trajectory"


def test_a_dead_endpoint_is_found_before_any_work(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ModelError, match=r"^model 'm' at http://127.0.0.1:\d+/v1: cannot connect \(.*\); check"):
        Endpoint("m", f"http://127.0.0.1:{_free_port()}/v1", "EMPTY").check()
    with ChatServer([]) as server:
        Endpoint("m", server.url, "EMPTY").check()          # up: nothing said, nothing asked
    assert server.requests == []
    Endpoint("m", None, "key").check()                       # the hosted API: nothing to check here
