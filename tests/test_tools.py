"""Tool calls (trt_spec/tools.py): OpenAI's tools and tool_choice through the chat template, the
<tool_call> format parsed (whole and streamed), required and named choices held to the
parameters' schemas by a grammar (speculation changing nothing), bad tools refused; through the
openai client on a tiny model and on the default pair."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import spec_pairs
from trt_spec import Engine
from trt_spec.tools import ToolCallStream, check_tools, parse_tool_calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def eng(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    root = tmp_path_factory.mktemp("tools")
    return Engine(spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=2, max_seq_len=256))


def check_call(call, tools=(WEATHER, TIME)) -> None:
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.name in spec and call.id.startswith("call_")
    args = json.loads(call.arguments)
    props = spec[call.name]["properties"]
    assert set(args) == set(spec[call.name]["required"])
    for k, v in args.items():
        if "enum" in props[k]:
            assert v in props[k]["enum"]
        else:
            assert isinstance(v, str) and len(v) <= 12


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_time"}}]
)
def test_required_and_named_choices_always_call(eng: Engine, choice) -> None:
    """A random tiny model still answers with well-formed calls of the tools' schemas (the named
    choice: one call of that function), and speculation gives the target-only tokens."""
    many = eng.generate(ASK, max_new_tokens=140, tools=[WEATHER, TIME], tool_choice=choice)
    assert many.tool_calls  # (parallel calls allowed: complete ones parsed, even if cut)
    for seed in range(3):
        kw = dict(max_new_tokens=120, tools=[WEATHER, TIME], tool_choice=choice)
        kw["parallel_tool_calls"] = False  # (one call, then the end)
        s = dict(temperature=0.8, seed=seed) if seed else {}
        base = eng.generate(ASK, draft="none", **kw, **s)
        assert base.finish_reason == "stop_token", base.text
        assert base.tool_calls, base.text
        for c in base.tool_calls:
            check_call(c)
        if isinstance(choice, dict):
            assert [c.name for c in base.tool_calls] == ["get_time"]
        if not seed:
            for draft in ["model", "lookup"]:
                got = eng.generate(ASK, draft=draft, **kw)
                assert got.token_ids == base.token_ids


def test_auto_and_none(eng: Engine) -> None:
    r = eng.generate(ASK, max_new_tokens=12, tools=[WEATHER])
    assert r.tool_calls == [] or all(c.name == "get_weather" for c in r.tool_calls)
    plain = eng.generate(ASK, max_new_tokens=12)
    assert plain.tool_calls is None
    none = eng.generate(ASK, max_new_tokens=12, tools=[WEATHER], tool_choice="none")
    assert none.token_ids == plain.token_ids  # (the tools left out of the prompt)


def test_parse_and_stream_split() -> None:
    text = (
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n'
        "</tool_call>"
    )
    content, calls = parse_tool_calls(text)
    assert content == "Sure." and [c.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].arguments) == {"city": "Oslo"}
    assert parse_tool_calls("<tool_call>{not json}</tool_call>")[1] == []
    fenced = '```json\n{"name": "get_time", "arguments": {"zone": "CET"}}\n```'
    assert parse_tool_calls(fenced)[1] == []  # (without the tools' names: text)
    assert [c.name for c in parse_tool_calls(fenced, ["get_time"])[1]] == ["get_time"]
    assert parse_tool_calls(fenced, ["other"])[1] == []
    for cut in range(1, len(text)):
        s = ToolCallStream()
        shown = s.feed(text[:cut]) + s.feed(text[cut:])
        tail, calls = s.finish()
        assert shown + tail == "Sure.\n" and len(calls) == 2
    s = ToolCallStream()
    assert s.feed("a <tool") == "a " and s.feed("box> b") == "<toolbox> b"
    assert s.finish() == ("", [])
    s = ToolCallStream(["get_time"])  # a fenced call object: held back whole, then a call
    assert s.feed("\n") + s.feed(fenced[:5]) + s.feed(fenced[5:]) == "\n"
    assert [c.name for c in s.finish()[1]] == ["get_time"]
    s = ToolCallStream(["get_time"])  # ... or text, if it is none
    assert s.feed('{"a": 1}') == "" and s.finish() == ('{"a": 1}', [])


@pytest.mark.parametrize(
    "tools,choice,match",
    [
        ([], None, "tools"),
        ([{"type": "function"}], None, "tools"),
        ([{"type": "function", "function": {"name": "bad name!"}}], None, "name"),
        ([WEATHER], "sometimes", "tool_choice"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "nope"),
        (None, "required", "tool_choice"),
    ],
)
def test_bad_tools_raise(eng: Engine, tools, choice, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_tools(tools, choice)
    with pytest.raises(ValueError, match=match):
        eng.generate(ASK, max_new_tokens=4, tools=tools, tool_choice=choice)


# ---- through the openai client ----------------------------------------------------------------
openai = pytest.importorskip("openai")


class _Server:
    def __init__(self, engine) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "trt_spec.cli", "serve", str(engine), "--port", str(self.port)]
        cmd += ["--served-model-name", "m", "--log-level", "warning"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("server did not start")

    def client(self):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x", timeout=120)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def _ask(client, stream: bool, **kw):
    """(content, [(name, arguments)], finish_reason) of one chat request."""
    if not stream:
        r = client.chat.completions.create(model="m", messages=ASK, **kw)
        m = r.choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in m.tool_calls or []]
        return m.content, calls, r.choices[0].finish_reason
    content, calls, finish = "", {}, None
    for c in client.chat.completions.create(model="m", messages=ASK, stream=True, **kw):
        d = c.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            calls[t.index] = (t.function.name, t.function.arguments)
        finish = c.choices[0].finish_reason or finish
    return content or None, [calls[i] for i in sorted(calls)], finish


def test_openai_client_tiny(eng: Engine) -> None:
    """required / named / auto, streamed and not, 8 requests at once: the engine's calls; a
    second turn with the tool's answer is accepted."""
    server = _Server(eng.path)
    try:
        client = server.client()
        named = {"type": "function", "function": {"name": "get_weather"}}
        cases = [(c, s) for c in ("required", named) for s in (False, True)] * 2
        want = {}
        for choice, _ in cases[:4]:
            r = eng.generate(ASK, max_new_tokens=120, tools=[WEATHER, TIME], tool_choice=choice,
                             parallel_tool_calls=False)  # fmt: skip
            want[json.dumps(choice)] = [(c.name, c.arguments) for c in r.tool_calls]

        def run(case):
            choice, stream = case
            return _ask(client, stream, tools=[WEATHER, TIME], tool_choice=choice,
                        max_tokens=120, temperature=0, parallel_tool_calls=False)  # fmt: skip

        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(run, cases))
        for (choice, stream), (content, calls, finish) in zip(cases, got, strict=True):
            assert finish == "tool_calls" and content is None, (choice, stream)
            assert calls == want[json.dumps(choice)], (choice, stream)
        history = ASK + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
        ]  # fmt: skip
        r = client.chat.completions.create(
            model="m", messages=history, tools=[WEATHER], max_tokens=8, temperature=0
        )
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
        bad = httpx.post(
            f"http://127.0.0.1:{server.port}/v1/chat/completions",
            json={"model": "m", "messages": ASK, "tools": [{"type": "x"}]},
            timeout=30,
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"
    finally:
        server.stop()


@pytest.mark.models
@pytest.mark.slow
def test_openai_client_default_pair(default_pair_engine) -> None:
    """The default pair (Qwen2.5-Coder 1.5B, whose template renders tools and whose tokenizer
    has <tool_call> as a special token): auto, required and a named choice call get_weather for
    Paris, streamed and not."""
    server = _Server(default_pair_engine)
    try:
        client = server.client()
        named = {"type": "function", "function": {"name": "get_weather"}}
        for choice in ("auto", "required", named):
            for stream in (False, True):
                content, calls, finish = _ask(
                    client, stream, tools=[WEATHER], tool_choice=choice, max_tokens=96,
                    temperature=0,
                )  # fmt: skip
                assert finish == "tool_calls", (choice, stream, content)
                assert len(calls) == 1 and calls[0][0] == "get_weather"
                assert json.loads(calls[0][1])["city"] == "Paris"
    finally:
        server.stop()
