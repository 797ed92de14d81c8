"""``trt-spec bench``: draft sources and labels, chat prompts with predictions, per-prompt ratios,
reports, greedy exactness and argument errors, on a tiny pair and a tiny target-only engine.

The pair is a tiny random target and a smaller random draft with the same tokenizer, built in
float32 with ``draft_len=4``; prompts come from small files written here, so nothing touches the
network or the real models. ``benchmarks/bench_peers.py`` (trt-spec bench plus peers) runs with
fake llama.cpp binaries. The package's structure is checked too: every module imports alone, and
no cycles; the peers live outside the package.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trt_spec import Engine, build_engine, cli
from trt_spec.bench.common import Config
from trt_spec.bench.options import parse_draft_lens, parse_sources, parse_temperatures
from trt_spec.bench.prompts import load_prompts
from trt_spec.bench.run import aggregate, make_configs

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
    "per_prompt_ratio_min",
    "per_prompt_ratio_min_id",
    "per_prompt_ratio_median",
    "source_counts",
    "by_source",
    "prediction_accepted",
    "prediction_rejected",
)
ALL_LABELS = [
    "target-only",
    "model K=1",
    "model K=2",
    "model auto",
    "lookup K=1",
    "lookup K=2",
    "lookup auto",
    "auto",
]
MESSAGES = [{"role": "user", "content": "Rename x to y:\nx = 1\nprint(x)\n"}]
MODULES = [
    "trt_spec.bench",
    "trt_spec.bench.common",
    "trt_spec.bench.options",
    "trt_spec.bench.prompts",
    "trt_spec.bench.run",
    "trt_spec.bench.report",
]
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def pair(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target, _ = tiny.checkpoint("qwen2")
    draft, _ = tiny.checkpoint("qwen2", layers=1, seed=1)
    out = tmp_path_factory.mktemp("bench") / "pair.engine"
    build_engine(target, out, draft=draft, draft_len=4, weights="f32", max_seq_len=128)
    return out


@pytest.fixture(scope="module")
def target_only(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target, _ = tiny.checkpoint("qwen2")
    out = tmp_path_factory.mktemp("bench") / "target.engine"
    build_engine(target, out, draft_len=4, weights="f32", max_seq_len=128)
    return out


@pytest.fixture()
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.txt"
    path.write_text("def fibonacci(n):\n\nimport numpy as np\nfor i in range(10):\n")
    return path


@pytest.fixture(scope="module")
def chat_prompts(pair: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chat prompt whose prediction is the greedy answer itself, and a text prompt."""
    answer = Engine(pair, n_threads=2).generate(
        MESSAGES, max_new_tokens=16, ignore_eos=True, draft="none"
    )
    path = tmp_path_factory.mktemp("prompts") / "edits.jsonl"
    rows = [
        {"id": "edit-1", "task": "rename", "messages": MESSAGES, "prediction": answer.text},
        {"prompt": "for i in range(10):\n", "id": "loop"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _bench(argv: list[str], out: Path) -> dict:
    assert cli.main(["bench", *argv, "--threads", "2", "--out-dir", str(out), "--tag", "t"]) == 0
    return json.loads((out / "spec_t.json").read_text())


def _bench_peers_main():
    """``benchmarks/bench_peers.py``'s main (its folder first on sys.path, as when it runs)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_peers", BENCHMARKS / "bench_peers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _bench_peers(argv: list[str], out: Path) -> dict:
    args = [*argv, "--threads", "2", "--out-dir", str(out), "--tag", "t"]
    assert _bench_peers_main()(args) == 0
    return json.loads((out / "spec_t.json").read_text())


def test_bench_sources_chat_predictions(pair: Path, chat_prompts: Path, tmp_path: Path, capsys):
    argv = [str(pair), "--prompts", str(chat_prompts), "--n", "2", "--max-new-tokens", "16"]
    argv += ["--draft", "model,lookup,auto", "--draft-lens", "1-2", "--temperatures", "0,0.7"]
    rep = _bench(argv, tmp_path)
    stdout = capsys.readouterr().out
    for label in ALL_LABELS:
        assert f"| {label} |" in stdout
    assert "min prompt ratio" in stdout and "greedy exactness: 0 mismatching" in stdout
    assert (tmp_path / "spec_t.md").read_text().startswith("# Speculative decoding benchmark")
    assert (tmp_path / "spec_t.png").is_file() == HAS_MPL
    env, s = rep["environment"], rep["settings"]
    assert env["cpu"] and env["threads"] == 2 and env["trt_spec_version"]
    assert s["prompt_ids"] == ["edit-1", "loop"] and s["use_prediction"] is True
    assert [p["kind"] for p in s["prompts"]] == ["chat", "text"]
    assert s["prompts"][0]["task"] == "rename" and s["prompts"][0]["prediction_chars"] > 0
    assert s["draft_sources"] == ["model", "lookup", "auto"] and s["draft_lens"] == [1, 2]
    assert rep["engines"][0]["configs"] == ALL_LABELS
    assert [r["temperature"] for r in rep["results"]] == [0.0, 0.7]
    for res in rep["results"]:
        configs = {a["config"]: a for a in res["configs"]}
        assert list(configs) == ALL_LABELS
        for a in configs.values():
            assert all(f in a for f in FIELDS), set(FIELDS) - set(a)
            assert a["prompts"] == 2 and [r["id"] for r in a["runs"]] == ["edit-1", "loop"]
            assert a["new_tokens"] == 32  # EOS ignored: every prompt gives 16 tokens
            assert a["decode_tok_s"] > 0 and 0 < a["per_prompt_ratio_min"]
            assert a["per_prompt_ratio_min_id"] in ("edit-1", "loop")
            for r in a["runs"]:  # the per-prompt ratio is to target-only on the same prompt
                base = configs["target-only"]["runs"][[x["id"] for x in a["runs"]].index(r["id"])]
                assert r["ratio_vs_target"] == pytest.approx(
                    r["decode_tok_s"] / base["decode_tok_s"]
                )
            assert a["per_prompt_ratio_min"] == min(r["ratio_vs_target"] for r in a["runs"])
            used = {k for k, v in a["source_counts"].items() if v}
            assert sum(a["source_counts"].values()) == a["iterations"]
            if a["draft"] in ("model", "lookup"):
                assert used <= {a["draft"], "none"}
            if a["draft"] == "none":
                assert used == {"none"} and a["drafted"] == 0
        assert configs["target-only"]["per_prompt_ratio_min"] == 1.0
        for label in ("model K=1", "model K=2"):
            by = configs[label]["by_source"]["model"]
            assert by["drafted"] == configs[label]["drafted"] > 0
        c = res["checks"]
        assert set(c["per_prompt_ratio_min"]) == set(ALL_LABELS[1:])
        assert c["worst_prompt"]["config"] in ALL_LABELS[1:]
        assert c["best_other"] in ALL_LABELS[1:-1] and c["auto_vs_best_other"] > 0
        assert c["auto_vs_target_only"] == pytest.approx(configs["auto"]["speedup"])
    greedy = rep["results"][0]
    assert greedy["checks"]["greedy_mismatches"] == 0
    assert all(a["greedy_mismatches"] == 0 for a in greedy["configs"][1:])
    assert rep["results"][1]["checks"]["greedy_mismatches"] is None
    assert not any("EXACTNESS" in n for n in rep["notes"])
    # greedy: the prediction is the answer itself, so lookup drafts from it are kept
    lookup = {a["config"]: a for a in greedy["configs"]}["lookup K=2"]
    edit = lookup["runs"][0]
    assert edit["prediction_used"] and edit["prediction_accepted"] > 0
    assert not lookup["runs"][1]["prediction_used"]  # the text prompt has none


def test_bench_no_use_prediction(pair: Path, chat_prompts: Path, tmp_path: Path) -> None:
    argv = [str(pair), "--prompts", str(chat_prompts), "--n", "1", "--max-new-tokens", "8"]
    argv += ["--draft", "lookup", "--draft-lens", "2", "--temperatures", "0", "--no-auto"]
    rep = _bench([*argv, "--no-use-prediction"], tmp_path)
    assert rep["settings"]["use_prediction"] is False
    labels = [a["config"] for a in rep["results"][0]["configs"]]
    assert labels == ["target-only", "lookup K=2"]
    run = rep["results"][0]["configs"][1]["runs"][0]
    assert not run["prediction_used"] and run["prediction_accepted"] == 0


def test_bench_repeats_merge_each_prompts_runs(pair: Path, prompts: Path, tmp_path: Path) -> None:
    """--repeats 2: each prompt's configurations run twice in turn, and its record is over both
    runs: tokens and seconds summed, the rate their quotient, each run's rate kept, the ratio to
    target-only taken from the merged rates; the report says how many runs."""
    argv = [str(pair), "--prompts", str(prompts), "--n", "2", "--max-new-tokens", "8"]
    argv += ["--draft", "model", "--draft-lens", "2", "--temperatures", "0", "--no-auto"]
    rep = _bench([*argv, "--repeats", "2"], tmp_path)
    assert rep["settings"]["repeats"] == 2
    target, model = rep["results"][0]["configs"]
    for cfg in (target, model):
        assert cfg["prompts"] == 2 and len(cfg["runs"]) == 2
        for r in cfg["runs"]:
            assert len(r["repeat_tok_s"]) == 2 and r["decode_tokens"] == 2 * 7
            assert r["decode_tok_s"] == pytest.approx(r["decode_tokens"] / r["decode_s"])
            assert min(r["repeat_tok_s"]) <= r["decode_tok_s"] * (1 + 1e-9)
            assert r["decode_tok_s"] <= max(r["repeat_tok_s"]) * (1 + 1e-9)
    for t, m in zip(target["runs"], model["runs"], strict=True):
        assert m["ratio_vs_target"] == pytest.approx(m["decode_tok_s"] / t["decode_tok_s"])
        assert m["greedy_mismatch_at"] is None
    assert model["greedy_mismatches"] == 0
    md = next(tmp_path.glob("spec_*.md")).read_text()
    assert "2 runs of each in turn" in md
    single = _bench(argv, tmp_path / "one")
    assert "repeat_tok_s" not in single["results"][0]["configs"][0]["runs"][0]


def test_bench_default_sources_and_no_auto(pair: Path, prompts: Path, tmp_path: Path) -> None:
    argv = ["bench", str(pair), "--prompts", str(prompts), "--n", "1", "--max-new-tokens", "4"]
    argv += ["--temperatures", "0", "--no-auto", "--out-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    (path,) = tmp_path.glob("spec_*.json")  # no tag: named by the date
    rep = json.loads(path.read_text())
    labels = [a["config"] for a in rep["results"][0]["configs"]]
    # a draft model: model,auto (auto lengths off); K 1..engine's draft_len
    assert labels == ["target-only", "model K=1", "model K=2", "model K=3", "model K=4"]
    assert cli.main(argv) == 0  # a second run does not overwrite the first
    assert len(list(tmp_path.glob("spec_*.json"))) == 2


def test_bench_engine_without_draft(target_only: Path, prompts: Path, tmp_path: Path) -> None:
    argv = [str(target_only), "--prompts", str(prompts), "--n", "2", "--max-new-tokens", "8"]
    rep = _bench([*argv, "--draft-lens", "1,3", "--temperatures", "0"], tmp_path)
    labels = [a["config"] for a in rep["results"][0]["configs"]]
    assert labels == ["target-only", "lookup K=1", "lookup K=3", "lookup auto", "auto"]
    eng = rep["engines"][0]
    assert eng["has_draft"] is False and eng["draft"] is None
    assert eng["sources"] == ["lookup", "auto"]
    assert rep["results"][0]["checks"]["greedy_mismatches"] == 0
    for a in rep["results"][0]["configs"]:
        assert not a["source_counts"].get("model")
        assert not a["by_source"].get("model", {}).get("iterations")


def test_bench_draft_model_without_draft_model(
    target_only: Path, prompts: Path, tmp_path: Path, capsys
) -> None:
    argv = ["bench", str(target_only), "--prompts", str(prompts), "--draft", "model,auto"]
    assert cli.main([*argv, "--out-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--draft model" in err and "has no draft model" in err and str(target_only) in err
    assert not list(tmp_path.glob("spec_*"))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--draft-lens", "0-99"], "draft lengths must be >= 1"),
        (["--draft-lens", "1-99"], "allows K up to 4"),
        (["--draft-lens", "x"], "is not K or A-B"),
        (["--draft", "model,tree"], "unknown draft source 'tree'"),
        (["--draft", "auto", "--no-auto"], "nothing but target-only"),
        (["--prompts", "/no/such/prompts.txt"], "neither 'humaneval' nor a readable file"),
        (["--temperatures", "hot"], "is not a number"),
        (["--max-new-tokens", "1"], "--max-new-tokens must be >= 2"),
        (["--n", "0"], "--n must be >= 1"),
        (["--repeats", "0"], "--repeats must be >= 1"),
    ],
)
def test_bench_bad_arguments(
    pair: Path, prompts: Path, tmp_path: Path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setenv("LLAMA_CPP_BIN_DIR", str(tmp_path / "no-llama-build"))
    argv = ["bench", str(pair), "--prompts", str(prompts), "--out-dir", str(tmp_path)]
    assert cli.main([*argv, *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trt-spec: error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("spec_*"))  # fails before running anything


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--peers", "vllm"], "unknown peer 'vllm'"),
        (["--peer-draft-lens", "0"], "--peer-draft-lens: draft lengths must be >= 1"),
        (["--peer-n", "0"], "--peer-n must be >= 1"),
        (["--peers", "llama.cpp"], "build it with: bash benchmarks/peers/build_llama_cpp.sh"),
        (["--draft-lens", "x"], "is not K or A-B"),
    ],
)
def test_bench_peers_bad_arguments(
    pair: Path, prompts: Path, tmp_path: Path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setenv("LLAMA_CPP_BIN_DIR", str(tmp_path / "no-llama-build"))
    argv = [str(pair), "--prompts", str(prompts), "--out-dir", str(tmp_path)]
    assert _bench_peers_main()([*argv, *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bench_peers.py: error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("spec_*"))  # fails before running anything


def test_trt_spec_bench_has_no_peer_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "bench", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--draft-lens" in out.stdout and "--peers" not in out.stdout


def _bench_imports(module: str) -> set[str]:
    """The trt_spec.bench modules a module imports explicitly (anywhere in it)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin
    out: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            assert not isinstance(node, ast.ImportFrom), f"{module}: relative import"
            continue
        hits = [n for n in names if n in MODULES or n.startswith("trt_spec.bench.")]
        out |= {n for n in hits if n in MODULES} or set(hits)
    return out - {module}


def test_bench_package_has_no_import_cycles() -> None:
    graph = {m: _bench_imports(m) for m in MODULES}
    for m, deps in graph.items():
        assert deps <= set(MODULES), (m, deps - set(MODULES))
        if m != "trt_spec.bench":  # submodules never import the package's __init__
            assert "trt_spec.bench" not in deps, m
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        assert state.get(m) != 1, f"import cycle: {' -> '.join([*path, m])}"
        if state.get(m) == 2:
            return
        state[m] = 1
        for d in sorted(graph[m]):
            visit(d, [*path, m])
        state[m] = 2

    for m in MODULES:
        visit(m, [])
    assert graph["trt_spec.bench.common"] == set()  # the base: nothing of the package


def test_peer_runners_stand_alone() -> None:
    """The runners run on their own (the llama_cpp one in the peer venv): no trt_spec imports."""
    for name in ("llama_cpp_runner", "llama_spec_runner", "transformers_assisted_runner"):
        script = (BENCHMARKS / "peers" / f"{name}.py").read_text()
        nodes = ast.walk(ast.parse(script))
        imports = [n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)]
        assert imports and not any("trt_spec" in ast.unparse(n) for n in imports), name


def test_bench_modules_import_alone() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = {
        m: subprocess.Popen(
            [sys.executable, "-c", f"import {m}"], env=env, stderr=subprocess.PIPE, text=True
        )
        for m in MODULES
    }
    for m, p in procs.items():
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"import {m} alone failed:\n{err}"


FAKE_LLAMA = """#!{python}
import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv) + "\\n")
if "--version" in sys.argv:
    print("version: 1 (fake)", file=sys.stderr)
elif sys.argv[0].endswith("simple"):
    opt = "--spec-draft-n-max" if "-md" in sys.argv else "--spec-ngram-simple-size-m"
    k = int(sys.argv[sys.argv.index(opt) + 1])
    print("encoded   12 tokens in    0.100 seconds, speed:  120.0 t/s", file=sys.stderr)
    print(f"decoded   8 tokens in    {{0.4 / k:.3f}} seconds, speed: 1 t/s", file=sys.stderr)
    print(f"n_drafted = {{4 * k}}", file=sys.stderr)
    print("n_accept  = 4", file=sys.stderr)
else:
    print("prompt eval time =     100.00 ms /    12 tokens", file=sys.stderr)
    print("       eval time =     700.00 ms /     7 runs", file=sys.stderr)
"""


def _fake_llama_binaries(tmp_path: Path, monkeypatch) -> Path:
    """Fake llama.cpp binaries on LLAMA_CPP_BIN_DIR; returns the file their calls go to."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    for name in ("llama-speculative-simple", "llama-completion"):
        (bin_dir / name).write_text(FAKE_LLAMA.format(python=sys.executable, log=str(log)))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("LLAMA_CPP_BIN_DIR", str(bin_dir))
    return log


def test_bench_llama_cpp_peer_with_fake_binaries(
    pair: Path, chat_prompts: Path, tmp_path: Path, monkeypatch
) -> None:
    """The llama.cpp peer through bench_peers.py: chat prompts reach it as rendered text, its
    runs are labelled like trt-spec's and compared per configuration (fake binaries, fixed
    timings)."""
    log = _fake_llama_binaries(tmp_path, monkeypatch)
    argv = [str(pair), "--prompts", str(chat_prompts), "--n", "2", "--max-new-tokens", "8"]
    argv += ["--draft", "model", "--draft-lens", "1,2", "--temperatures", "0", "--no-auto"]
    argv += ["--peers", "llama.cpp", "--target-gguf", "t.gguf", "--draft-gguf", "d.gguf"]
    rep = _bench_peers(argv, tmp_path / "out")
    (peer,) = rep["peers"]
    assert peer["runner"] == "llama.cpp" and peer["version"] == "1 (fake)"
    by = {a["config"]: a for a in peer["configs"]}
    assert list(by) == ["target-only", "model K=1", "model K=2"]
    assert by["target-only"]["decode_tok_s"] == pytest.approx(10.0)  # 7 runs in 0.7 s
    assert by["model K=2"]["decode_tok_s"] == pytest.approx(40.0)  # 8 tokens in 0.2 s
    assert by["model K=2"]["acceptance_rate"] == pytest.approx(0.5)
    assert by["model K=1"]["per_prompt_ratio_min"] == pytest.approx(2.0)
    assert [r["id"] for r in by["model K=1"]["runs"]] == ["edit-1", "loop"]
    res = rep["results"][0]
    mine = {a["config"]: a["decode_tok_s"] for a in res["configs"]}
    cmp = res["checks"]["vs_llama.cpp"]
    assert set(cmp) == {"target-only", "model K=1", "model K=2"}
    assert cmp["model K=2"] == pytest.approx(mine["model K=2"] / 40.0)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    prompts = [c[c.index("-p") + 1] for c in calls if "-p" in c]
    assert len(prompts) == 6  # 2 prompts x 3 configurations
    chat = Engine(pair).tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    assert prompts.count(chat) == 3 and prompts.count("for i in range(10):\n") == 3
    assert all(c[c.index("-m") + 1] == "t.gguf" for c in calls if "-m" in c)
    md = (tmp_path / "out" / "spec_t.md").read_text()
    assert "## Peers" in md and "trt-spec / llama.cpp tok/s: target-only:" in md


def test_bench_llama_cpp_lookup_peer_with_fake_binaries(
    target_only: Path, chat_prompts: Path, tmp_path: Path, monkeypatch
) -> None:
    """The llama.cpp prompt-lookup peer: an engine without a draft model, its own K (below the
    n-gram length dropped), runs paired with trt-spec's by label, prompts passed verbatim."""
    log = _fake_llama_binaries(tmp_path, monkeypatch)
    argv = [str(target_only), "--prompts", str(chat_prompts), "--n", "1", "--max-new-tokens", "8"]
    argv += ["--draft", "lookup", "--draft-lens", "none", "--temperatures", "0"]
    argv += ["--peers", "llama.cpp-lookup", "--peer-draft-lens", "2,4", "--target-gguf", "t.gguf"]
    rep = _bench_peers(argv, tmp_path / "out")
    labels = [a["config"] for a in rep["results"][0]["configs"]]
    assert labels == ["target-only", "lookup auto"]  # --draft-lens none: the auto length only
    (peer,) = rep["peers"]
    assert peer["runner"] == "llama.cpp-lookup" and peer["source"] == "lookup"
    by = {a["config"]: a for a in peer["configs"]}
    assert list(by) == ["target-only", "lookup K=4", "lookup auto (llama.cpp defaults n=12, m=48)"]
    assert by["lookup K=4"]["decode_tok_s"] == pytest.approx(80.0)  # 8 tokens in 0.1 s
    cmp = rep["results"][0]["checks"]["vs_llama.cpp-lookup"]
    assert set(cmp) == {"target-only", "lookup auto"}
    calls = [json.loads(line) for line in log.read_text().splitlines() if "-p" in line]
    spec = [c for c in calls if c[0].endswith("simple")]
    assert len(spec) == 2 and all("-md" not in c and "--no-escape" in c for c in spec)
    assert [c[c.index("--spec-ngram-simple-size-n") + 1] for c in spec] == ["3", "12"]
    assert [c[c.index("--spec-ngram-simple-size-m") + 1] for c in spec] == ["4", "48"]


def test_parsers_and_configs() -> None:
    assert parse_draft_lens("1-3,6") == [1, 2, 3, 6]
    assert parse_draft_lens("4,2,2") == [2, 4]
    assert parse_temperatures("0, 0.7,0") == [0.0, 0.7]
    assert parse_sources("lookup, model,lookup") == ["lookup", "model"]
    labels = [c.label for c in make_configs(["lookup", "auto", "model"], [3], auto=True)]
    assert labels == ["target-only", "lookup K=3", "lookup auto", "auto", "model K=3", "model auto"]
    configs = make_configs(["model", "auto"], [1], auto=False)
    assert configs == [Config("target-only", "none", 0), Config("model K=1", "model", 1)]
    assert parse_draft_lens("none") == []
    labels = [c.label for c in make_configs(["model", "lookup", "auto"], [], auto=True)]
    assert labels == ["target-only", "model auto", "lookup auto", "auto"]


def test_prompt_files(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    rows = [
        {"prompt": "a\nb"},
        "c",
        {"messages": MESSAGES, "prediction": "x = 1", "id": "m", "task": "edit"},
    ]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    prompts, source = load_prompts(str(jsonl), 5)
    assert [p.id for p in prompts] == ["p.jsonl:0", "p.jsonl:1", "m"] and source == str(jsonl)
    assert prompts[0].prompt == "a\nb" and prompts[1].prompt == "c"
    assert prompts[2].is_chat and prompts[2].prediction == "x = 1" and prompts[2].task == "edit"
    assert load_prompts(str(jsonl), 1)[0] == prompts[:1]
    assert load_prompts(str(jsonl), 5, skip=1)[0] == prompts[1:]
    assert load_prompts(str(jsonl), 1, skip=2)[0] == prompts[2:]
    for skip, message in ((3, "holds 3 prompts"), (-1, "must be >= 0")):
        with pytest.raises(ValueError, match="--skip") as e:
            load_prompts(str(jsonl), 1, skip=skip)
        assert message in str(e.value)
    (tmp_path / "q.json").write_text(json.dumps(rows))
    assert [p.id for p in load_prompts(str(tmp_path / "q.json"), 9)[0]] == [
        "q.json:0",
        "q.json:1",
        "m",
    ]
    bad = {
        '{"messages": []}': "'messages' must be a non-empty list",
        '{"messages": [{"role": "user"}]}': "each message needs string 'role' and 'content'",
        '{"prompt": "a", "prediction": 3}': "'prediction' must be a string",
        '{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}': "not both",
        '{"id": 1}': "needs a non-empty 'prompt' or 'messages'",
        "[1": "line 1",
    }
    for line, message in bad.items():
        jsonl.write_text(line + "\n")
        with pytest.raises(ValueError, match="--prompts: ") as e:
            load_prompts(str(jsonl), 1)
        assert message in str(e.value)


def test_cost_model_prediction() -> None:
    """predicted = tokens per iteration / (K x draft step + verify), from the summed counters."""
    run = {
        "id": "p0",
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
        "catch_up_s": 0.0,
        "source_counts": {"none": 0, "model": 10, "lookup": 0},
        "by_source": {"model": {"iterations": 10, "drafted": 20, "accepted": 20}},
        "prediction_accepted": 0,
        "prediction_rejected": 0,
        "ratio_vs_target": 1.5,
    }
    a = aggregate(Config("model K=2", "model", 2), [run, dict(run, id="p1", ratio_vs_target=1.2)])
    assert a["draft_step_ms"] == pytest.approx(10.0) and a["verify_ms"] == pytest.approx(80.0)
    assert a["tokens_per_iteration"] == pytest.approx(3.0)
    assert a["predicted_tok_s"] == pytest.approx(3.0 / (2 * 0.010 + 0.080))
    assert a["decode_tok_s"] == pytest.approx(60 / 2.2)
    assert a["measured_over_predicted"] == pytest.approx((60 / 2.2) / 30.0)
    assert a["overhead_ms_per_iteration"] == pytest.approx(10.0)
    assert a["accepted_hist"] == [0, 0, 20] and a["acceptance_rate"] == 1.0
    assert a["per_prompt_ratio_min"] == 1.2 and a["per_prompt_ratio_min_id"] == "p1"
    assert a["per_prompt_ratio_median"] == pytest.approx(1.35)
    assert a["source_counts"]["model"] == 20 and a["by_source"]["model"]["drafted"] == 40
