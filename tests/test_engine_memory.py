"""Memory stays flat over 1,000 requests on one :class:`trt_spec.Engine`, and an engine's file
pages leave the resident set once the backend holds its own copy of them.

A tiny engine serves 1,000 short requests of every kind (single prompts, batches, chat with
sampling, stop strings, streams closed after their first piece: the cancel path). The process's
resident set size is read after request 100 (allocators, caches and the KV slots are warm by
then) and after every further 100; the bound: it never grows by more than 2 MiB past the first
reading, i.e. less than about 2 KiB per request, where the engine keeps nothing per request once
it has answered. The engine's own books (requests running, queued, inboxes) must be empty too.
The requests take about 10 s on 2 cores.

The CPU backend repacks every Q8 / Q4 matrix into its own memory at load; the engine file's
pages of those matrices are then dropped (``EngineFile::drop_pages``), so that the process does
not hold the quantized weights twice (for the default pair, 1.5 GB of 3.4 GB). Read from
``/proc/self/smaps`` (Linux).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import psutil
import pytest
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


@pytest.mark.slow
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


def mapped_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of the file at `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_file_pages_of_repacked_weights_leave_the_resident_set(tiny) -> None:
    """After load (which reads every byte to check the checksums), a q4 engine's file mapping
    keeps resident only what the CPU backend reads in place (norms, biases, the embedding
    table); an f32 engine's, whose matrices are read in place, stays whole. Generation after the
    drop is unchanged (the same tokens as a second engine's)."""
    shape = dict(hidden=512, ffn=2048, heads=8, kv_heads=2, layers=2)
    q4, _ = tiny.engine("qwen2", weights="q4", **shape)
    f32, _ = tiny.engine("qwen2", weights="f32", **shape)
    kept = {}
    for path in (q4, f32):
        engine = Engine(path, n_threads=2)
        kept[path] = mapped_rss(path) / path.stat().st_size
        if path == q4:
            again = Engine(path, n_threads=2)  # (its load drops the same pages again)
            kw = dict(max_new_tokens=8, ignore_eos=True)
            first, second = (e.generate([1, 2, 3], **kw).token_ids for e in (engine, again))
            assert first == second
        del engine
        gc.collect()
    assert kept[f32] > 0.9, kept  # the measurement sees the whole file where nothing is dropped
    assert kept[q4] < 0.2, kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_embedding_table_pages_leave_the_resident_set(tiny) -> None:
    """The embedding table, which the CPU reads in place a row per token, is dropped after load
    too: an engine that is mostly embedding table (16,384 x 256, q4) keeps under 10% of its file
    resident; generating brings back only the rows it reads."""
    path, _ = tiny.engine("qwen2", weights="q4", vocab_size=16384, hidden=256, ffn=512, layers=1)
    engine = Engine(path, n_threads=2)
    share = mapped_rss(path) / path.stat().st_size
    assert share < 0.1, share
    engine.generate([1, 2, 3], max_new_tokens=4, ignore_eos=True)
    assert mapped_rss(path) / path.stat().st_size < 0.2
