"""One :class:`trt_spec.Engine` used from 8 threads at once (see the Engine docstring).

Every thread gets exactly what it gets alone (greedy tokens; sampled tokens for its seed;
streamed text equal to the result), whether the requests join one batch (``max_batch`` 4) or
queue for the single slot (``max_batch`` 1); a thread with a bad request raises alone; a
monitor reading the request counts meanwhile never sees more than ``max_batch`` running.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from trt_spec import Engine

N_THREADS = 8
NEW = 24


@dataclass(frozen=True)
class Job:
    prompt: list[int]
    draft: str
    temperature: float
    seed: int
    stream: bool

    def run(self, engine: Engine) -> tuple[list[int], str]:
        kw = dict(
            max_new_tokens=NEW,
            ignore_eos=True,
            draft=self.draft,
            temperature=self.temperature,
            seed=self.seed,
        )
        if self.stream:
            s = engine.generate(self.prompt, stream=True, **kw)
            text = "".join(s)
            assert s.result is not None and s.result.text == text
            return s.result.token_ids, text
        r = engine.generate(self.prompt, **kw)
        return r.token_ids, r.text


JOBS = [
    Job(
        prompt=[i + 1, 2 * i + 3, 7, i + 1, 2 * i + 3],
        draft=("none", "lookup", "auto")[i % 3],
        temperature=0.8 if i in (2, 5) else 0.0,
        seed=100 + i,
        stream=i % 2 == 1,
    )
    for i in range(N_THREADS)
]


@pytest.mark.parametrize("max_batch", [1, 4])
def test_eight_threads_get_what_they_get_alone(tiny, max_batch: int) -> None:
    path, _ = tiny.engine("qwen2", weights="f32", max_seq_len=128, max_batch=max_batch)
    alone = [job.run(Engine(path, n_threads=2)) for job in JOBS]
    engine = Engine(path, n_threads=2)
    got: list[tuple[list[int], str] | None] = [None] * N_THREADS
    errors: list[BaseException] = []
    bad: list[BaseException] = []
    start = threading.Barrier(N_THREADS + 1)  # the workers and the bad request start together
    done = threading.Event()
    seen: list[tuple[int, int]] = []

    def work(i: int) -> None:
        start.wait()
        try:
            got[i] = JOBS[i].run(engine)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def misuse() -> None:  # a bad request among the good ones
        start.wait()
        try:
            engine.generate([1, engine.vocab_size + 5], max_new_tokens=4)
        except ValueError as e:
            bad.append(e)

    def monitor() -> None:
        while not done.is_set():
            seen.append((engine.running_requests, engine.waiting_requests))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(N_THREADS)]
    extra = threading.Thread(target=misuse)
    watcher = threading.Thread(target=monitor)
    for t in [*workers, extra]:
        t.start()
    watcher.start()
    for t in [*workers, extra]:
        t.join(timeout=120)
    done.set()
    watcher.join(timeout=30)
    assert not errors, errors
    assert all(not t.is_alive() for t in [*workers, extra, watcher])
    assert got == alone
    assert len(bad) == 1 and "outside the vocabulary" in str(bad[0])
    assert seen and max(r for r, _ in seen) <= max_batch
    assert all(w <= N_THREADS for _, w in seen)
    assert engine.running_requests == 0 and engine.waiting_requests == 0
    assert (
        engine.generate(JOBS[0].prompt, max_new_tokens=NEW, ignore_eos=True).token_ids
        == (alone[0][0])
    )


def test_a_stream_gets_its_tokens_while_another_thread_steps(tiny) -> None:
    """A stream consumed on one thread receives each token as the step that made it is filed,
    while another thread's generate keeps stepping the scheduler (a waiter on the scheduler lock
    would starve: the stepping thread takes it again and again)."""
    path, _ = tiny.engine("qwen2", weights="f32", max_seq_len=512, max_batch=2)
    engine = Engine(path)
    got: list[int] = []  # tokens streamed so far, as seen by the stream's thread
    seen_while_busy: list[int] = []
    started = threading.Event()

    def consume() -> None:
        s = engine.generate(
            [5, 6, 7], max_new_tokens=400, ignore_eos=True, stream=True, draft="none"
        )
        for _ in s:
            got.append(1)
            started.set()

    t = threading.Thread(target=consume)
    t.start()
    assert started.wait(timeout=60)
    # The main thread now steps the scheduler for both requests until its own is done.
    n0 = len(got)
    r = engine.generate([9, 8, 7], max_new_tokens=300, ignore_eos=True, draft="none")
    seen_while_busy.append(len(got) - n0)
    t.join(timeout=120)
    assert not t.is_alive() and len(r.token_ids) == 300
    # Both decoded in one batch: the stream took its tokens during those 300 steps.
    assert seen_while_busy[0] >= 100, seen_while_busy
