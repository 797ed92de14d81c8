"""Bad builder inputs raise BuildError (or EngineFileError) with a specific message.

Unsupported architectures and GGUF tensor types, malformed checkpoints, bad options, draft
tokenizers that do not match, and a build that fails midway (which must leave no partial file
and must not touch an older engine at the same path).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny_models
from engine_file_tools import GGUF_Q, SEQ
from trt_spec import BuildError, Engine, build_engine
from trt_spec.builder import builder as builder_mod


# ---- builder ----------------------------------------------------------------------------------
def _write_gguf(path: Path, arch: str, tensors, kv: Callable | None = None) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    if kv is not None:
        kv(w)
    for name, arr, raw_dtype in tensors:
        if raw_dtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _copy_checkpoint(tiny, dst: Path) -> Path:
    folder, _ = tiny.checkpoint("qwen2")
    shutil.copytree(folder, dst)
    return dst


def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


def test_build_unsupported_hf_architecture(tiny, tmp_path):
    folder = _copy_checkpoint(tiny, tmp_path / "gpt2-hf")
    _edit_config(folder, model_type="gpt2")
    with pytest.raises(BuildError, match=r"unsupported architecture 'gpt2' \(supported: qwen2"):
        build_engine(folder, tmp_path / "x.engine", weights="f32")
    assert not (tmp_path / "x.engine").exists()


def test_build_unsupported_gguf_architecture(tmp_path):
    path = _write_gguf(
        tmp_path / "gpt2.gguf", "gpt2", [("token_embd.weight", np.zeros((4, 8), np.float32), None)]
    )
    with pytest.raises(BuildError, match=r"gpt2\.gguf: unsupported architecture 'gpt2'"):
        build_engine(path, tmp_path / "x.engine")


@pytest.mark.parametrize("qtype", [GGUF_Q.IQ2_XXS, GGUF_Q.Q8_1, GGUF_Q.IQ4_NL])
def test_build_unsupported_gguf_tensor_type(tmp_path, qtype):
    block, type_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw_bytes = np.zeros((2, type_bytes * (256 // block)), dtype=np.uint8)  # 2 x 256 weights
    path = _write_gguf(tmp_path / "q.gguf", "qwen2", [("token_embd.weight", raw_bytes, qtype)])
    with pytest.raises(
        BuildError, match=rf"tensor token_embd\.weight has type {qtype.name}, which trt-spec"
    ):
        build_engine(path, tmp_path / "x.engine")


def test_build_gguf_missing_metadata(tmp_path):
    path = _write_gguf(
        tmp_path / "bare.gguf", "qwen2", [("token_embd.weight", np.zeros((4, 8), np.float32), None)]
    )
    with pytest.raises(BuildError, match=r"GGUF metadata lacks qwen2\.embedding_length"):
        build_engine(path, tmp_path / "x.engine")


def test_build_missing_path(tmp_path):
    with pytest.raises(BuildError, match=r"no such file or folder"):
        build_engine(tmp_path / "does-not-exist", tmp_path / "x.engine")


def test_build_text_file(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("just some notes\n")
    with pytest.raises(BuildError, match=r"neither a GGUF file nor a Hugging Face model folder"):
        build_engine(p, tmp_path / "x.engine")


def test_build_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match=r"empty: no config\.json"):
        build_engine(tmp_path / "empty", tmp_path / "x.engine")


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"weights": "q3"}, r"unknown weight format 'q3' \(choose from f32, f16, bf16, q8, q4\)"),
        ({"weights": "Q4"}, r"unknown weight format 'Q4'"),
        ({"max_batch": 0}, r"max_batch must be in \[1, 64\], got 0"),
        ({"max_batch": -3}, r"max_batch must be in \[1, 64\], got -3"),
        ({"max_batch": 65}, r"max_batch must be in \[1, 64\], got 65"),
        ({"max_seq_len": 513}, r"max_seq_len must be in \[1, 512\] \(the target's context\)"),
        ({"max_seq_len": 0}, r"max_seq_len must be in \[1, 512\].*got 0"),
    ],
)
def test_build_bad_options(tiny, tmp_path, kwargs, pattern):
    folder, _ = tiny.checkpoint("qwen2")
    with pytest.raises(BuildError, match=pattern):
        build_engine(folder, tmp_path / "x.engine", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_build_output_is_a_folder_or_has_no_parent(tiny, tmp_path):
    folder, _ = tiny.checkpoint("qwen2")
    (tmp_path / "out").mkdir()
    with pytest.raises(BuildError, match=r"is a folder"):
        build_engine(folder, tmp_path / "out", weights="f32")
    with pytest.raises(BuildError, match=r"output folder .* does not exist"):
        build_engine(folder, tmp_path / "nowhere" / "x.engine", weights="f32")


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


MALFORMED_HF: list[tuple[str, Callable[[Path], None]]] = [
    ("config-not-json", lambda d: (d / "config.json").write_text("{oops")),
    ("config-missing-hidden-size", lambda d: _edit_config(d, hidden_size=None)),
    ("safetensors-truncated", lambda d: _truncate(d / "model.safetensors")),
    ("safetensors-garbage", lambda d: (d / "model.safetensors").write_bytes(b"\xff" * 64)),
    ("tokenizer-not-json", lambda d: (d / "tokenizer.json").write_text("{oops")),
]


@pytest.mark.parametrize("damage", [c[1] for c in MALFORMED_HF], ids=[c[0] for c in MALFORMED_HF])
def test_build_malformed_hf_checkpoint(tiny, tmp_path, damage):
    """A damaged checkpoint is a BuildError naming the checkpoint (not KeyError, OverflowError,
    SafetensorError or a bare JSONDecodeError), and leaves nothing behind."""
    folder = _copy_checkpoint(tiny, tmp_path / "broken-ckpt")
    damage(folder)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BuildError, match=r"broken-ckpt"):
        build_engine(folder, out / "x.engine", weights="f32", max_seq_len=SEQ)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("keep", [4, 24, 0.5])
def test_build_truncated_gguf(tmp_path, keep):
    """A cut-off GGUF is a BuildError (today gguf's reader raises IndexError/ValueError)."""
    path = _write_gguf(
        tmp_path / "cut.gguf",
        "qwen2",
        [("token_embd.weight", np.ones((4, 64), np.float32), None)],
        kv=lambda w: w.add_context_length(512),
    )
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    path.write_bytes(data[:n])
    with pytest.raises(BuildError, match=r"cut\.gguf"):
        build_engine(path, tmp_path / "x.engine")


def _vocab_by_id(folder: Path) -> list[str | None]:
    doc = json.loads((folder / "tokenizer.json").read_text())
    vocab = dict(doc["model"]["vocab"])
    vocab.update({t["content"]: t["id"] for t in doc.get("added_tokens", [])})
    out: list[str | None] = [None] * (max(vocab.values()) + 1)
    for s, i in vocab.items():
        out[i] = s
    return out


def test_build_draft_tokenizer_swapped_ids(tiny, tmp_path):
    target, _ = tiny.checkpoint("qwen2")
    draft = _copy_checkpoint(tiny, tmp_path / "draft")
    doc = json.loads((draft / "tokenizer.json").read_text())
    vocab = doc["model"]["vocab"]
    by_id = {i: s for s, i in vocab.items()}
    a, b = by_id[300], by_id[301]
    vocab[a], vocab[b] = 301, 300
    (draft / "tokenizer.json").write_text(json.dumps(doc))
    out = tmp_path / "pair.engine"
    pattern = (
        rf"tokenizers differ: token id 300 is {re.escape(repr(a))} in the target and "
        rf"{re.escape(repr(b))} in the draft"
    )
    with pytest.raises(BuildError, match=pattern):
        build_engine(target, out, draft=draft, weights="f32", max_seq_len=SEQ)
    assert not out.exists()


def test_build_draft_tokenizer_other_vocab(tiny, tmp_path):
    target, _ = tiny.checkpoint("qwen2")
    draft = _copy_checkpoint(tiny, tmp_path / "draft")
    tiny_models.make_tokenizer(draft, 300)
    a, b = _vocab_by_id(target), _vocab_by_id(draft)
    assert a != b
    first = next(
        i
        for i in range(max(len(a), len(b)))
        if (a[i] if i < len(a) else None) != (b[i] if i < len(b) else None)
    )
    with pytest.raises(BuildError, match=rf"tokenizers differ: token id {first} is "):
        build_engine(target, tmp_path / "pair.engine", draft=draft, weights="f32", max_seq_len=SEQ)


def test_build_draft_matching_tokenizer_is_accepted(tiny, tmp_path):
    """Control for the two tests above: the same tokenizer passes the check."""
    target, _ = tiny.checkpoint("qwen2")
    out = tmp_path / "pair.engine"
    report = build_engine(target, out, draft=target, weights="f32", max_seq_len=SEQ)
    assert set(report.models) == {"target", "draft"}
    assert Engine(out).has_draft


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "over-older-engine"])
def test_failed_build_leaves_no_partial_engine(tiny, tmp_path, monkeypatch, engine_path, existing):
    folder, _ = tiny.checkpoint("qwen2")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "model.engine"
    if existing:
        shutil.copyfile(engine_path, out)
    before = out.read_bytes() if existing else None
    seen_partial: list[list[str]] = []
    real_open = builder_mod.open_source

    def broken_open(path):
        src = real_open(path)
        name = "blk.1.ffn_down.weight"  # late in the plan: earlier tensors are on disk by now

        def boom():
            seen_partial.append(_leftovers(out_dir))
            raise OSError("injected read failure")

        src.tensors[name] = dataclasses.replace(src.tensors[name], load=boom)
        return src

    monkeypatch.setattr(builder_mod, "open_source", broken_open)
    with pytest.raises(BuildError, match="blk.1.ffn_down.weight.*injected read failure"):
        build_engine(folder, out, weights="q8", max_seq_len=SEQ)
    # The build did get midway: its hidden partial file existed when the load failed ...
    assert len(seen_partial) == 1
    assert any(n.startswith(".model.engine.partial-") for n in seen_partial[0])
    # ... and is gone now; an older engine at the path is untouched and still loads.
    if existing:
        assert _leftovers(out_dir) == ["model.engine"]
        assert out.read_bytes() == before
        assert Engine(out).weights == "f32"
    else:
        assert _leftovers(out_dir) == []
