"""``trt-spec build`` with Hugging Face model ids (trt_spec/builder/resolve.py), offline.

Each test lays out a Hugging Face hub cache in a temporary folder by hand, the way
``huggingface_hub`` writes it (``models--org--name/{refs/<branch>, snapshots/<commit>/<file> ->
../../blobs/<sha256>}``), holding tiny random models: a safetensors model at two revisions and a
GGUF file written here from the tiny model. The CLI runs in subprocesses with ``HF_HUB_CACHE``
pointing there and ``HF_HUB_OFFLINE=1``, so nothing reaches the network. Also: the precedence
local path > registry name > hub id, and one-line errors for what is not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from trt_spec import Engine
from trt_spec.builder.hf_source import open_hf
from trt_spec.builder.resolve import parse_hub_id, resolve_checkpoint
from trt_spec.builder.source import BuildError

COMMIT_MAIN = "a" * 40
COMMIT_V2 = "b" * 40
COMMIT_GGUF = "c" * 40
HF_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def write_gguf(hf_folder: Path, path: Path) -> None:
    """The tiny Hugging Face model as a float32 qwen2 GGUF file (llama.cpp's names and keys)."""
    src = open_hf(hf_folder)
    c = src.config
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("tiny-gguf")
    w.add_block_count(c["n_layers"])
    w.add_context_length(src.context_length)
    w.add_embedding_length(c["dim"])
    w.add_feed_forward_length(c["ffn_dim"])
    w.add_head_count(c["n_heads"])
    w.add_head_count_kv(c["n_kv_heads"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_eps"])
    tok = json.loads(src.tokenizer_json)
    vocab = {**tok["model"]["vocab"], **{a["content"]: a["id"] for a in tok["added_tokens"]}}
    tokens = [s for s, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    added = {a["content"] for a in tok["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in added else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(vocab["<|im_end|>"])
    for name, t in src.tensors.items():
        w.add_tensor(name.replace("tok_embd.", "token_embd."), t.load())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cache_repo(cache: Path, repo_id: str, commit: str, files: dict[str, Path], ref: str) -> None:
    """Puts files into the hub cache as one commit of ``repo_id``, named by ``refs/<ref>``."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    for name, file in files.items():
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


@pytest.fixture(scope="module")
def hub_cache(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """org/tiny-qwen (main: 2 layers, v2: 1 layer) and org/tiny-gguf (one GGUF in a folder)."""
    cache = tmp_path_factory.mktemp("hf-hub")
    main, _ = tiny.checkpoint("qwen2")
    v2, _ = tiny.checkpoint("qwen2", layers=1, seed=1)
    cache_repo(cache, "org/tiny-qwen", COMMIT_MAIN, {f: main / f for f in HF_FILES}, "main")
    cache_repo(cache, "org/tiny-qwen", COMMIT_V2, {f: v2 / f for f in HF_FILES}, "v2")
    gguf_file = tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf"
    write_gguf(main, gguf_file)
    cache_repo(cache, "org/tiny-gguf", COMMIT_GGUF, {"f32/tiny-f32.gguf": gguf_file}, "main")
    return cache


def run_build(cache: Path, *args: str | Path, offline_env: bool = True, cwd: Path | None = None):
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home")}
    env.pop("HF_HUB_OFFLINE", None)
    if offline_env:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "build", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trt-spec: error: "), stderr
    return lines[0]


def test_safetensors_hub_id_builds_the_cached_model(hub_cache, tmp_path, tiny) -> None:
    out = tmp_path / "hub.engine"
    r = run_build(hub_cache, "--target", "org/tiny-qwen", "-o", out, "--weights", "f32")
    assert r.returncode == 0, r.stderr
    e = Engine(out)
    assert e.config()["n_layers"] == 2
    meta = e.metadata["models"]["target"]["source"]
    assert meta["format"] == "hf" and meta["path"] == COMMIT_MAIN  # the snapshot folder
    # the same engine tensors as a build from the local folder
    local = tmp_path / "local.engine"
    folder, _ = tiny.checkpoint("qwen2")
    assert run_build(hub_cache, "--target", folder, "-o", local, "--weights", "f32").returncode == 0
    prompt = [1, 2, 3]
    a = e.generate(prompt, max_new_tokens=6, ignore_eos=True).token_ids
    assert a == Engine(local).generate(prompt, max_new_tokens=6, ignore_eos=True).token_ids


def test_revision_picks_the_branch_and_draft_revision_the_drafts(hub_cache, tmp_path) -> None:
    out = tmp_path / "v2.engine"
    r = run_build(
        hub_cache, "--target", "org/tiny-qwen", "--revision", "v2", "-o", out, "--weights", "f32"
    )
    assert r.returncode == 0, r.stderr
    assert Engine(out).config()["n_layers"] == 1
    pair = tmp_path / "pair.engine"
    argv = ["--target", "org/tiny-qwen", "--draft", "org/tiny-qwen", "--draft-revision", "v2"]
    r = run_build(hub_cache, *argv, "--revision", COMMIT_MAIN, "-o", pair, "--weights", "f32")
    assert r.returncode == 0, r.stderr
    e = Engine(pair)
    assert e.config("target")["n_layers"] == 2 and e.config("draft")["n_layers"] == 1


def test_gguf_file_in_a_repository(hub_cache, tmp_path) -> None:
    out = tmp_path / "gguf.engine"
    target = "org/tiny-gguf:f32/tiny-f32.gguf"
    r = run_build(hub_cache, "--target", target, "-o", out, "--weights", "f32")
    assert r.returncode == 0, r.stderr
    source = Engine(out).metadata["models"]["target"]["source"]
    assert source["format"] == "gguf" and source["path"] == "tiny-f32.gguf"
    assert source["name"] == "tiny-gguf"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "org/not-cached"], r"org/not-cached is not in the Hugging Face cache \("),
        (["--target", "org/tiny-qwen", "--revision", "v9"], "at revision 'v9' is not in the"),
        (["--target", "org/tiny-gguf:nope.gguf"], "org/tiny-gguf:nope.gguf is not in the"),
        (["--target", "org/tiny-gguf"], "no config.json, so not a safetensors model"),
        (["--target", "org/tiny-qwen", "--draft", "org/gone"], "org/gone is not in the"),
    ],
)
def test_not_cached_offline_is_one_error_line(hub_cache, tmp_path, args, message) -> None:
    out = tmp_path / "x.engine"
    r = run_build(hub_cache, *args, "-o", out)
    assert r.returncode == 1
    line = one_error_line(r.stderr)
    assert re.search(message, line), line
    if "cache" in message:
        assert "offline mode is on" in line and str(hub_cache) in line
    assert not out.exists()


def test_offline_flag_without_the_environment_variable(hub_cache, tmp_path) -> None:
    out = tmp_path / "x.engine"
    r = run_build(hub_cache, "--target", "org/missing", "--offline", "-o", out, offline_env=False)
    assert r.returncode == 1
    assert "offline mode is on" in one_error_line(r.stderr)
    r = run_build(
        hub_cache, "--target", "org/tiny-qwen", "--offline", "-q", "-o", out, offline_env=False
    )
    assert r.returncode == 0, r.stderr
    assert Engine(out).config()["n_layers"] == 2


def test_precedence_local_path_then_registry_then_hub(hub_cache, tmp_path, tiny, monkeypatch):
    folder, _ = tiny.checkpoint("qwen2")
    local = tmp_path / "org" / "tiny-qwen"  # a folder named like the hub id wins
    local.parent.mkdir()
    local.symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint("org/tiny-qwen") == Path("org/tiny-qwen")
    with pytest.raises(BuildError, match="--revision applies to Hugging Face model ids"):
        resolve_checkpoint("org/tiny-qwen", revision="v2")
    fetched: list[str] = []
    monkeypatch.setattr("trt_spec.models.fetch_model", lambda name, **kw: fetched.append(name))
    resolve_checkpoint("smollm2-135m-instruct-q4_1")  # a registry name, never a hub lookup
    assert fetched == ["smollm2-135m-instruct-q4_1"]
    assert resolve_checkpoint("no/such/path.gguf") == Path("no/such/path.gguf")  # not an id


def test_parse_hub_id() -> None:
    assert parse_hub_id("Qwen/Qwen2.5-Coder-1.5B-Instruct") == (
        "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        None,
    )
    assert parse_hub_id("Qwen/Qwen2.5-0.5B-GGUF:q4/m.gguf") == (
        "Qwen/Qwen2.5-0.5B-GGUF",
        "q4/m.gguf",
    )
    for bad in ("model.gguf", "a/b/c", "/abs/x", "a--b/c", "org/x:file.bin", "./org/x", "org/"):
        assert parse_hub_id(bad) is None, bad
