"""The scripts under ``benchmarks/``: that they start, and their reports, goal lines and profile
readings from synthetic inputs (no GPU, server, peer or real model); bench_gpu's n-row forwards
run on the CPU backend with a tiny pair. ``trt-spec bench`` itself is tests/test_bench.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from types import ModuleType

import pytest
from trt_spec import Engine

SCRIPTS = Path(__file__).resolve().parents[1] / "benchmarks"


def script(name: str) -> ModuleType:
    """benchmarks/<name>.py, imported as a module (the scripts are not a package; they import
    their sibling modules as they do when run, from their own folder)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_scripts_import_the_shared_helpers() -> None:
    """The benchmark scripts take the environment helpers from trt_spec.bench.common and still
    start (--help needs no GPU, model, server or peer)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    scripts = sorted(p.name for p in SCRIPTS.glob("bench_*.py"))  # every one, none forgotten
    assert len(scripts) >= 9
    for name in scripts + ["profile_gpu.py"]:
        path = SCRIPTS / name
        assert "from trt_spec.bench" in path.read_text()
        out = subprocess.run(  # (profile_gpu imports its helpers late: --help works anywhere)
            [sys.executable, str(path), "--help"], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0 and out.stdout.startswith("usage:"), out.stderr


def prefill_report(reps: int, runs: list[dict], **extra: object) -> dict:
    """A bench_prefill report around `runs` (synthetic host and settings)."""
    return {
        "tag": "t",
        "environment": {"cpu": "X", "git_commit": "abc", "loadavg_start": 0.5},
        "settings": {"threads": 2, "engine": "e", "max_seq_len": 8192, "reps": reps},
        "runs": runs,
        **extra,
    }


def test_prefill_report_ratios() -> None:
    """bench_prefill's table: our rates against llama-bench's (the pair: both prompt passes),
    the rate at the longest prompt against the shortest, and the per-row costs."""
    mod = script("bench_prefill")
    run = {"target_ttft_s": 10.0, "draft_read_s": 2.0, "pair_ttft_s": 10.0}
    short = {"n": 512, **run, "target_tok_s": 51.2, "pair_tok_s": 512 / 12.0}
    short |= {"llama_target_tok_s": 25.6, "llama_pair_tok_s": 20.0}
    long = {"n": 4096, **run, "target_tok_s": 40.96, "pair_tok_s": 30.0}
    rep = prefill_report(3, [short, long], peak_rss_mb=3000.0, row_costs_s={"1": 0.05, "5": 0.1})
    md = mod.render(rep)
    assert "| 512 | 10.00 | 51.2 | 25.6 | 2.00x | 42.7 (10.00) | 20.0 | 2.13x |" in md
    assert "| 4096 | 10.00 | 41.0 | - | - |" in md
    assert "at 4096 / at 512: 0.80 (goal >= 0.85)" in md
    assert "one logit row (x one row): 1: 50 ms (1.00), 5: 100 ms (2.00)" in md and "3000 MB" in md
    rep["row_costs_s"] = {"forward": {"1": 0.05, "5": 0.1}, "verify": {"1": 0.05, "5": 0.125}}
    md = mod.render(rep)
    assert "one logit row (x one row): 1: 50 ms (1.00), 5: 100 ms (2.00)" in md
    assert "logits for every row (x one row): 1: 50 ms (1.00), 5: 125 ms (2.50)" in md
    assert "`llama-bench -p N -n 0 -r 3`" in md and "median of 3 round(s)" in md
    rounds = [{"a": 3.0, "b": 1.0}, {"a": 1.0, "b": 5.0}, {"a": 2.0, "b": 4.0}]
    assert mod.median_of(rounds) == {"a": 2.0, "b": 4.0}


def test_prefill_bracketed_rate_rounds() -> None:
    """bench_prefill --rate-rounds: the short prompt F = ceil(long / short / 2) times on each side
    of the long one, the rate over the short runs' median, and its report line."""
    mod = script("bench_prefill")

    class Stats:
        def __init__(self, ttft_s: float) -> None:
            self.ttft_s = ttft_s

    class Eng:  # the n-th generate call's TTFT: 1 s for the short prompt at first, then slower
        def __init__(self) -> None:
            self.calls: list[int] = []

        def generate(self, ids: list[int], **kw: object) -> types.SimpleNamespace:
            assert kw["draft"] == "none" and kw["max_new_tokens"] == 1
            self.calls.append(len(ids))
            slow = 1.0 + 0.1 * len(self.calls)  # a host that drifts
            return types.SimpleNamespace(stats=Stats(len(ids) / 100.0 * slow))

    eng = Eng()
    r = mod.bracketed_rate(eng, [0] * 100, [0] * 700)
    assert eng.calls == [100] * 4 + [700] + [100] * 4
    assert len(r["short_tok_s"]) == 8 and r["long_tok_s"] == pytest.approx(100 / 1.5)
    # the long run sits in the middle of the drift: a rate near 1, where one short run before it
    # would read 1.1 / 1.5 = 0.73
    assert r["rate"] == pytest.approx(1.0, abs=0.01)
    run = {"target_ttft_s": 1.0, "pair_tok_s": 50.0, "pair_ttft_s": 1.0}
    runs = [{"n": 100, **run, "target_tok_s": 100.0}, {"n": 700, **run, "target_tok_s": 87.5}]
    rounds = [
        {"short_tok_s": [100.0, 90.0], "long_tok_s": 80.0, "rate": 80.0 / 95.0},
        {"short_tok_s": [100.0, 100.0], "long_tok_s": 90.0, "rate": 0.9},
        {"short_tok_s": [80.0, 100.0], "long_tok_s": 63.0, "rate": 0.7},
    ]
    rep = prefill_report(1, runs, peak_rss_mb=1.0, rate_rounds=rounds)
    md = mod.render(rep)
    assert "at 700 / at 100: 0.88 (goal >= 0.85)" in md
    assert "the 100-token prompt 1 times before and after each 700-token one" in md
    assert "median 0.84 (goal >= 0.85); rounds 0.84 (80.0 / 95.0), 0.90 (90.0 / 100.0)" in md


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_memory_benchmark_measures_and_reports(tiny) -> None:
    """bench_memory: an engine's sizes as trt-spec info gives them and the resident set after
    load, and the report's row."""
    mod = script("bench_memory")
    path, _ = tiny.engine("qwen2", weights="q4", hidden=256, ffn=1024)
    row = mod.measure(str(path), "f16", 0, 2)
    eng = Engine(path, kv_cache_dtype="f16")
    assert row["kv"] == "f16" and row["kv_mb"] == pytest.approx(eng.kv_bytes / 1e6)
    weights = sum(m["weight_bytes"] for m in eng.metadata["models"].values())
    assert row["weights_mb"] == pytest.approx(weights / 1e6)
    assert row["file_mb"] == pytest.approx(path.stat().st_size / 1e6)
    assert "after_prefill" not in row
    assert row["loaded"]["VmRSS"] >= row["loaded"]["RssAnon"] > 0
    row = {**row, "engine": "/x/e.engine", "max_seq_len": 4096, "max_batch": 4, "file_mb": 1777.4,
           "weights_mb": 1770.5, "kv_mb": 671.1,
           "loaded": {"VmRSS": 1908.2, "RssAnon": 1657.0, "RssFile": 250.3, "VmHWM": 1977.0},
           "prefill": 4096, "after_prefill": {"VmRSS": 2300.0, "VmHWM": 2400.4}}  # fmt: skip
    md = mod.render({"tag": "t", "environment": {"cpu": "X", "git_commit": "abc"}, "threads": 2,
                     "rows": [row]})  # fmt: skip
    assert (
        "| e.engine | 4096 x 4 | f16 | 1777 | 1770 | 671 | 1908 (1657 + 250) | N=4096: 2300 "
        "(2400) |" in md
    )


def test_write_report_writes_both_files(tmp_path: Path, capsys) -> None:
    """trt_spec.bench.common.write_report: <stem>.json holds the report, <stem>.md the rendering
    (also printed); the folder is created."""
    from trt_spec.bench.common import write_report

    stem = tmp_path / "results" / "x_t"
    write_report(stem, {"a": [1, 2]}, "# X\n")
    assert json.loads(stem.with_suffix(".json").read_text()) == {"a": [1, 2]}
    assert stem.with_suffix(".md").read_text() == "# X\n" and "# X" in capsys.readouterr().out


def test_server_benchmark_goals_from_a_report(tmp_path: Path) -> None:
    """bench_server's goal lines and files from a synthetic report (no server)."""
    bench_server = script("bench_server")

    def run(c: int, tps: float, texts: list[str]) -> dict:
        ms = {f"{k}_p{q}_ms": 1.0 for k in ("ttft", "itl") for q in (50, 95, 99)}
        return {"concurrency": c, "tokens_per_s": tps, "tpot_p50_ms": 1.0, "errors": [],
                "texts": texts, **ms}  # fmt: skip

    report = {
        "tag": "t",
        "environment": {"cpu": "x", "git_commit": "abc", "loadavg_start": 0.0},
        "settings": {"threads": 2, "n_prompts": 1, "prompts": "p", "max_tokens": 4},
        "notes": [],
        "runs": {
            "trt-spec spec": [run(1, 2.0, ["a"]), run(4, 4.0, ["a"])],
            "trt-spec target": [run(1, 1.0, ["a"]), run(4, 3.0, ["b"])],
            "llama-server spec": [run(1, 4.0, ["z"])],
            "llama-server target": [run(1, 2.0, ["z"])],
        },
    }
    md = bench_server.render(report, tmp_path / "server_t")
    assert "C=1 tok/s 2.00 vs llama-server 4.00 (0.50x)" in md
    assert "C=4 / C=1 total tok/s: 2.00x" in md
    assert "target-only C=1: trt-spec 0.50x" in md
    assert "equal to trt-spec target's at 1 of 2 concurrencies" in md
    assert (tmp_path / "server_t.json").exists() and (tmp_path / "server_t.md").exists()
    assert "by round" not in md


def test_server_benchmark_rounds_take_medians() -> None:
    """bench_server --rounds: each figure the median of its rounds, texts checked per round."""
    bench_server = script("bench_server")

    def run(c: int, tps: float, ttft: float, texts: list[str]) -> dict:
        return {"concurrency": c, "tokens_per_s": tps, "ttft_p50_ms": ttft, "errors": [],
                "texts": texts}  # fmt: skip

    rounds = [
        [run(1, 10.0, 100.0, ["a"]), run(4, 20.0, 300.0, ["a"])],
        [run(1, 14.0, 90.0, ["a"]), run(4, 30.0, 200.0, ["a"])],
        [run(1, 11.0, 500.0, ["a"]), run(4, 25.0, 250.0, ["b"])],
    ]
    rounds[1][0]["errors"] = ["boom"]
    c1, c4 = bench_server.combine(rounds)
    assert c1["concurrency"] == 1 and c1["tokens_per_s"] == 11.0 and c1["ttft_p50_ms"] == 100.0
    assert c1["rounds_tokens_per_s"] == [10.0, 14.0, 11.0] and c1["errors"] == ["boom"]
    assert c1["texts_stable"] and not c4["texts_stable"] and c4["tokens_per_s"] == 25.0
    report = {"runs": {"trt-spec spec": [c1, c4]}}
    assert any("DIFFER BETWEEN ROUNDS at C=[4]" in g for g in bench_server.goals(report))


def test_load_benchmark_reads_aiperf_and_prometheus(tmp_path: Path) -> None:
    """bench_load's readers on fixtures of AIPerf 0.13's export files and of both servers'
    /metrics text: the table row, the speculative counters (vllm:* ours, llamacpp:*
    llama-server's) and the check that the tool's counters equal the script's own scrapes."""
    bl = script("bench_load")
    profile = {
        "request_count": {"unit": "requests", "avg": 8.0},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 12.345},
        "total_output_tokens": {"avg": 512.0},
        "benchmark_duration": {"avg": 41.5},
        "time_to_first_token": {"unit": "ms", "avg": 900.0, "p50": 812.4, "p95": 1500.6},
        "inter_token_latency": {"unit": "ms", "p50": 95.2, "p95": 130.0},
        "inter_chunk_latency": {"unit": "ms", "p50": 180.0, "p95": 400.0},
        "error_summary": [{"error_details": {"code": 400}, "count": 2}],
    }
    p = bl.parse_profile(profile)
    assert p["requests"] == 8 and p["errors"] == 2 and p["output_tok_s"] == 12.345
    assert p["ttft_p95_ms"] == 1500.6 and p["itl_p50_ms"] == 95.2 and p["icl_p50_ms"] == 180.0
    series = [{"endpoint_url": "u", "stats": {"total": 120.0, "rate": 3.0}}]
    sm = {"metrics": {
        "vllm:spec_decode_num_drafts": {"type": "counter", "series": [{"stats": {"total": 40.0}}]},
        "vllm:spec_decode_num_draft_tokens": {"type": "counter", "series": series},
        "vllm:spec_decode_num_accepted_tokens": {"type": "counter",
                                                 "series": [{"stats": {"total": 90.0}}]},
        "trt_spec:spec_decode_num_draft_tokens": {"series": [  # by source: not counted again
            {"labels": {"source": "model"}, "stats": {"total": 100.0}}]},
    }}  # fmt: skip
    spec = bl.aiperf_spec(sm)
    assert spec == {"drafts": 40.0, "draft_tokens": 120.0, "accepted_tokens": 90.0}
    text = """# HELP vllm:spec_decode_num_drafts_total Iterations.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total 10.0
vllm:spec_decode_num_draft_tokens_total 30.0
vllm:spec_decode_num_accepted_tokens_total 20.0
trt_spec:spec_decode_num_draft_tokens_total{source="model"} 30.0
"""
    before = bl.parse_prometheus(text)
    assert before['trt_spec:spec_decode_num_draft_tokens_total{source="model"}'] == 30.0
    after = bl.parse_prometheus(text.replace(" 10.0", " 50.0").replace(" 30.0", " 150.0")
                                .replace(" 20.0", " 110.0"))  # fmt: skip
    scraped = bl.scrape_spec(before, after)
    assert scraped == spec
    cell = {"profile": p, "spec_aiperf": spec, "spec_scrape": scraped, "loadavg_start": 2.04}
    assert bl.row("trt-spec auto", 4, cell) == (
        "| trt-spec auto | 4 | 8 | 12.35 | 812 | 1501 | 95 | 130 | 180 | 40 | 120 | 90 | "
        "0.75 | 3.25 | 2 | 2.0 |"
    )
    llama = "llamacpp:spec_decode_num_draft_tokens_total 7\nllamacpp:n_decode_total 3\n"
    none = {"profile": p, "spec_aiperf": {}}
    none["spec_scrape"] = bl.scrape_spec({}, bl.parse_prometheus(llama))
    assert none["spec_scrape"] == {"draft_tokens": 7.0}
    nodraft = {"profile": p, "spec_aiperf": {}, "spec_scrape": {"draft_tokens": 0.0}}
    report = {"runs": {"trt-spec auto": {"4": cell}, "llama-server target": {"1": none},
                       "llama-server draft": {"2": nodraft}}}  # fmt: skip
    got = bl.checks(report)
    assert "llama-server draft C=2: NO SPECULATION (no draft tokens)" in got
    assert any("llama-server target C=1: AIPerf's counters" in c for c in got)
    assert any("drafted 7 tokens with no draft" in c for c in got)
    assert bl.checks({"runs": {"trt-spec auto": {"4": cell}}}) == [
        "1 cells: AIPerf's speculative counters equal the /metrics scrape deltas"
    ]
    data = tmp_path / "p.jsonl"
    bl.write_dataset(data, ["def f():", "x = 1"], 64, {"draft": "none"})
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    extra = {"temperature": 0, "ignore_eos": True, "draft": "none"}
    assert rows[1] == {"text": "x = 1", "output_length": 64, "extra": extra}


def test_profile_gpu_reads_an_nsys_trace(tmp_path: Path) -> None:
    """profile_gpu's reading of an nsys SQLite export (a synthetic one, in the tables and columns
    nsys writes): the kernels of each cudaGraphLaunch, the iteration taken as the most frequent
    kernel count, the idle time between its kernels and the time by kernel name."""
    import sqlite3

    pg = script("profile_gpu")
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME "
        "(start INT, end INT, correlationId INT, nameId INT)"
    )
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, correlationId INT, "
        "shortName INT, demangledName INT, graphNodeId INT)"
    )
    names = {
        1: "cudaGraphLaunch_v10000",
        2: "cudaLaunchKernel_v7000",
        3: "matmul_kernel",
        4: "attention_kernel",
    }
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", names.items())
    launches = [(10, 1), (20, 1), (30, 1), (40, 2), (50, 1)]  # correlation id, API name
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 1, ?, ?)", launches)
    kernels = []
    for i, cid in enumerate((10, 20, 30)):  # three replays: m 10 us, gap 2, a 5 us, gap 1, m 10
        t = 1000_000 * (i + 1)
        kernels += [(t, t + 10_000, cid, 3), (t + 12_000, t + 17_000, cid, 4),
                    (t + 18_000, t + 28_000, cid, 3)]  # fmt: skip
    kernels += [(5_000_000, 5_001_000, 40, 3)]  # an ordinary launch: not an iteration
    kernels += [(6_000_000, 6_004_000, 50, 3)]  # another graph (one kernel): not the iteration
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, 1)",
        [(s, e, c, n, n) for s, e, c, n in kernels],
    )
    con.commit()
    con.close()
    groups = pg.graph_iterations(db)
    assert [len(g) for g in groups] == [3, 3, 3, 1]
    r = pg.iteration_profile(groups)
    assert r["launches"] == 3 and r["kernels_per_iteration"] == 3
    assert r["iteration_span_us"] == 28.0 and r["kernel_busy_us"] == 25.0
    assert r["idle_us"] == 3.0 and r["gap_us_median"] == 1.5 and r["gap_us_max"] == 2.0
    top = {k["kernel"]: k for k in r["time_by_kernel"]}
    assert top["matmul_kernel"]["us_per_iteration"] == 20.0
    assert abs(top["attention_kernel"]["share"] - 0.2) < 1e-12
    with pytest.raises(ValueError):
        pg.iteration_profile([])


def test_profile_gpu_reads_ncu_csv() -> None:
    """ncu --csv's details page: one row per kernel and metric, units converted (us, bytes, %);
    the tool's own lines ignored; an unknown unit refused."""
    pg = script("profile_gpu")
    head = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"'
    k = '"matmul_kernel","Command line profiler metrics"'
    rows = [
        f'"0",{k},"dram__bytes_read.sum","Mbyte","2.36"',
        f'"0",{k},"dram__throughput.avg.pct_of_peak_sustained_elapsed","%","61.5"',
        f'"0",{k},"gpu__time_duration.sum","usecond","3.2"',
        f'"1",{k},"gpu__time_duration.sum","nsecond","4,100"',
        f'"1",{k},"dram__bytes_read.sum","Kbyte","512"',
    ]
    text = "==PROF== Connected to process 1\n" + "\n".join([head] + rows) + "\n==PROF== done\n"
    got = pg.ncu_metrics(text)
    assert got == [
        {"dram_read_bytes": 2.36e6, "dram_pct": 61.5, "time_us": 3.2},
        {"time_us": 4.1, "dram_read_bytes": 512e3},
    ]
    # ncu 2025.x (the H200's, 2026-11-26) prints "ns" and "byte": the first run stopped there.
    h200 = f'"0",{k},"gpu__time_duration.sum","ns","18,080"\n'
    h200 += f'"0",{k},"dram__bytes_read.sum","byte","17,261,824"'
    assert pg.ncu_metrics(head + "\n" + h200) == [
        {"time_us": pytest.approx(18.08), "dram_read_bytes": 17261824.0}
    ]
    with pytest.raises(ValueError, match="unknown unit"):
        pg.ncu_metrics(head + '\n"0","k","s","gpu__time_duration.sum","cycle","3"')


def test_profile_gpu_step_table_from_ncu_csv() -> None:
    """profile_gpu's `step` part: ncu --csv rows (name, grid, metrics) grouped by kernel and grid,
    per forward of the window's forwards, sorted by time; its markdown names each case."""
    pg = script("profile_gpu")
    head = '"ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"'
    mm, at = "void matmul_kernel<4, 1>(MatmulArgs, MatmulGeom, float *, int *)", "void attn<128>(x)"
    rows = []
    for i, (name, grid, ns) in enumerate(
        [(mm, "(560, 1, 1)", "9,000"), (at, "(1, 16, 1)", "5,000"), (mm, "(96, 3, 1)", "3,000")] * 2
    ):
        rows += [
            f'"{i}","{name}","(256, 1, 1)","{grid}","gpu__time_duration.sum","ns","{ns}"',
            f'"{i}","{name}","(256, 1, 1)","{grid}","launch__registers_per_thread",'
            '"register/thread","80"',
        ]
    kernels = pg.ncu_kernels("==PROF== x\n" + "\n".join([head] + rows))
    assert len(kernels) == 6 and kernels[0]["name"] == "matmul_kernel<4,1>"
    t = pg.step_table(kernels, forwards=2)
    assert t["kernels_per_forward"] == 3 and t["kernel_sum_us"] == pytest.approx(17.0)
    top = t["by_kernel"][0]
    assert (top["kernel"], top["grid"], top["per_forward"]) == (
        "matmul_kernel<4,1>",
        "(560, 1, 1)",
        1,
    )
    assert top["mean_us"] == pytest.approx(9.0) and top["share"] == pytest.approx(9 / 17)
    assert top["regs"] == 80
    assert [g["grid"] for g in t["by_kernel"]] == ["(560, 1, 1)", "(1, 16, 1)", "(96, 3, 1)"]
    case = {"role": "target", "rows": 1, "graph_ms": 2.4, "eager_ms": 2.6, "forwards": 2} | t
    md = "\n".join(pg.step_markdown({"cases": [case, {"role": "draft", "rows": 1, "error": "x"}]}))
    assert "### target, 1 row" in md and "0.017 ms" in md and "| attn<128> | (1, 16, 1) | 1 |" in md
    assert "### draft, 1 row" in md and "Not measured: x" in md
    assert pg.step_cases("target:1,draft:5") == [("target", 1), ("draft", 5)]
    for bad in ("target", "verify:1", "target:0", "draft:x"):
        with pytest.raises(ValueError, match="step case"):
            pg.step_cases(bad)


def test_bench_gpu_forward_rows_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_gpu's n-row forwards and prefill chunk (run here on the CPU backend, a tiny pair):
    every row count of ROW_COUNTS timed, per row against one row, prefill chunks where they fit
    max_seq_len, and the report's table."""
    import spec_pairs
    from native import T

    bg = script("bench_gpu")
    monkeypatch.setattr(bg, "testing_module", lambda repo: T)
    monkeypatch.setattr(bg, "PREFILL_ROWS", 8)
    monkeypatch.setattr(bg, "PREFILL_CONTEXTS", (0, 16, 10**6))  # the last one does not fit
    pair = spec_pairs.make_pair(tmp_path, "noisy", draft_len=4, max_batch=4, weights="f32")
    r = bg.forward_rows(
        Path(pair),
        "tiny",
        types.SimpleNamespace(device="cpu", context=16, iters=2, persistent=False),
    )
    assert [x["rows"] for x in r["verify_rows"]] == list(bg.ROW_COUNTS)
    assert all(x["ms"] > 0 for x in r["verify_rows"]) and r["verify_rows"][0]["vs_one_row"] == 1.0
    assert [x["context"] for x in r["prefill"]] == [0, 16]
    assert all(x["tok_s"] == pytest.approx(8 / (x["ms"] / 1e3)) for x in r["prefill"])
    rep = {"date": "d", "commit": "c", "device": {}, "settings": {"trt": {"context": 16}}}
    md = bg.markdown(rep | {"forward_rows": {"pair-q4": r}})
    assert "## Target forward of n rows and a prefill chunk, pair-q4" in md
    assert "| 16 |" in md and "| chunk at context | ms | prompt tok/s |" in md
    assert "the chunk: 8 prompt rows op by op" in md


def test_gpu_report_projection_from_histograms(tmp_path: Path) -> None:
    """gpu_report's projection: histograms found anywhere in the CPU bench's JSON (cut to K + 1
    entries), a K with its own histogram projected from it, other K from the geometric model
    fitted to all of them, and the report's projection table."""
    gr = script("gpu_report")
    bench = {
        "runs": [
            {"label": "model K=2", "draft_len": 2, "accepted_hist": [1, 1, 2, 0, 0]},
            {"nested": {"k": 1, "accepted_hist": [3, 1]}},
            {"draft_len": "auto", "accepted_hist": [5, 5]},  # no K: left out
            {"draft_len": 3, "accepted_hist": [0, 0, 0, 0]},  # empty: left out
        ]
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(bench))
    hists = gr.load_histograms(path)
    assert sorted(hists) == [(1, [3, 1]), (2, [1, 1, 2])]
    # accepted: 1 + 1 * 1 + 2 * 2 = 6 draft tokens; rejections: iterations short of K: 3 + 2 = 5
    assert gr.fit_alpha(hists) == pytest.approx(6 / 11)
    assert gr.expected_tokens(0.5, 2) == pytest.approx(1.75) and gr.expected_tokens(1.0, 3) == 4
    args = types.SimpleNamespace(hist=str(path), alpha=0.9)
    iters = [{"k": 2, "iteration_ms": 10.0}, {"k": 4, "iteration_ms": 20.0}]
    p = gr.projection(iters, 5.0, args)
    assert p["alpha"] == pytest.approx(6 / 11) and p["target_only_tok_s"] == pytest.approx(200.0)
    k2, k4 = p["rows"]
    assert k2["from"] == "histogram at this K" and k2["tokens_per_iteration"] == pytest.approx(
        (1 * 1 + 2 * 1 + 3 * 2) / 4
    )
    assert k2["projected_tok_s"] == pytest.approx(k2["tokens_per_iteration"] / 0.010)
    assert k4["from"] == "geometric model"
    assert k4["tokens_per_iteration"] == pytest.approx(gr.expected_tokens(6 / 11, 4))
    assumed = gr.projection(iters, 5.0, types.SimpleNamespace(hist=None, alpha=0.9))
    assert "ASSUMED" in assumed["source"] and assumed["alpha"] == 0.9
    rep = {"date": "d", "commit": "c", "device": {}, "settings": {}}
    md = gr.markdown(rep | {"iterations": {"pair-q4": []}, "projections": {"pair-q4": p}})
    assert "a PROJECTION, not a measurement" in md and "Target-only: 200 tok/s." in md
    assert f"| 2 | 2.25 | histogram at this K | {2.25 / 0.010:.0f} | 1.12x |" in md


def test_server_processes_and_peer_commands(tmp_path: Path) -> None:
    """trt_spec.bench.servers, which the serving benchmarks share: a subprocess is ready once
    /health answers 200, one that exits first raises naming its log, and llama-server's
    speculative command turns drafting on (without --spec-type it loads the draft and never
    drafts, so its "spec" figures were target-only)."""
    from trt_spec.bench import servers

    port = servers.free_port()
    health = (
        "import http.server as h\n"
        "class H(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200 if self.path == '/health' else 404); self.end_headers()\n"
        f"h.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    with servers.ServerProcess(
        "ok", [sys.executable, "-c", health], port, tmp_path / "ok.log"
    ) as s:
        assert servers.get(s.url + "/health")[0] == 200
        assert servers.get(s.url + "/other")[0] == 404
        assert s.cpu_seconds() >= 0.0
    assert s.proc.poll() is not None  # stopped on leaving the block
    bad = [sys.executable, "-c", "import sys; print('no model'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"exited with 3; see .*bad\.log"):
        servers.ServerProcess("bad", bad, servers.free_port(), tmp_path / "bad.log")
    assert "no model" in (tmp_path / "bad.log").read_text()

    binary = Path("/x/llama-server")
    spec = servers.llama_server_command(
        binary, "t.gguf", 1, threads=2, slots=4, ctx_per_slot=512, draft="d.gguf", draft_max=6
    )
    target = servers.llama_server_command(binary, "t.gguf", 1, threads=2, slots=4, ctx_per_slot=512)
    assert spec[spec.index("--spec-type") + 1] == "draft-simple"
    assert spec[spec.index("--model-draft") + 1] == "d.gguf"
    assert spec[spec.index("--spec-draft-n-max") + 1] == "6"
    assert target[target.index("-c") + 1] == "2048" and "--spec-type" not in target
    ours = servers.trt_serve_command("e.engine", 7, "--threads", "1")
    assert ours[ours.index("serve") + 1] == "e.engine" and ours[-2:] == ["--threads", "1"]


def test_server_benchmark_interleaves_runners_in_waves(monkeypatch) -> None:
    """bench_server's runners on one server take turns in waves of C prompts, their order
    alternating wave by wave, and each runner's tokens/s is over its own waves only."""
    bench_server = script("bench_server")
    calls: list[tuple[str, str]] = []

    def fake(url: str, body: dict) -> dict:
        calls.append((body["draft"], body["prompt"]))
        t = time.perf_counter()
        time.sleep(0.01 if body["draft"] == "auto" else 0.02)  # (ms of overhead stay small)
        done = time.perf_counter()
        return {"t0": t, "times": [done], "tokens": 8, "text": body["prompt"].upper()}

    monkeypatch.setattr(bench_server, "one_request", fake)
    prompts = [f"p{i}" for i in range(6)]
    runners = {d: [{"prompt": p, "draft": d} for p in prompts] for d in ("auto", "none")}
    out = bench_server.interleaved_sweep("http://x", runners, [1, 2])
    c1 = [d for d, _ in calls[:12]]
    assert c1 == ["auto", "none", "none", "auto"] * 3  # C=1: waves of one, order alternating
    waves = calls[12:]  # C=2: waves of two prompts, the same two prompts for both runners
    assert [sorted(p for _, p in waves[i : i + 2]) for i in (0, 2)] == [["p0", "p1"]] * 2
    assert [waves[0][0], waves[2][0], waves[4][0]] == ["auto", "none", "none"]
    for d in ("auto", "none"):
        for r in out[d]:
            assert r["requests"] == 6 and r["tokens"] == 48 and not r["errors"]
            assert r["texts"] == [p.upper() for p in prompts]
    # Each runner's own wall time: auto's requests took half as long as none's.
    assert out["auto"][0]["tokens_per_s"] > 1.3 * out["none"][0]["tokens_per_s"]


def test_draft_heads_report_compares_at_equal_verified_nodes() -> None:
    """bench_draft_heads' report: each shape's tokens per iteration per seed and their mean, and
    the head over the draft model at the same number of verified nodes (the tree's 6 nodes
    against the chain of 6)."""
    mod = script("bench_draft_heads")
    args = mod.argparse.Namespace(
        threads=2,
        seeds=[0, 1],
        n=4,
        head_steps=10,
        head_depth=3,
        head_kv_heads=2,
        model_steps=5,
        layer_scale=0.1,
    )

    def shape(tpi: float) -> dict[str, float]:
        return {"tokens_per_iteration": tpi, "acceptance": 0.5, "draft_ms_per_iteration": 1.0}

    def seed(m3: float, m6: float, h3: float, h6: float, tree: float) -> dict:
        return {
            "draft model, chain k=3": shape(m3),
            "draft model, chain k=6": shape(m6),
            "EAGLE-3 head, chain k=3": shape(h3),
            "EAGLE-3 head, chain k=6": shape(h6),
            "EAGLE-3 head, tree W=2, 6 nodes": shape(tree),
            "train_s": {"draft model": 1.0, "EAGLE-3 head": 3.0},
            "markov": {"share": 0.9},
        }

    md = mod.report(args, {0: seed(3.0, 4.0, 3.0, 3.0, 5.0), 1: seed(3.0, 4.0, 2.4, 3.0, 4.0)})
    assert "| EAGLE-3 head, chain k=3 | 3.00 | 2.40 | 2.70 | 0.500 | 1.00 |" in md
    assert "head chain k=3 / draft model chain k=3: 0.900x" in md
    assert "head chain k=6 / draft model chain k=6: 0.750x" in md
    assert "head tree W=2, 6 nodes / draft model chain k=6: 1.125x" in md
    assert "successor at 90.0%" in md and "head 3.0" in md
