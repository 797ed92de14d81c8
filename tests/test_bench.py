"""``trt-spec bench``: reports, cost model, greedy exactness and argument errors on a tiny pair.

The pair is a tiny random target and a smaller random draft with the same tokenizer, built in
float32 with ``draft_len=4``; prompts come from a small text file, so nothing here touches the
network or the real models. Peers are not run (they need llama.cpp and the real GGUF pair).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from trt_spec import bench, build_engine, cli

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
FIELDS = (
    "decode_tok_s",
    "decode_tok_s_mean",
    "speedup",
    "acceptance_rate",
    "tokens_per_iteration",
    "accepted_hist",
    "draft_step_ms",
    "verify_ms",
    "predicted_tok_s",
    "measured_over_predicted",
    "ttft_s_mean",
)


@pytest.fixture(scope="module")
def pair(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target, _ = tiny.checkpoint("qwen2")
    draft, _ = tiny.checkpoint("qwen2", layers=1, seed=1)
    out = tmp_path_factory.mktemp("bench") / "pair.engine"
    build_engine(target, out, draft=draft, draft_len=4, weights="f32", max_seq_len=128)
    return out


@pytest.fixture()
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.txt"
    path.write_text("def fibonacci(n):\n\nimport numpy as np\nfor i in range(10):\n")
    return path


def test_bench_writes_json_md_png(pair: Path, prompts: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "results"
    argv = ["bench", str(pair), "--prompts", str(prompts), "--n", "2", "--max-new-tokens", "8"]
    argv += ["--draft-lens", "1-2", "--temperatures", "0,0.7", "--threads", "2"]
    rc = cli.main([*argv, "--out-dir", str(out), "--tag", "t"])
    assert rc == 0
    stdout = capsys.readouterr().out
    assert "| K=1 |" in stdout and "| auto |" in stdout and "greedy exactness" in stdout
    assert (out / "spec_t.md").read_text().startswith("# Speculative decoding benchmark")
    assert (out / "spec_t.png").is_file() == HAS_MPL
    rep = json.loads((out / "spec_t.json").read_text())
    env = rep["environment"]
    assert env["cpu"] and env["threads"] == 2 and env["trt_spec_version"]
    assert rep["settings"]["n_prompts"] == 2 and rep["settings"]["draft_lens"] == [1, 2]
    assert rep["engines"][0]["weights"] == "f32" and rep["engines"][0]["draft_len"] == 4
    assert [r["temperature"] for r in rep["results"]] == [0.0, 0.7]
    for res in rep["results"]:
        configs = {a["config"]: a for a in res["configs"]}
        assert list(configs) == ["target-only", "K=1", "K=2", "auto"]
        assert res["target_step_ms"] > 0
        for a in configs.values():
            assert all(f in a for f in FIELDS), a.keys()
            assert a["prompts"] == 2 and len(a["runs"]) == 2
            assert a["new_tokens"] == 16  # EOS ignored: every prompt gives 8 tokens
            assert a["decode_tok_s"] > 0 and a["predicted_tok_s"] > 0
        for k in (1, 2):
            a = configs[f"K={k}"]
            assert a["drafted"] > 0 and 0 <= a["acceptance_rate"] <= 1
            assert a["draft_step_ms"] > 0 and a["verify_ms"] > 0
            assert sum(a["accepted_hist"]) > 0 and len(a["accepted_hist"]) >= k + 1
        assert configs["target-only"]["drafted"] == 0
    greedy = rep["results"][0]
    assert greedy["checks"]["greedy_mismatches"] == 0
    assert all(a["greedy_mismatches"] == 0 for a in greedy["configs"][1:])
    assert rep["results"][1]["checks"]["greedy_mismatches"] is None
    assert not any("EXACTNESS" in n for n in rep["notes"])


def test_bench_default_draft_lens_and_no_auto(pair: Path, prompts: Path, tmp_path: Path) -> None:
    argv = ["bench", str(pair), "--prompts", str(prompts), "--n", "1", "--max-new-tokens", "4"]
    argv += ["--temperatures", "0", "--no-auto", "--out-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    (path,) = tmp_path.glob("spec_*.json")  # no tag: named by the date
    rep = json.loads(path.read_text())
    labels = [a["config"] for a in rep["results"][0]["configs"]]
    assert labels == ["target-only", "K=1", "K=2", "K=3", "K=4"]  # 1..engine's draft_len
    assert cli.main(argv) == 0  # a second run does not overwrite the first
    assert len(list(tmp_path.glob("spec_*.json"))) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--draft-lens", "0-99"], "draft lengths must be >= 1"),
        (["--draft-lens", "1-99"], "allows K up to 4"),
        (["--draft-lens", "x"], "is not K or A-B"),
        (["--prompts", "/no/such/prompts.txt"], "neither 'humaneval' nor a readable file"),
        (["--temperatures", "hot"], "is not a number"),
        (["--peers", "vllm"], "unknown peer 'vllm'"),
        (["--max-new-tokens", "1"], "--max-new-tokens must be >= 2"),
        (["--n", "0"], "--n must be >= 1"),
        (["--peers", "llama.cpp", "--peers-dir", "/nowhere"], "benchmarks/peers not found"),
    ],
)
def test_bench_bad_arguments(
    pair: Path, prompts: Path, tmp_path: Path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.chdir(tmp_path)  # no benchmarks/peers above the working directory
    monkeypatch.delenv("TRT_SPEC_PEERS_DIR", raising=False)
    argv = ["bench", str(pair), "--prompts", str(prompts), "--out-dir", str(tmp_path)]
    assert cli.main([*argv, *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trt-spec: error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("spec_*"))  # fails before running anything


def test_bench_engine_without_draft(tiny, prompts: Path, tmp_path: Path, capsys) -> None:
    path, _ = tiny.engine("qwen2", weights="f32")
    assert cli.main(["bench", str(path), "--prompts", str(prompts), "--out-dir", str(tmp_path)])
    assert "has no draft model" in capsys.readouterr().err


def test_parse_draft_lens_and_prompt_files(tmp_path: Path) -> None:
    assert bench.parse_draft_lens("1-3,6") == [1, 2, 3, 6]
    assert bench.parse_draft_lens("4,2,2") == [2, 4]
    assert bench.parse_temperatures("0, 0.7,0") == [0.0, 0.7]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(json.dumps({"prompt": "a\nb"}) + "\n" + json.dumps("c") + "\n")
    prompts, ids, source = bench.load_prompts(str(jsonl), 5)
    assert prompts == ["a\nb", "c"] and ids == ["p.jsonl:0", "p.jsonl:1"]
    assert source == str(jsonl)


def test_cost_model_prediction() -> None:
    """predicted = tokens per iteration / (K x draft step + verify), from the summed counters."""
    run = {
        "prompt_tokens": 5,
        "new_tokens": 31,
        "decode_tokens": 30,
        "decode_s": 1.1,
        "decode_tok_s": 30 / 1.1,
        "ttft_s": 0.1,
        "iterations": 10,
        "spec_iterations": 10,
        "emitted": 30,
        "drafted": 20,
        "accepted": 20,
        "accepted_hist": [0, 0, 10],
        "draft_s": 0.2,  # 10 ms per draft token
        "verify_s": 0.8,  # 80 ms per verify
    }
    a = bench.aggregate("K=2", 2, [run, dict(run)])
    assert a["draft_step_ms"] == pytest.approx(10.0) and a["verify_ms"] == pytest.approx(80.0)
    assert a["tokens_per_iteration"] == pytest.approx(3.0)
    assert a["predicted_tok_s"] == pytest.approx(3.0 / (2 * 0.010 + 0.080))
    assert a["decode_tok_s"] == pytest.approx(60 / 2.2)
    assert a["measured_over_predicted"] == pytest.approx((60 / 2.2) / 30.0)
    assert a["overhead_ms_per_iteration"] == pytest.approx(10.0)
    assert a["accepted_hist"] == [0, 0, 20] and a["acceptance_rate"] == 1.0
