"""`trt-spec serve --replicas N` on Ray Serve, on one machine (loopback only), on a tiny engine.

One application of 2 CPU replicas (1 thread each), started once for the module, serves the
concurrency, affinity and fault tests; the drain test starts its own (it ends it). Without Ray
installed only the checks of the options and the routing helpers run. Every wait is bounded.
"""

from __future__ import annotations

import json
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
psutil = pytest.importorskip("psutil")
pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from trt_spec import Engine, cli  # noqa: E402
from trt_spec.ray import affinity, metrics  # noqa: E402
from trt_spec.ray.asgi import Call  # noqa: E402
from trt_spec.ray.deployment import ReplicaConfig, deployment_options  # noqa: E402
from trt_spec.ray.launch import RayOptions, plan  # noqa: E402

try:
    import ray.serve  # noqa: F401

    HAVE_RAY = True
except ImportError:
    HAVE_RAY = False
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="needs ray[serve] (the ray extra)")

MODEL = "tiny"
SEQ = 512
LONG = 300  # tokens of the fault test's answers: long enough to be mid-stream at the kill


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayServer:
    """A `trt-spec serve ENGINE --replicas N` subprocess (its own Ray instance)."""

    def __init__(self, engine: Path, *args: str, replicas: int = 2) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "trt_spec.cli", "serve", str(engine), "--port"]
        cmd += [str(self.port), "--served-model-name", MODEL, "--log-level", "warning"]
        cmd += ["--replicas", str(replicas), "--threads", "1", *args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.5)
                raise RuntimeError("server exited:\n" + "".join(self.log[-40:]))
            if any("trt-spec: serving" in line for line in self.log):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not start in 180 s:\n" + "".join(self.log[-40:]))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.log.append(line)

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60)

    def post(self, path: str, body, **kw) -> httpx.Response:
        return httpx.post(self.url + path, content=json.dumps(body), timeout=60, **kw)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=30).text

    def engine_processes(self) -> list[psutil.Process]:
        """The live engine replicas' processes (Ray names them ServeReplica:APP:Engine)."""
        out = []
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if "ServeReplica:trt-spec:Engine" in " ".join(p.cmdline()) and p.is_running():
                    if p.status() != psutil.STATUS_ZOMBIE:
                        out.append(p)
            except psutil.Error:
                pass
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def engine_file(tiny) -> Path:
    # wide enough that a 300-token answer takes a while (the fault test kills mid-stream)
    path, _ = tiny.engine(
        "qwen2", "f32", max_seq_len=SEQ, max_batch=4, hidden=512, layers=4, ffn=1536, heads=8
    )
    return path


@pytest.fixture(scope="module")
def offline(engine_file: Path) -> Engine:
    return Engine(engine_file, n_threads=1)


@pytest.fixture(scope="module")
def server(engine_file: Path) -> Iterator[RayServer]:
    if not HAVE_RAY:
        pytest.skip("needs ray[serve] (the ray extra)")
    s = RayServer(engine_file)
    yield s
    s.stop()


def _stream(client: openai.OpenAI, prompt: str, max_tokens: int, **kw) -> tuple[str, str]:
    """A streamed greedy completion's text and the replica that served it."""
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True, **kw
    )
    text = "".join(c.choices[0].text for c in raw.parse() if c.choices)
    return text, raw.headers["x-trt-spec-replica"]


# ---- the application ---------------------------------------------------------------------------
@needs_ray
def test_16_concurrent_streams_equal_their_offline_outputs(
    server: RayServer, offline: Engine
) -> None:
    prompts = [f"item {i}: {'ab' * (i % 5)} {i * 31}" for i in range(16)]
    wants = offline.generate(prompts, max_new_tokens=16, temperature=0.0)
    client = server.client()
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda p: _stream(client, p, 16), prompts))
    assert [text for text, _ in got] == [w.text for w in wants]
    assert len({replica for _, replica in got}) == 2  # both replicas served (least loaded)
    # the same routes as trt-spec serve: models, an OpenAI error, the merged metrics
    assert [m.id for m in client.models.list().data] == [MODEL]
    bad = server.post("/v1/completions", {"model": MODEL, "prompt": "a", "top_p": 3})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_p"
    text = server.metrics()
    assert len(set(re.findall(r'vllm:num_requests_running\{replica="(\w+)"\}', text))) == 2
    assert re.search(r"^trt_spec:router_replicas 2\.0$", text, re.M)


@needs_ray
def test_second_turn_lands_on_the_first_turns_replica(server: RayServer, offline: Engine) -> None:
    """Four conversations, their first turns at once (spread over both replicas), then their
    second turns one by one: each lands where its first turn ran and reuses its prompt cache.
    Two are chats (prefix affinity: the history), two are completions with a `user` (session
    affinity: prompts too short to have a prefix key)."""
    client = server.client()
    chats = [
        [{"role": "user", "content": f"Tell me about the number {n} and all of its factors."}]
        for n in (4096, 1000)
    ]
    users = ["alice", "bob"]

    def chat_turn(messages):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, max_tokens=8, temperature=0
        )
        return raw.parse(), raw.headers["x-trt-spec-replica"]

    def user_turn(prompt, user):
        raw = client.completions.with_raw_response.create(
            model=MODEL, prompt=prompt, max_tokens=8, temperature=0, user=user
        )
        return raw.parse(), raw.headers["x-trt-spec-replica"]

    with ThreadPoolExecutor(4) as pool:
        firsts = list(pool.map(chat_turn, chats)) + list(
            pool.map(user_turn, ["count 1 2", "count 5 6"], users)
        )
    assert len({replica for _, replica in firsts}) == 2, "first turns not spread"
    for i, messages in enumerate(chats):
        messages += [
            {"role": "assistant", "content": firsts[i][0].choices[0].message.content},
            {"role": "user", "content": "And its square?"},
        ]
        second, replica = chat_turn(messages)
        assert replica == firsts[i][1]
        assert (
            second.usage.prompt_tokens_details.cached_tokens >= firsts[i][0].usage.prompt_tokens - 8
        )
        assert (
            second.choices[0].message.content
            == offline.generate(messages, max_new_tokens=8, temperature=0.0).text
        )
    for j, (prompt, user) in enumerate(zip(["count 1 2", "count 5 6"], users, strict=True)):
        first = firsts[2 + j][0]
        second, replica = user_turn(prompt + first.choices[0].text + " 7", user)
        assert replica == firsts[2 + j][1]
        assert second.usage.prompt_tokens_details.cached_tokens > 0
    routed = dict(re.findall(r'^trt_spec:router_requests_total\{route="(\w+)"\} (\S+)$',
                             server.metrics(), re.M))  # fmt: skip
    assert float(routed["prefix"]) >= 2 and float(routed["session"]) >= 2


@needs_ray
def test_replica_killed_mid_load(server: RayServer, offline: Engine) -> None:
    """16 streams in flight, one replica killed: its streams end with a clean error, the others
    complete with their offline text, new requests succeed on the other replica, and Ray starts
    a new replica."""
    prompts = [f"count {i} {i * 7} {i * 13}" for i in range(16)]
    client = server.client()
    before = {p.pid for p in server.engine_processes()}
    assert len(before) == 2
    started = threading.Semaphore(0)
    results: list = [None] * 16

    def run(i: int) -> None:
        t0 = time.monotonic()
        text = ""
        try:
            stream = client.completions.create(
                model=MODEL, prompt=prompts[i], max_tokens=LONG, temperature=0, stream=True,
                extra_body={"ignore_eos": True},
            )  # fmt: skip
            for n, chunk in enumerate(stream):
                text += chunk.choices[0].text if chunk.choices else ""
                if n == 0:
                    started.release()
            results[i] = ("ok", text, time.monotonic() - t0)
        except openai.APIError as e:
            started.release()
            results[i] = ("error", e, time.monotonic() - t0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for _ in range(4):  # a few streams are generating
        assert started.acquire(timeout=30)
    victim = server.engine_processes()[0]
    victim.kill()
    # new requests keep succeeding (on the other replica) while the killed one is down
    for i in range(4):
        text, _ = _stream(client, f"after {i}", 8)
        assert text == offline.generate(f"after {i}", max_new_tokens=8, temperature=0.0).text
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a request hung"
    errors = [r for r in results if r[0] == "error"]
    done = [i for i, r in enumerate(results) if r[0] == "ok"]
    assert errors and done, results
    for _, e, _ in errors:
        assert "replica" in str(e), e
    wants = offline.generate([prompts[i] for i in done], max_new_tokens=LONG, temperature=0.0,
                             ignore_eos=True)  # fmt: skip
    assert [results[i][1] for i in done] == [w.text for w in wants]
    # Ray starts a new replica in place of the killed one
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        now = {p.pid for p in server.engine_processes()}
        if (
            len(now) == 2
            and now != before
            and re.search(r"^trt_spec:router_replicas 2\.0$", server.metrics(), re.M)
        ):
            break
        time.sleep(1)
    assert len(now) == 2 and victim.pid not in now
    with ThreadPoolExecutor(8) as pool:
        served = list(pool.map(lambda i: _stream(client, f"again {i}", 8)[1], range(8)))
    assert len(set(served)) == 2


@needs_ray
def test_disconnect_mid_stream_cancels_on_the_replica(server: RayServer, offline: Engine) -> None:
    """A client that hangs up mid-stream: the ingress cancels the call, the replica's app sees
    the disconnect and cancels the generation (its slot freed), as trt-spec serve does."""

    def totals() -> tuple[float, float]:
        text = server.metrics()

        def total(name: str) -> float:
            return sum(map(float, re.findall(rf'^{name}\{{replica="\w+"\}} (\S+)$', text, re.M)))

        return total("trt_spec:request_cancelled_total"), total("vllm:num_requests_running")

    before, _ = totals()
    body = {"model": MODEL, "prompt": "count 3 21 39", "max_tokens": LONG, "temperature": 0,
            "stream": True, "ignore_eos": True}  # fmt: skip
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(3)]  # a few chunks, then hang up
    assert any(g.startswith("data: ") for g in got)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and totals() != (before + 1, 0):
        time.sleep(0.1)
    assert totals() == (before + 1, 0)


def test_python_m_trt_spec_ray_is_serve_with_replicas(engine_file, capsys) -> None:
    from trt_spec.ray.__main__ import main

    # --threads 0 is refused by the replica options' check (a single server's Engine says
    # "n_threads must be >= 1"): the command took the Ray path with one replica.
    assert main([str(engine_file), "--threads", "0"]) == 1
    assert "--threads must be >= 1" in capsys.readouterr().err


@needs_ray
@pytest.mark.slow
def test_sigterm_drains_every_replica(engine_file: Path, offline: Engine) -> None:
    """SIGTERM with a long request running on each replica: both finish, new requests get 503,
    and the command exits 0."""
    s = RayServer(engine_file)
    try:
        prompts = ["count 1 7 13", "count 2 14 26"]
        client = s.client()
        out: dict[int, tuple[str, str]] = {}

        def run(i: int) -> None:
            out[i] = _stream(client, prompts[i], LONG, extra_body={"ignore_eos": True})

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # both replicas are generating
            running = re.findall(r"^vllm:num_requests_running\{replica=\"\w+\"\} (\S+)$",
                                 s.metrics(), re.M)  # fmt: skip
            if len(running) == 2 and all(float(v) >= 1 for v in running):
                break
            time.sleep(0.05)
        s.proc.send_signal(signal.SIGTERM)
        late = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # new requests get 503 once the drain begins
            late = s.post("/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 2})
            if late.status_code != 200:
                break
            time.sleep(0.1)
        assert late is not None and late.status_code == 503, late
        assert "shutting down" in late.json()["error"]["message"]
        assert all(t.is_alive() for t in threads)  # (while the long ones still run)
        for t in threads:
            t.join(timeout=60)
        wants = offline.generate(prompts, max_new_tokens=LONG, temperature=0.0, ignore_eos=True)
        assert [out[i][0] for i in range(2)] == [w.text for w in wants]
        assert out[0][1] != out[1][1]  # (one on each replica)
        assert s.proc.wait(timeout=60) == 0
    finally:
        s.stop()


# ---- options and routing, without a cluster ----------------------------------------------------
def _opts(engine: str, **kw) -> RayOptions:
    return RayOptions(ReplicaConfig(engine=engine, model_name=MODEL), **kw)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--replicas", "0"], "--replicas must be >= 1, got 0"),
        (["--min-replicas", "3", "--max-replicas", "2"], "--min-replicas (3) must be at most"),
        (["--replicas", "5", "--max-replicas", "4"], "--replicas (5) must be between"),
        (["--replicas", "2", "--device", "cuda:1"], "--device cuda:N names one GPU"),
        (["--replicas", "2", "--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_bad_replica_options_are_one_line_errors(engine_file, capsys, args, message) -> None:
    assert cli.main(["serve", str(engine_file), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trt-spec: error: ") and message in err and "Traceback" not in err


@needs_ray
def test_a_port_in_use_is_an_error_before_ray_starts(engine_file, capsys) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["serve", str(engine_file), "--replicas", "1", "--port", str(port)]
        assert cli.main(args) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_missing_ray_and_bad_engine_files_are_clear(engine_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # (import ray fails)
    assert cli.main(["serve", str(engine_file), "--replicas", "2"]) == 1
    assert "pip install 'trt-spec[ray]'" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "ray")
    junk = tmp_path / "junk.engine"
    junk.write_bytes(b"not an engine")
    for path, message in ((junk, "is not a trt-spec engine file"), (tmp_path / "no", "not found")):
        with pytest.raises(ValueError, match=message):
            plan(_opts(str(path), replicas=2))


def test_replica_counts_and_autoscaling(engine_file) -> None:
    p = plan(_opts(str(engine_file), replicas=2), cpu_count=2)
    assert (p.replicas, p.min_replicas, p.max_replicas, p.n_threads, p.max_batch) == (2, 2, 2, 1, 4)
    p = plan(_opts(str(engine_file), min_replicas=1, max_replicas=4), cpu_count=8)
    assert (p.replicas, p.min_replicas, p.max_replicas, p.n_threads) == (1, 1, 4, 8)
    assert plan(_opts(str(engine_file), replicas=2), gpus_available=2).gpus == 1
    fixed = deployment_options(max_batch=4, max_queue=8, replicas=2, min_replicas=2,
                               max_replicas=2, n_threads=1, gpus=0, drain_timeout=30)  # fmt: skip
    assert fixed["num_replicas"] == 2 and "autoscaling_config" not in fixed
    assert fixed["max_ongoing_requests"] == 12 and fixed["ray_actor_options"]["num_cpus"] == 1
    scaled = deployment_options(max_batch=4, max_queue=8, replicas=2, min_replicas=1,
                                max_replicas=3, n_threads=1, gpus=1, drain_timeout=30)  # fmt: skip
    auto = scaled["autoscaling_config"]
    assert (auto["min_replicas"], auto["initial_replicas"], auto["max_replicas"]) == (1, 2, 3)
    assert auto["target_ongoing_requests"] == 4 and "num_replicas" not in scaled
    assert scaled["ray_actor_options"]["num_gpus"] == 1


def test_affinity_keys_and_table() -> None:
    turn1 = {"messages": [{"role": "user", "content": "x" * 200}]}
    turn2 = {"messages": turn1["messages"] + [{"role": "assistant", "content": "y" * 50},
                                              {"role": "user", "content": "z"}]}  # fmt: skip
    k1 = affinity.prefix_keys(affinity.prompt_text(turn1))
    k2 = affinity.prefix_keys(affinity.prompt_text(turn2))
    assert len(k1) >= 3 and k2[: len(k1)] == k1 and len(k2) > len(k1)
    assert affinity.prefix_keys("a" * 63) == [] and affinity.prompt_text("junk") == ""
    assert affinity.session_key({"x-session-id": "s"}, {"user": "u"}) == "h:s"
    assert affinity.session_key({}, {"user": "u"}) == "u:u"
    table = affinity.AffinityTable(max_keys=100)
    table.remember(Call("POST", "/", prefix=k1), "A")
    assert table.lookup(Call("POST", "/", prefix=k2), {"A", "B"}) == ("A", "prefix")
    table.remember(Call("POST", "/", prefix=k2[: len(k1) + 1]), "B")  # a longer match on B
    assert table.lookup(Call("POST", "/", prefix=k2), {"A", "B"}) == ("B", "prefix")
    assert table.lookup(Call("POST", "/", prefix=k2), {"A"}) == (None, "least_loaded")
    table.remember(Call("POST", "/", session="u:u"), "A")
    assert table.lookup(Call("POST", "/", session="u:u", prefix=k2), {"A", "B"}) == (
        "A", "session")  # fmt: skip
    table.forget("B")  # (B had taken over the shorter keys too: the last to serve them)
    assert table.lookup(Call("POST", "/", prefix=k2), {"A", "B"}) == (None, "least_loaded")
    for i in range(200):
        table.remember(Call("POST", "/", session=str(i)), "A")
    assert len(table) == 100
    assert affinity.preference("A", {"A": 2, "B": 1}) == ["A", "B"]  # within the slack
    assert affinity.preference("A", {"A": 3, "B": 1}) == ["B", "A"]  # too busy
    assert affinity.preference(None, {"A": 3, "B": 1, "C": 0}) == ["C", "B", "A"]


def test_metrics_are_merged_with_a_replica_label() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    texts = {}
    for name, n in (("r1", 1), ("r2", 2)):
        reg = CollectorRegistry()
        Gauge("vllm:num_requests_running", "running", registry=reg).set(n)
        Counter("trt_spec:request_success", "ok", ["finished_reason"], registry=reg).labels(
            "stop"
        ).inc(n)
        texts[name] = generate_latest(reg).decode()
    fams = metrics.merge(texts) + metrics.router_families(2, {"prefix": 3}, 5, 1)
    parsed = {f.name: f for f in text_string_to_metric_families(metrics.render(fams).decode())}
    running = {s.labels["replica"]: s.value for s in parsed["vllm:num_requests_running"].samples}
    assert running == {"r1": 1.0, "r2": 2.0}
    ok = [s for s in parsed["trt_spec:request_success"].samples if s.name.endswith("_total")]
    assert {(s.labels["replica"], s.labels["finished_reason"], s.value) for s in ok} == {
        ("r1", "stop", 1.0), ("r2", "stop", 2.0)}  # fmt: skip
    assert parsed["trt_spec:router_replicas"].samples[0].value == 2
    assert parsed["trt_spec:router_requests"].samples[0].labels == {"route": "prefix"}
