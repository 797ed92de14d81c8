"""Memory stays flat over 1,000 requests on one :class:`trt_spec.Engine`.

A tiny engine serves 1,000 short requests of every kind (single prompts, batches, chat with
sampling, stop strings, streams closed after their first piece: the cancel path). The process's
resident set size is read after request 100 (allocators, caches and the KV slots are warm by
then) and after every further 100; the bound: it never grows by more than 2 MiB past the first
reading, i.e. less than about 2 KiB per request, where the engine keeps nothing per request once
it has answered. The engine's own books (requests running, queued, inboxes) must be empty too.
The requests take about 10 s on 2 cores.
"""

from __future__ import annotations

import gc

import psutil
from trt_spec import Engine

REQUESTS = 1000
FIRST = 100  # the reading that later ones are compared with
GROWTH_MIB = 2.0


def one_request(engine: Engine, i: int) -> None:
    ids = [1 + i % 50, 2 + i % 7, 3, 4]
    kind = i % 4
    if kind == 0:
        r = engine.generate(ids, max_new_tokens=6, ignore_eos=True)
        assert len(r.token_ids) == 6
    elif kind == 1:
        s = engine.generate("def f(x):", max_new_tokens=6, stream=True, draft="lookup")
        next(s, None)
        s.close()  # abandoned: cancelled in the scheduler
    elif kind == 2:
        rs = engine.generate([ids, ids[::-1]], max_new_tokens=4, stop=["zz"])
        assert len(rs) == 2
    else:
        msg = [{"role": "user", "content": f"hello {i}"}]
        engine.generate(msg, max_new_tokens=4, temperature=0.7, seed=i)


def test_rss_is_flat_over_1000_requests(tiny) -> None:
    path, _ = tiny.engine("qwen2", weights="f32", max_seq_len=128, max_batch=2)
    engine = Engine(path, n_threads=2)
    proc = psutil.Process()
    readings: list[float] = []
    for i in range(REQUESTS):
        one_request(engine, i)
        if (i + 1) % 100 == 0 and i + 1 >= FIRST:
            gc.collect()
            readings.append(proc.memory_info().rss / 2**20)
    growth = [r - readings[0] for r in readings]
    assert max(growth) < GROWTH_MIB, f"RSS after each 100 requests (MiB): {readings}"
    assert engine.running_requests == 0 and engine.waiting_requests == 0
    assert not engine._inbox  # every answered or abandoned request was forgotten
