"""The ``trt-spec`` command line: help texts, build -> generate -> info, and error reporting.

Runs ``python -m trt_spec.cli`` in subprocesses (exit codes, what reaches stdout/stderr, no
traceback) and ``trt_spec.cli.main([...])`` in-process where capturing is easier. Everything
uses tiny checkpoints; nothing here touches the network (``fetch-models`` only shows its help).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from trt_spec import Engine, cli

PROMPT = "def fibonacci(n):"
SEQ = 64
ENV = {**os.environ, "PYTHONUTF8": "1", "PYTHONIOENCODING": "utf-8"}

SUBCOMMAND_OPTIONS = {
    "fetch-models": ["--model", "--all"],
    "build": [
        "--target",
        "--draft",
        "--output",
        "--max-seq-len",
        "--max-batch",
        "--weights",
        "--quiet",
        "--verbose",
        "--revision",
        "--draft-revision",
        "--offline",
        "--threads",
    ],
    "generate": [
        "engine",
        "prompt",
        "--chat",
        "--max-new-tokens",
        "--temperature",
        "--top-k",
        "--top-p",
        "--seed",
        "--stop",
        "--threads",
        "--json",
    ],
    "info": ["engine", "--no-verify"],
}


def run_cli(*args: str | os.PathLike, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=ENV,
        cwd=cwd,
        timeout=120,
    )


def assert_one_error_line(stderr: str) -> str:
    """stderr holds exactly one line, ``trt-spec: error: ...``, and no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("trt-spec: error: "), stderr
    return lines[0]


# ---- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def checkpoint(tiny) -> Path:
    folder, _ = tiny.checkpoint("qwen2")
    return folder


@pytest.fixture(scope="module")
def built(workdir, checkpoint) -> tuple[Path, subprocess.CompletedProcess]:
    out = workdir / "tiny.engine"
    r = run_cli(
        "build",
        "--target",
        checkpoint,
        "-o",
        out,
        "--weights",
        "f32",
        "--max-seq-len",
        SEQ,
    )
    assert r.returncode == 0, r.stderr
    return out, r


@pytest.fixture(scope="module")
def engine_path(built) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def reference(engine_path):
    return Engine(engine_path).generate(PROMPT, max_new_tokens=8)


@pytest.fixture(scope="module")
def corrupt_engine(workdir, engine_path) -> Path:
    """A copy of the engine with one flipped byte inside its tensor data."""
    raw = bytearray(engine_path.read_bytes())
    data_offset = struct.unpack_from("<Q", raw, 32)[0]
    raw[data_offset + 1000] ^= 0x01
    p = workdir / "corrupt.engine"
    p.write_bytes(bytes(raw))
    return p


@pytest.fixture(scope="module")
def truncated_gguf(workdir) -> Path:
    p = workdir / "cut.gguf"
    w = gguf.GGUFWriter(str(p), "qwen2")
    w.add_context_length(512)
    w.add_tensor("token_embd.weight", np.ones((4, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p.write_bytes(p.read_bytes()[:24])
    return p


@pytest.fixture(scope="module")
def config_missing_key(workdir, checkpoint) -> Path:
    folder = workdir / "no-hidden-size"
    shutil.copytree(checkpoint, folder)
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["hidden_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


# ---- help -------------------------------------------------------------------------------------
def test_top_level_help():
    r = run_cli("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: trt-spec")
    for sub in SUBCOMMAND_OPTIONS:
        assert sub in r.stdout


@pytest.mark.parametrize("sub", list(SUBCOMMAND_OPTIONS))
def test_subcommand_help(sub):
    r = run_cli(sub, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: trt-spec {sub}")
    for opt in SUBCOMMAND_OPTIONS[sub]:
        assert opt in r.stdout, (sub, opt)


@pytest.mark.parametrize("sub", [None, *SUBCOMMAND_OPTIONS])
def test_help_in_process(capsys, sub):
    argv = ["--help"] if sub is None else [sub, "--help"]
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in SUBCOMMAND_OPTIONS.get(sub, ["build", "generate", "info", "fetch-models"]):
        assert opt in out


def test_weights_help_lists_formats():
    out = run_cli("build", "--help").stdout
    for w in ("f32", "f16", "bf16", "q8", "q4"):
        assert w in out


# ---- build -> generate -> info ----------------------------------------------------------------
def test_build_prints_summary(built):
    path, r = built
    assert path.is_file()
    assert re.search(r"^target: qwen2, [\d.]+ MB of weights", r.stdout, re.M), r.stdout
    assert re.search(rf"^engine: {re.escape(str(path))} \([\d.]+ MB", r.stdout, re.M), r.stdout
    assert "Traceback" not in r.stderr
    assert "reading target" in r.stderr  # progress goes to stderr, not stdout
    assert not [p for p in path.parent.iterdir() if ".partial-" in p.name]


def test_build_quiet_has_no_progress(workdir, checkpoint):
    out = workdir / "quiet.engine"
    r = run_cli(
        "build", "--target", checkpoint, "-o", out, "--weights", "q8", "-q", "--max-seq-len", 32
    )
    assert r.returncode == 0, r.stderr
    assert "tok_embd" not in r.stderr
    e = Engine(out)
    assert e.weights == "q8" and e.max_seq_len == 32


def test_generate_greedy(engine_path, reference):
    r = run_cli("generate", engine_path, PROMPT, "--max-new-tokens", 8)
    assert r.returncode == 0, r.stderr
    assert r.stdout == reference.text + "\n"
    assert reference.text  # the tiny model does print something
    stats = r.stderr.strip().splitlines()
    assert len(stats) == 1, r.stderr
    assert re.match(
        r"^\[cpu[^,]*, f32\] prompt \d+ tok, generated \d+ tok in [\d.]+ s .*[\d.]+ tok/s",
        stats[0],
    ), stats[0]
    assert f"generated {len(reference.token_ids)} tok" in stats[0]


def test_generate_json(engine_path, reference):
    r = run_cli("generate", engine_path, PROMPT, "--max-new-tokens", 8, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["token_ids"] == reference.token_ids
    assert doc["token_ids"] == Engine(engine_path).generate(PROMPT, max_new_tokens=8).token_ids
    assert doc["text"] == reference.text
    assert doc["stats"]["new_tokens"] == len(reference.token_ids)
    assert doc["stats"]["tokens_per_s"] > 0


def test_generate_json_in_process(capsys, engine_path, reference):
    rc = cli.main(
        ["generate", str(engine_path), PROMPT, "--max-new-tokens", "8", "--json", "--threads", "1"]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert json.loads(out)["token_ids"] == reference.token_ids


def test_generate_with_a_draft_window(capsys, engine_path, reference):
    args = ["generate", str(engine_path), PROMPT, "--max-new-tokens", "8", "--json"]
    assert cli.main([*args, "--draft-window", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == reference.token_ids


def test_generate_with_the_draft_read_after_the_first_token(capsys, engine_path, reference):
    args = ["generate", str(engine_path), PROMPT, "--max-new-tokens", "8", "--json"]
    assert cli.main([*args, "--draft-read-chunk", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == reference.token_ids


def test_generate_sampling_options(engine_path):
    args = ["--max-new-tokens", "6", "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9"]
    a = run_cli("generate", engine_path, PROMPT, *args, "--seed", 3, "--json")
    b = run_cli("generate", engine_path, PROMPT, *args, "--seed", 3, "--json")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ids = json.loads(a.stdout)["token_ids"]
    assert ids == json.loads(b.stdout)["token_ids"]  # same seed, same tokens
    expect = Engine(engine_path).generate(
        PROMPT, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9, seed=3
    )
    assert ids == expect.token_ids


def test_generate_chat(engine_path):
    r = run_cli("generate", engine_path, "hi", "--chat", "--max-new-tokens", 4, "--json")
    assert r.returncode == 0, r.stderr
    expect = Engine(engine_path).generate([{"role": "user", "content": "hi"}], max_new_tokens=4)
    assert json.loads(r.stdout)["token_ids"] == expect.token_ids


def test_info(engine_path):
    r = run_cli("info", engine_path)
    assert r.returncode == 0, r.stderr
    assert "qwen2" in r.stdout
    assert "weights=f32" in r.stdout
    assert '"weights": "f32"' in r.stdout
    assert f'"max_seq_len": {SEQ}' in r.stdout
    assert re.search(r"^target: .*\(hf, ", r.stdout, re.M)
    eng = Engine(engine_path)
    mem = re.search(
        r"^memory: weights ([\d.]+) MB .*KV cache ([\d.]+) MB \((\d+) sequences x "
        r"(\d+) positions, (\w+);.*resident after load: ([\d.]+) MB$",
        r.stdout,
        re.M,
    )
    assert mem, r.stdout
    weights = sum(m["weight_bytes"] for m in eng.metadata["models"].values())
    assert float(mem[1]) == pytest.approx(weights / 1e6, abs=0.06)
    assert float(mem[2]) == pytest.approx(eng.kv_bytes / 1e6, abs=0.06)
    assert (int(mem[3]), int(mem[4]), mem[5]) == (eng.max_batch, SEQ, eng.kv_cache_dtype)
    assert float(mem[6]) > weights / 1e6  # the weights are read at load


def test_info_in_process(capsys, engine_path):
    assert cli.main(["info", str(engine_path)]) == 0
    out = capsys.readouterr().out
    assert "qwen2" in out and "f32" in out


def test_info_no_verify_reads_corrupt_tensor_data(corrupt_engine):
    r = run_cli("info", corrupt_engine, "--no-verify")
    assert r.returncode == 0, r.stderr
    assert "qwen2" in r.stdout


# ---- errors -----------------------------------------------------------------------------------
def _error_cases(engine_path, corrupt_engine, workdir, checkpoint):
    text_file = workdir / "notes.txt"
    text_file.write_text("not a model\n")
    e = str(engine_path)
    return {
        "missing-engine": (["generate", workdir / "missing.engine", "hi"], r"cannot open"),
        "corrupt-engine": (["generate", corrupt_engine, "hi"], r"checksum mismatch in tensor"),
        "corrupt-engine-info": (["info", corrupt_engine], r"checksum mismatch"),
        "engine-is-folder": (["info", workdir], r"not a regular file"),
        "not-an-engine": (["info", text_file], r"too small|wrong magic"),
        "temperature": (["generate", e, "hi", "--temperature", "-1"], r"temperature must be"),
        "top-p": (["generate", e, "hi", "--top-p", "0"], r"top_p must lie in"),
        "top-k": (["generate", e, "hi", "--top-k", "-2"], r"top_k must be >= 0"),
        "max-new": (["generate", e, "hi", "--max-new-tokens", "-1"], r"max_new_tokens must be"),
        "seed": (["generate", e, "hi", "--seed", "-1"], r"seed must be"),
        "threads": (["generate", e, "hi", "--threads", "0"], r"n_threads must be >= 1"),
        "draft-window": (["generate", e, "hi", "--draft-window", "-1"], r"draft_window must be"),
        "draft-read-chunk": (
            ["generate", e, "hi", "--draft-read-chunk", "-2"],
            r"draft_read_chunk must be",
        ),
        "empty-prompt": (["generate", e, ""], r"the prompt is empty"),
        "long-prompt": (["generate", e, "x " * 200], r"max_seq_len of 64"),
        "build-missing": (
            ["build", "--target", workdir / "nope", "-o", workdir / "x.engine", "-q"],
            r"no such file or folder",
        ),
        "build-text-file": (
            ["build", "--target", text_file, "-o", workdir / "x.engine", "-q"],
            r"neither a GGUF file nor",
        ),
        "build-max-batch": (
            ["build", "--target", checkpoint, "-o", workdir / "x.engine", "--max-batch", "0", "-q"],
            r"max_batch must be in",
        ),
        "build-max-seq-len": (
            [
                "build",
                "--target",
                checkpoint,
                "-o",
                workdir / "x.engine",
                "--max-seq-len",
                "99999",
                "-q",
            ],
            r"max_seq_len must be in \[1, 512\]",
        ),
        "build-no-output-folder": (
            ["build", "--target", checkpoint, "-o", workdir / "no" / "x.engine", "-q"],
            r"does not exist",
        ),
    }


ERROR_CASES = [
    "missing-engine",
    "corrupt-engine",
    "corrupt-engine-info",
    "engine-is-folder",
    "not-an-engine",
    "temperature",
    "top-p",
    "top-k",
    "max-new",
    "seed",
    "threads",
    "draft-window",
    "draft-read-chunk",
    "empty-prompt",
    "long-prompt",
    "build-missing",
    "build-text-file",
    "build-max-batch",
    "build-max-seq-len",
    "build-no-output-folder",
]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_is_one_line(case, engine_path, corrupt_engine, workdir, checkpoint):
    args, pattern = _error_cases(engine_path, corrupt_engine, workdir, checkpoint)[case]
    r = run_cli(*args)
    assert r.returncode == 1, (r.returncode, r.stderr)
    line = assert_one_error_line(r.stderr)
    assert re.search(pattern, line), line
    assert r.stdout == ""
    assert not (workdir / "x.engine").exists()


def test_build_error_without_quiet_ends_with_error_line(workdir, checkpoint):
    r = run_cli("build", "--target", checkpoint, "-o", workdir / "x.engine", "--weights", "q8",
                "--max-seq-len", "100000")  # fmt: skip
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("trt-spec: error: max_seq_len must be in")
    assert sum(line.startswith("trt-spec: error:") for line in lines) == 1


@pytest.mark.parametrize("case", ["missing-engine", "temperature", "build-missing"])
def test_error_in_process(capsys, case, engine_path, corrupt_engine, workdir, checkpoint):
    args, pattern = _error_cases(engine_path, corrupt_engine, workdir, checkpoint)[case]
    assert cli.main([str(a) for a in args]) == 1
    captured = capsys.readouterr()
    line = assert_one_error_line(captured.err)
    assert re.search(pattern, line), line
    assert captured.out == ""


def test_generate_huge_max_new_tokens(engine_path):
    """3e9 does not fit the runtime's int: it must be a one-line error (or be clamped), not a
    nanobind TypeError traceback."""
    r = run_cli("generate", engine_path, "hi", "--max-new-tokens", "3000000000", "--json")
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode != 0:
        assert re.search(r"max_new_tokens", assert_one_error_line(r.stderr))


def test_generate_huge_top_k(engine_path):
    r = run_cli("generate", engine_path, "hi", "--top-k", "3000000000", "--max-new-tokens", "2")
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode != 0:
        assert re.search(r"top_k", assert_one_error_line(r.stderr))


@pytest.mark.parametrize("which", ["truncated-gguf", "config-missing-key"])
def test_build_malformed_checkpoint(which, truncated_gguf, config_missing_key, workdir):
    """A damaged checkpoint is a one-line error naming it (today: IndexError / KeyError
    tracebacks from the GGUF and Hugging Face readers)."""
    target = truncated_gguf if which == "truncated-gguf" else config_missing_key
    r = run_cli("build", "--target", target, "-o", workdir / "x.engine", "-q")
    assert r.returncode == 1
    line = assert_one_error_line(r.stderr)
    assert target.name in line
    assert not (workdir / "x.engine").exists()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["generate"],
        ["generate", "a.engine", "hi", "--temperature", "warm"],
        ["build", "--target", "x", "-o", "y", "--weights", "q3"],
        ["frobnicate"],
    ],
    ids=["no-command", "missing-args", "bad-float", "bad-choice", "unknown-command"],
)
def test_usage_errors(args):
    r = run_cli(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "usage: trt-spec" in r.stderr
    assert "error:" in r.stderr
    assert r.stdout == ""


def test_engine_options_come_from_each_command_s_flags():
    """generate, serve and serve --replicas open their engines through one EngineOptions, read
    from the command's own flags; a flag the command lacks keeps Engine's default."""
    from trt_spec.engine_options import EngineOptions

    p = cli.make_parser()
    serve = p.parse_args(
        ["serve", "e.engine", "--threads", "3", "--device", "cpu", "--kv-cache-dtype", "f32"]
        + ["--eagle-topk", "2", "--draft-window", "64", "--no-prompt-cache"]
    )
    o = EngineOptions.from_args(serve)
    assert (o.n_threads, o.device, o.kv_cache_dtype) == (3, "cpu", "f32")
    assert (o.eagle_topk, o.draft_window, o.prompt_cache) == (2, 64, False)
    gen = EngineOptions.from_args(p.parse_args(["generate", "e.engine", "hi"]))
    assert gen == EngineOptions()  # (generate has no --device or --no-prompt-cache)
    # As the options travel to a Ray replica: a dict, back to the same options.
    assert EngineOptions.coerce(o.kwargs()) == o and EngineOptions.coerce(None) == EngineOptions()
    with pytest.raises(ValueError, match="unknown engine options: threads"):
        EngineOptions.coerce({"threads": 2})
    from trt_spec.ray.deployment import ReplicaConfig

    r = ReplicaConfig(engine="e.engine", model_name="m", options=o.kwargs())  # type: ignore[arg-type]
    assert r.options == o
