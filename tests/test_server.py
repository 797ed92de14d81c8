"""`trt-spec serve` end to end: a real server in a subprocess on 127.0.0.1, driven by the
official `openai` client (and httpx for raw requests), on tiny engines.

Checks greedy outputs against `Engine.generate` on the same engine file (exactness under
batching with 32 concurrent streams), the OpenAI error bodies of bad input, disconnects, the
queue limit, the API key, RSS over 500 requests and the SIGTERM drain. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
psutil = pytest.importorskip("psutil")

from trt_spec import Engine  # noqa: E402

MODEL = "tiny"
SEQ = 256
LONG_SEQ = 512  # the small server's: its 480-token requests hold its one slot for a while
LONG = 480


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `trt-spec serve` subprocess."""

    def __init__(self, engine: Path, *args: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "trt_spec.cli", "serve", str(engine), "--port"]
        cmd += [str(self.port), "--served-model-name", MODEL, "--log-level", "warning", *args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become healthy in 60 s")

    def client(self, **kw) -> openai.OpenAI:
        kw.setdefault("api_key", "none")
        return openai.OpenAI(base_url=self.url + "/v1", max_retries=0, timeout=60, **kw)

    def post(self, path: str, body, **kw) -> httpx.Response:
        content = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return httpx.post(self.url + path, content=content, timeout=60, **kw)

    def metric(self, name: str) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def labelled(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of a labelled metric: {((label, value), ...): value}."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for labels, value in re.findall(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, re.M):
            key = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', labels)))
            out[key] = float(value)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def engine_file(tiny) -> Path:
    path, _ = tiny.engine("qwen2", "f32", max_seq_len=SEQ, max_batch=4)
    return path


@pytest.fixture(scope="module")
def offline(engine_file: Path) -> Engine:
    return Engine(engine_file)


@pytest.fixture(scope="module")
def server(engine_file: Path) -> Iterator[Server]:
    s = Server(engine_file, "--max-queue", "64")
    yield s
    s.stop()


_long_prompts: dict[tuple[str, int], str] = {}


def _long_prompt(offline: Engine, n: int) -> str:
    """A prompt whose greedy answer runs to n tokens (no end-of-generation token before); found
    once per engine file."""
    key = (str(offline.path), n)
    if key not in _long_prompts:
        _long_prompts[key] = _find_long_prompt(offline, n)
    return _long_prompts[key]


def _find_long_prompt(offline: Engine, n: int) -> str:
    for i in range(40):
        p = f"count {i} {i * 7} {i * 13}"
        r = offline.generate(p, max_new_tokens=n, temperature=0.0)
        if r.finish_reason == "max_new_tokens":
            return p
    raise AssertionError("no prompt of the tiny model runs to the token limit")


def test_models_health_and_metrics_routes(server: Server, offline: Engine) -> None:
    models = server.client().models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok"}
    assert "trt_spec:num_requests_running" in httpx.get(server.url + "/metrics", timeout=10).text
    card = httpx.get(server.url + "/v1/models", timeout=10).json()["data"][0]
    assert card["root"] == MODEL and card["max_model_len"] == offline.max_seq_len


@pytest.mark.parametrize("stream", [False, True])
def test_completion_equals_engine_generate(server: Server, offline: Engine, stream: bool) -> None:
    prompt = "def add(a, b):"
    want = offline.generate(prompt, max_new_tokens=20, temperature=0.0)
    client = server.client()
    if not stream:
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0)
        assert r.choices[0].text == want.text
        assert r.usage.completion_tokens == len(want.token_ids)
        assert r.usage.prompt_tokens == len(want.prompt_token_ids)
        assert r.choices[0].finish_reason == ("length" if len(want.token_ids) == 20 else "stop")
        assert r.model_extra["trt_spec"]["tokens_per_iteration"] >= 1.0
        assert r.model_extra["trt_spec"]["draft_model_skipped"] in (True, False)
        return
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=20,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == want.text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] in ("length", "stop") and all(f is None for f in finals[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(want.token_ids)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_equals_engine_generate(server: Server, offline: Engine, stream: bool) -> None:
    messages = [{"role": "user", "content": "Say something."}]
    want = offline.generate(messages, max_new_tokens=12, temperature=0.0)
    client = server.client()
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=12, temperature=0, stream=True
            )
        )
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        r = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=12, temperature=0
        )
        text = r.choices[0].message.content
        assert r.usage.completion_tokens == len(want.token_ids)
    assert text == want.text


def _chat_logprobs(client, messages, stream: bool, **kw) -> tuple[str, list]:
    """The answer's text and its logprobs.content entries, streamed or not."""
    if not stream:
        r = client.chat.completions.create(model=MODEL, messages=messages, **kw)
        return r.choices[0].message.content, r.choices[0].logprobs.content
    text, entries = "", []
    for c in client.chat.completions.create(model=MODEL, messages=messages, stream=True, **kw):
        if c.choices:
            text += c.choices[0].delta.content or ""
            if c.choices[0].logprobs is not None:
                entries += c.choices[0].logprobs.content
    return text, entries


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs(server: Server, offline: Engine, stream: bool) -> None:
    """logprobs / top_logprobs through the openai client: the engine's values for the answer's
    tokens (a final stop token has none), OpenAI's shapes, the same streamed and not, for 8
    concurrent requests, greedy and sampled."""
    client = server.client()
    cases = [
        ([{"role": "user", "content": f"Say {w}."}], kw)
        for w in ["one", "two", "three", "four"]
        for kw in [dict(temperature=0), dict(temperature=0.8, top_p=0.9, seed=3)]
    ]

    def run(case):
        messages, kw = case
        want = offline.generate(messages, max_new_tokens=12, logprobs=3, **kw)
        text, entries = _chat_logprobs(
            client, messages, stream, max_tokens=12, logprobs=True, top_logprobs=3, **kw
        )
        return want, text, entries

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, cases))
    for want, text, entries in results:
        assert text == want.text
        n = len(want.token_ids) - (want.finish_reason == "stop_token")
        assert len(entries) == n
        joined = b"".join(bytes(e.bytes) for e in entries)  # (the exact bytes of the tokens)
        assert joined.decode("utf-8", "replace") == want.text
        for e, w in zip(entries, want.logprobs, strict=False):
            assert e.token == offline.token_bytes(w.token_id).decode("utf-8", "replace")
            assert e.logprob == pytest.approx(w.logprob, abs=1e-6)
            assert [t.logprob for t in e.top_logprobs] == pytest.approx([v for _, v in w.top])
            assert [t.token for t in e.top_logprobs] == [
                offline.token_bytes(i).decode("utf-8", "replace") for i, _ in w.top
            ]
    bad = server.post(
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "a"}], "top_logprobs": 2},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_logprobs"


@pytest.mark.parametrize("stream", [False, True])
def test_penalties_and_logit_bias(server: Server, offline: Engine, stream: bool) -> None:
    """presence / frequency / repetition penalties and logit_bias through the openai client, 8
    concurrent requests: the engine's own output for the same parameters."""
    client = server.client()
    banned = offline.generate("count 1 2 3", max_new_tokens=1, temperature=0).token_ids[0]
    cases = [
        dict(presence_penalty=1.5),
        dict(frequency_penalty=1.0, presence_penalty=-0.5),
        dict(extra_body={"repetition_penalty": 1.5}),
        dict(logit_bias={str(banned): -100}),
        dict(frequency_penalty=0.7, logit_bias={"5": 5.0, str(banned): -100}),
        dict(presence_penalty=0.5, temperature=0.9, seed=4),
        dict(extra_body={"repetition_penalty": 0.9}, frequency_penalty=0.3),
        dict(logit_bias={"7": 100}),
    ]

    def run(kw):
        kw = dict(kw)
        extra = kw.pop("extra_body", {})
        gen = dict(kw, **extra)
        if "logit_bias" in gen:
            gen["logit_bias"] = {int(k): float(v) for k, v in gen["logit_bias"].items()}
        gen.setdefault("temperature", 0.0)
        want = offline.generate("count 1 2 3", max_new_tokens=12, **gen)
        args = dict(model=MODEL, prompt="count 1 2 3", max_tokens=12, extra_body=extra, **kw)
        args.setdefault("temperature", 0)
        if stream:
            chunks = client.completions.create(stream=True, **args)
            text = "".join(c.choices[0].text for c in chunks)
        else:
            text = client.completions.create(**args).choices[0].text
        return want, text

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, cases))
    for (want, text), kw in zip(results, cases, strict=True):
        assert text == want.text, kw
    assert results[3][0].token_ids[0] != banned
    assert set(results[7][0].token_ids) == {7}


@pytest.mark.parametrize("stream", [False, True])
def test_structured_output(server: Server, offline: Engine, stream: bool) -> None:
    """response_format (json_schema strict, json_object) and the regex / grammar extras through
    the openai client, 8 concurrent requests: the engine's constrained output, which matches."""
    client = server.client()
    schema = {
        "type": "object",
        "properties": {"color": {"enum": ["red", "blue"]}, "n": {"enum": [1, 2, 3]}},
        "required": ["color", "n"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": True}}
    lark = 'start: "<" /[a-c]/ ">"'
    cases = [
        ({"response_format": fmt}, {"response_format": fmt}),
        ({"extra_body": {"regex": "(yes|no)-[0-9]{2}"}}, {"regex": "(yes|no)-[0-9]{2}"}),
        ({"extra_body": {"grammar": lark}}, {"grammar": lark}),
        ({"response_format": fmt, "temperature": 0.9, "seed": 3},
         {"response_format": fmt, "temperature": 0.9, "seed": 3}),
    ] * 2  # fmt: skip
    messages = [{"role": "user", "content": "Give me a color."}]

    def run(case):
        kw, gen = case
        gen = dict(gen)
        gen.setdefault("temperature", 0.0)
        want = offline.generate(messages, max_new_tokens=40, **gen)
        args = dict(model=MODEL, messages=messages, max_tokens=40, **kw)
        args.setdefault("temperature", 0)
        if stream:
            chunks = client.chat.completions.create(stream=True, **args)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(**args).choices[0].message.content
        return want, text

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, cases))
    for (want, text), (kw, _) in zip(results, cases, strict=True):
        assert text == want.text, kw
        if "response_format" in kw and want.finish_reason == "stop_token":
            v = json.loads(text)
            assert v["color"] in ("red", "blue") and v["n"] in (1, 2, 3)
    assert re.fullmatch("(yes|no)-[0-9]{2}", results[1][1])


@pytest.mark.parametrize("stream", [False, True])
def test_n_choices(server: Server, offline: Engine, stream: bool) -> None:
    """n choices with seeds seed + i: each the engine's own sample for that seed, streamed (by
    index) and not; usage counts the prompt once and every choice's tokens."""
    client = server.client()
    prompt = " ".join(f"w{i}" for i in range(60))
    kw = dict(model=MODEL, prompt=prompt, max_tokens=10, temperature=1.0, seed=11, n=3)
    want = [offline.generate(prompt, max_new_tokens=10, temperature=1.0, seed=11 + i).text
            for i in range(3)]  # fmt: skip
    if stream:
        texts = ["", "", ""]
        finals = [None] * 3
        usage = None
        for c in client.completions.create(stream=True, stream_options={"include_usage": True},
                                           **kw):  # fmt: skip
            if c.usage is not None:
                usage = c.usage
            for ch in c.choices:
                texts[ch.index] += ch.text
                finals[ch.index] = ch.finish_reason or finals[ch.index]
        assert texts == want and all(finals)
    else:
        r = client.completions.create(**kw)
        assert [ch.text for ch in sorted(r.choices, key=lambda ch: ch.index)] == want
        usage = r.usage
    assert usage.completion_tokens == sum(
        len(offline.generate(prompt, max_new_tokens=10, temperature=1.0, seed=11 + i).token_ids)
        for i in range(3)
    )
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=2, temperature=0
    )
    texts = [ch.message.content for ch in chat.choices]
    assert len(texts) == 2 and texts[0] == texts[1]  # (greedy: the same answer)


def test_best_of(server: Server, offline: Engine) -> None:
    """best_of m: the n of m choices (seeds seed + i) whose answers are most likely."""
    client = server.client()
    r = client.completions.create(
        model=MODEL, prompt="count 1", max_tokens=8, temperature=1.0, seed=5, n=2, best_of=4
    )
    cands = [offline.generate("count 1", max_new_tokens=8, temperature=1.0, seed=5 + i, logprobs=0)
             for i in range(4)]  # fmt: skip

    def score(res):
        n = len(res.token_ids) - (res.finish_reason == "stop_token")
        return sum(lp.logprob for lp in res.logprobs[:n])

    best = sorted(cands, key=lambda c: -score(c))[:2]
    assert [ch.text for ch in r.choices] == [c.text for c in best]
    assert [ch.index for ch in r.choices] == [0, 1]


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs(server: Server, offline: Engine, stream: bool) -> None:
    prompt = "def add(a, b):"
    want = offline.generate(prompt, max_new_tokens=16, temperature=0, logprobs=2)
    client = server.client()
    kw = dict(model=MODEL, prompt=prompt, max_tokens=16, temperature=0, logprobs=2)
    if stream:
        tokens, values, tops, offsets, text = [], [], [], [], ""
        for c in client.completions.create(stream=True, **kw):
            text += c.choices[0].text
            if c.choices[0].logprobs is not None:
                lp = c.choices[0].logprobs
                tokens += lp.tokens
                values += lp.token_logprobs
                tops += lp.top_logprobs
                offsets += lp.text_offset
    else:
        r = client.completions.create(**kw)
        text, lp = r.choices[0].text, r.choices[0].logprobs
        tokens, values, tops, offsets = (
            lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset
        )  # fmt: skip
    assert text == want.text
    n = len(want.token_ids) - (want.finish_reason == "stop_token")
    assert len(tokens) == n
    assert values == pytest.approx([w.logprob for w in want.logprobs[:n]], abs=1e-6)
    assert offsets == [len("".join(tokens[:i])) for i in range(n)]
    for top, w in zip(tops, want.logprobs, strict=False):
        assert len(top) <= 2 and max(top.values()) == pytest.approx(w.top[0][1], abs=1e-6)


def test_prediction_is_accepted_and_reported(server: Server, offline: Engine) -> None:
    prompt = "x = 1\ny = 2\n"
    want = offline.generate(prompt, max_new_tokens=24, temperature=0.0)
    per_pos = "trt_spec:spec_decode_num_accepted_tokens_per_pos_total"
    accepted = "trt_spec:spec_decode_num_accepted_tokens_total"
    pos_before, acc_before = server.labelled(per_pos), server.labelled(accepted)
    r = server.post(
        "/v1/completions",
        {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": 24,
            "temperature": 0,
            "draft": "lookup",
            "draft_len": 4,  # (auto might find drafting not worth it on a tiny model)
            "prediction": {"type": "content", "content": want.text},
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["text"] == want.text  # drafting never changes greedy output
    details = body["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0
    assert body["trt_spec"]["accepted"] >= details["accepted_prediction_tokens"]
    # The metrics: this request's accepted tokens, by source, and by source and position (the
    # positions of one source add up to its total, and a later position is never kept more often).
    n_acc = body["trt_spec"]["accepted"]
    key = (("source", "lookup"),)
    assert server.labelled(accepted).get(key, 0.0) - acc_before.get(key, 0.0) == n_acc
    pos_after = server.labelled(per_pos)
    kept = []
    for i in range(4):
        k = (("position", str(i)), ("source", "lookup"))
        kept.append(pos_after.get(k, 0.0) - pos_before.get(k, 0.0))
    assert sum(kept) == n_acc and kept[0] > 0
    assert all(a >= b for a, b in zip(kept, kept[1:], strict=False))
    assert not any(dict(k).get("source") == "model" for k in pos_after)  # no draft model here


def test_second_turn_reports_cached_prompt_tokens(server: Server, offline: Engine) -> None:
    """usage.prompt_tokens_details.cached_tokens: the prompt tokens the prompt cache held."""
    client = server.client()
    history = [{"role": "user", "content": "Tell me about the number 4096 and its factors."}]
    first = client.chat.completions.create(
        model=MODEL, messages=history, max_tokens=8, temperature=0
    )
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And 8192?"},
    ]
    second = client.chat.completions.create(
        model=MODEL, messages=history, max_tokens=8, temperature=0
    )
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens
    assert cached >= first.usage.prompt_tokens - 8  # the first turn's prompt, as rendered again
    want = offline.generate(history, max_new_tokens=8, temperature=0.0)
    assert second.choices[0].message.content == want.text


def _families(server: Server) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict, name: str, sample: str | None = None, **labels: str) -> float:
    fam = families[name]
    return sum(
        s.value
        for s in fam.samples
        if (sample is None or s.name == sample)
        and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_model_server_protocol_metrics(server: Server, offline: Engine) -> None:
    """The gauges routers read (gateway-api-inference-extension's model-server protocol, vLLM's
    production stack) under vLLM's names, with vLLM's types, and vLLM's counters agreeing with
    the engine's own."""
    from trt_spec.server.metrics import PROTOCOL_GAUGES, VLLM_NAMES

    fams = _families(server)
    for name in PROTOCOL_GAUGES:
        assert fams[name].type == "gauge", name
    usage = _value(fams, "vllm:kv_cache_usage_perc")
    assert 0.0 <= usage <= 1.0 and usage == _value(fams, "vllm:gpu_cache_usage_perc")
    (info,) = fams["vllm:cache_config_info"].samples
    assert info.labels["block_size"] == str(offline.max_seq_len)
    assert info.labels["num_gpu_blocks"] == str(offline.max_batch)
    # A drafted request moves vLLM's counters as it moves the engine's own (summed over sources).
    prompt = "x = 10\ny = 20\n"
    want = offline.generate(prompt, max_new_tokens=16, temperature=0.0)
    before = _families(server)
    r = server.post(
        "/v1/completions",
        {
            "model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0,
            "draft": "lookup", "draft_len": 4,
            "prediction": {"type": "content", "content": want.text},
        },
    )  # fmt: skip
    assert r.status_code == 200, r.text
    after = _families(server)
    exposed = {s.name for f in after.values() for s in f.samples}
    for name in VLLM_NAMES:  # every name, as the exposition writes it
        assert name in exposed or name in after, name

    def delta(name: str, sample: str, **labels: str) -> float:
        return _value(after, name, sample, **labels) - _value(before, name, sample, **labels)

    for tail in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        ours = delta(f"trt_spec:spec_decode_{tail}", f"trt_spec:spec_decode_{tail}_total")
        theirs = delta(f"vllm:spec_decode_{tail}", f"vllm:spec_decode_{tail}_total")
        assert ours == theirs, tail
    assert (
        delta("vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_total")
        == r.json()["trt_spec"]["accepted"]
    )
    assert delta("vllm:generation_tokens", "vllm:generation_tokens_total") == len(want.token_ids)
    assert delta("vllm:prompt_tokens", "vllm:prompt_tokens_total") == len(want.prompt_token_ids)
    assert delta("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == 1


def test_32_concurrent_streams_equal_their_offline_outputs(server: Server, offline: Engine) -> None:
    prompts = [f"item {i}: {'ab' * (i % 5)} {i * 31}" for i in range(32)]
    wants = [offline.generate(p, max_new_tokens=16, temperature=0.0).text for p in prompts]
    client = server.client()

    def run(p: str) -> str:
        stream = client.completions.create(
            model=MODEL, prompt=p, max_tokens=16, temperature=0, stream=True
        )
        return "".join(c.choices[0].text for c in stream if c.choices)

    with ThreadPoolExecutor(32) as pool:
        got = list(pool.map(run, prompts))
    assert got == wants


BAD = [
    ("malformed json", "{not json", 400, None),
    ("not an object", "[1, 2]", 400, None),
    ("wrong type", {"model": MODEL, "prompt": "a", "max_tokens": "9"}, 400, "max_tokens"),
    ("temperature range", {"model": MODEL, "prompt": "a", "temperature": 3}, 400, "temperature"),
    ("top_p range", {"model": MODEL, "prompt": "a", "top_p": 1.5}, 400, "top_p"),
    ("max_tokens range", {"model": MODEL, "prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
    ("n range", {"model": MODEL, "prompt": "a", "n": 17}, 400, "n"),
    ("best_of < n", {"model": MODEL, "prompt": "a", "n": 3, "best_of": 2}, 400, "best_of"),
    (
        "best_of streamed",
        {"model": MODEL, "prompt": "a", "best_of": 2, "stream": True},
        400,
        "best_of",
    ),
    ("logprobs range", {"model": MODEL, "prompt": "a", "logprobs": 21}, 400, "logprobs"),
    ("logprobs type", {"model": MODEL, "prompt": "a", "logprobs": True}, 400, "logprobs"),
    (
        "presence range",
        {"model": MODEL, "prompt": "a", "presence_penalty": 3},
        400,
        "presence_penalty",
    ),
    (
        "repetition zero",
        {"model": MODEL, "prompt": "a", "repetition_penalty": 0},
        400,
        "repetition_penalty",
    ),
    ("bias key", {"model": MODEL, "prompt": "a", "logit_bias": {"x": 1}}, 400, "logit_bias"),
    ("bias value", {"model": MODEL, "prompt": "a", "logit_bias": {"3": 200}}, 400, "logit_bias"),
    ("bias id", {"model": MODEL, "prompt": "a", "logit_bias": {"99999999": 1}}, 400, "logit_bias"),
    (
        "format type",
        {"model": MODEL, "prompt": "a", "response_format": {"type": "xml"}},
        400,
        "response_format",
    ),
    (
        "bad schema",
        {
            "model": MODEL,
            "prompt": "a",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": 7}},
            },
        },
        400,
        "response_format",
    ),
    ("bad regex", {"model": MODEL, "prompt": "a", "regex": "(open"}, 400, "regex"),
    ("bad grammar", {"model": MODEL, "prompt": "a", "grammar": "start: nothing"}, 400, "grammar"),
    (
        "two specs",
        {"model": MODEL, "prompt": "a", "regex": "a", "grammar": 'start: "a"'},
        400,
        "grammar",
    ),
    ("unknown field", {"model": MODEL, "prompt": "a", "frobnicate": 1}, 400, "frobnicate"),
    ("bad stop", {"model": MODEL, "prompt": "a", "stop": [1]}, 400, "stop"),
    ("bad draft", {"model": MODEL, "prompt": "a", "draft": "magic"}, 400, "draft"),
    ("bad ignore_eos", {"model": MODEL, "prompt": "a", "ignore_eos": "yes"}, 400, "ignore_eos"),
    ("no prompt", {"model": MODEL}, 400, "prompt"),
    ("unknown model", {"model": "gpt-9", "prompt": "a"}, 404, "model"),
]


@pytest.mark.parametrize("name,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_an_openai_error(server: Server, name, body, status, param) -> None:
    r = server.post("/v1/completions", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"] and err["param"] == param
    # and the server keeps serving
    ok = server.post("/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 2})
    assert ok.status_code == 200


def test_prompt_longer_than_the_context_names_the_limit(server: Server) -> None:
    r = server.post("/v1/completions", {"model": MODEL, "prompt": [5] * (SEQ + 10)})
    assert r.status_code == 400
    assert str(SEQ) in r.json()["error"]["message"]
    chat = server.post(
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "x " * 2000}]},
    )
    assert chat.status_code == 400 and "max_seq_len" in chat.json()["error"]["message"]


@pytest.mark.slow
def test_rss_is_flat_over_500_requests(server: Server) -> None:
    proc = psutil.Process(server.proc.pid)
    body = {"model": MODEL, "prompt": "hello there", "max_tokens": 4, "temperature": 0}
    with httpx.Client(timeout=60) as c:
        for _ in range(50):  # warm-up: allocator pools, caches
            assert c.post(server.url + "/v1/completions", json=body).status_code == 200
        rss0 = proc.memory_info().rss
        for i in range(500):
            body["seed"] = i
            assert c.post(server.url + "/v1/completions", json=body).status_code == 200
        rss1 = proc.memory_info().rss
    assert rss1 < rss0 * 1.02, f"RSS grew from {rss0 / 2**20:.1f} to {rss1 / 2**20:.1f} MiB"


# ---- a server with one slot, no queue and an API key: 401, 429, a disconnect, SIGTERM drain ----
def _small_engine(tiny) -> Path:
    # a wider model than the module's, so that a 480-token answer takes about a second
    path, _ = tiny.engine(
        "qwen2", "f32", max_seq_len=LONG_SEQ, max_batch=1, hidden=512, layers=4, ffn=1536, heads=8
    )
    return path


SMALL_ARGS = ("--max-queue", "0", "--api-key", "sekrit", "--threads", "1")


@pytest.fixture(scope="module")
def small(tiny) -> Iterator[tuple[Server, Engine]]:
    path = _small_engine(tiny)
    s = Server(path, *SMALL_ARGS)
    yield s, Engine(path)
    s.stop()


@pytest.fixture
def small_own(tiny, small) -> Iterator[tuple[Server, Engine]]:
    """A small server of the test's own, for a test that ends it: the module's stays up for the
    others, whatever the order they run in."""
    s = Server(_small_engine(tiny), *SMALL_ARGS)
    yield s, small[1]
    s.stop()


def test_api_key_is_required(small) -> None:
    s, _ = small
    body = {"model": MODEL, "prompt": "a", "max_tokens": 2}
    assert s.post("/v1/completions", body).status_code == 401
    wrong = s.post("/v1/completions", body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        s.client(api_key="nope").models.list()
    assert s.client(api_key="sekrit").models.list().data[0].id == MODEL


@pytest.mark.slow
def test_beyond_the_queue_is_429_with_retry_after(small) -> None:
    s, offline = small
    auth = {"Authorization": "Bearer sekrit"}
    prompt = _long_prompt(offline, LONG)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": LONG, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST", s.url + "/v1/completions", content=json.dumps(body), headers=auth, timeout=60
    ) as r:
        lines = r.iter_lines()  # (kept: a dropped iterator would close the response)
        next(lines)  # admitted and decoding
        second = s.post("/v1/completions", {"model": MODEL, "prompt": "a"}, headers=auth)
        assert second.status_code == 429
        assert second.headers["retry-after"] == "1"
        assert second.json()["error"]["type"] == "rate_limit_error"
    deadline = time.monotonic() + 10
    ok = None
    while time.monotonic() < deadline:  # the slot frees once the first one is gone
        ok = s.post("/v1/completions", {"model": MODEL, "prompt": "a"}, headers=auth)
        if ok.status_code == 200:
            break
        time.sleep(0.1)
    assert ok is not None and ok.status_code == 200


@pytest.mark.slow
def test_disconnect_mid_stream_frees_the_slot(small) -> None:
    # On the small server: its 480-token answer takes long enough that the hang-up lands
    # mid-generation (the module's tiny model can finish 200 tokens before the client has read
    # three lines, and a finished request has nothing to cancel). One slot and no queue, so the
    # next request is admitted only once the slot is free.
    s, offline = small
    auth = {"Authorization": "Bearer sekrit"}
    prompt = _long_prompt(offline, LONG)
    before = s.metric("trt_spec:request_cancelled_total")
    body = {"model": MODEL, "prompt": prompt, "max_tokens": LONG, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST", s.url + "/v1/completions", content=json.dumps(body), headers=auth, timeout=60
    ) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(3)]  # a couple of chunks, then hang up
    assert any(g.startswith("data: ") for g in got)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (
            s.metric("trt_spec:request_cancelled_total") == before + 1
            and s.metric("trt_spec:num_requests_running") == 0
        ):
            break
        time.sleep(0.05)
    assert s.metric("trt_spec:request_cancelled_total") == before + 1
    assert s.metric("trt_spec:num_requests_running") == 0
    ok = s.post("/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 2}, headers=auth)
    assert ok.status_code == 200


@pytest.mark.slow
def test_sigterm_drains_running_requests_and_exits_0(small_own) -> None:
    s, offline = small_own
    prompt = _long_prompt(offline, LONG)
    want = offline.generate(prompt, max_new_tokens=LONG, temperature=0.0).text
    out: dict = {}

    def run() -> None:
        out["r"] = s.post(
            "/v1/completions",
            {"model": MODEL, "prompt": prompt, "max_tokens": LONG, "temperature": 0},
            headers={"Authorization": "Bearer sekrit"},
        )

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.metric("trt_spec:num_requests_running") < 1:
        time.sleep(0.01)
    os.kill(s.proc.pid, signal.SIGTERM)
    t.join(timeout=60)
    assert out["r"].status_code == 200 and out["r"].json()["choices"][0]["text"] == want
    assert s.proc.wait(timeout=30) == 0


def test_labelled_series_exist_before_their_first_increment() -> None:
    """A fresh server exposes every draft source's and finish reason's series at 0 (a router's
    first scrape, or a rate() over it, sees them before any request moved them)."""
    from trt_spec._core import DRAFT_SOURCES, FINISH_REASONS
    from trt_spec.server.metrics import ServerMetrics

    text = ServerMetrics(lambda: 0, lambda: 0).render().decode()
    sources = [s for s in DRAFT_SOURCES if s != "none"]
    assert sources
    for src in sources:
        for tail in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            assert f'trt_spec:spec_decode_{tail}_total{{source="{src}"}} 0.0' in text, (src, tail)
    for reason in FINISH_REASONS:
        for prefix in ("trt_spec:", "vllm:"):
            line = f'{prefix}request_success_total{{finished_reason="{reason}"}} 0.0'
            assert line in text, line
    for kind in ("pruned", "forced"):
        assert f'trt_spec:constraint_draft_tokens_total{{kind="{kind}"}} 0.0' in text


def test_constraint_draft_tokens_are_counted() -> None:
    """A finished request's draft tokens that its grammar pruned or forced add to
    trt_spec:constraint_draft_tokens_total{kind}."""
    from trt_spec.results import GenerationResult
    from trt_spec.server.metrics import ServerMetrics
    from trt_spec.stats import GenerationStats

    m = ServerMetrics(lambda: 0, lambda: 0)
    stats = GenerationStats(
        prompt_tokens=1, new_tokens=9, iterations=4, pruned=3, forced=5, ttft_s=0.1, total_s=1.0,
        tokens_per_s=9.0, decode_tokens_per_s=8.9, prefill_tokens_per_s=10.0, itl_p50_ms=100.0,
        itl_p95_ms=110.0, itl_p99_ms=120.0, stop_reason="stop_token",
    )  # fmt: skip
    for _ in range(2):
        m.observe(GenerationResult("x", [1] * 9, [1], "stop_token", stats))
    text = m.render().decode()
    assert 'trt_spec:constraint_draft_tokens_total{kind="pruned"} 6.0' in text
    assert 'trt_spec:constraint_draft_tokens_total{kind="forced"} 10.0' in text
