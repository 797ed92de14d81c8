"""Mutation fuzzing of the file formats trt-spec reads: engine files (the C++ loader) and the
builder's inputs (GGUF through the ``gguf`` package, Hugging Face folders with safetensors).

A case is (target, seed): the seed picks a base input and one to three mutations, so every case
can be replayed alone. :func:`run_case` runs it in-process and classifies the outcome:

* ``accepted``: the input loaded (an engine then generates two tokens) or built;
* ``rejected``: it raised :class:`EngineFileError` or :class:`BuildError`;
* ``unexpected``: any other exception (a bug: the message says which).

A crash or a sanitizer report kills the process; ``build_scripts/fuzz_formats.py`` runs cases in
batches in subprocesses to catch that and names the seed. ``tests/test_fuzz_formats.py`` runs a
few hundred cases in CI.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from engine_file_tools import HEADER_FIELDS, pack_header, parse_header, reserialise
from random_engine import write_random_engine
from trt_spec import BuildError, Engine, EngineFileError, _core, build_engine

TARGETS = ("engine", "gguf", "safetensors")

INTERESTING_INTS = [0, 1, -1, 2, 63, 64, 4095, 4096, 4097, 2**31 - 1, 2**31, 2**32, 2**53 + 1]
INTERESTING_U64 = [0, 1, 8, 63, 64, 4096, 2**32, 2**63, 2**64 - 1, 2**64 - 4096]
TINY = dict(
    arch="qwen2", n_layers=2, dim=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128,
    vocab_size=96, rope_theta=10000.0, rms_eps=1e-6, tied_embeddings=False, qkv_bias=True,
)  # fmt: skip
TINY_LLAMA = {**TINY, "arch": "llama", "qkv_bias": False, "tied_embeddings": True}


@dataclass
class Outcome:
    target: str
    seed: int
    status: str  # accepted | rejected | unexpected | skipped
    detail: str  # the mutations; for rejected / unexpected also the message


# ---- base inputs ------------------------------------------------------------------------------
def make_seeds(root: Path) -> dict[str, list[Path]]:
    """Writes the base inputs once: three engines, a GGUF file and a Hugging Face folder."""
    root.mkdir(parents=True, exist_ok=True)
    engines = [
        write_random_engine(root / "e0.engine", TINY, weights="f32", max_seq_len=32, seed=1),
        write_random_engine(
            root / "e1.engine", TINY, draft=TINY_LLAMA, weights="q4", max_seq_len=32, seed=2
        ),
        write_random_engine(root / "e2.engine", TINY_LLAMA, weights="q8", max_seq_len=32, seed=3),
    ]
    hf = root / "hf"
    if not (hf / "config.json").is_file():
        import tiny_models  # torch and transformers: loaded only when the folder is missing

        tiny_models.make_model(hf, "qwen2", vocab_size=96, hidden=64, heads=4, kv_heads=2, ffn=128)
    write_gguf(root / "seed.gguf", *gguf_description(hf))
    return {"engine": engines, "gguf": [root / "seed.gguf"], "safetensors": [hf]}


def gguf_description(hf: Path) -> tuple[dict[str, Any], list[tuple[str, np.ndarray]]]:
    """The tiny HF checkpoint as GGUF key/values and (name, array) tensors."""
    from safetensors.numpy import load_file

    cfg = json.loads((hf / "config.json").read_text())
    tok = json.loads((hf / "tokenizer.json").read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    for added in tok.get("added_tokens", []):
        vocab.append((added["content"], added["id"]))
    tokens = [t for t, _ in sorted(dict(vocab).items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    kv: dict[str, Any] = {
        "qwen2.context_length": 512,
        "qwen2.embedding_length": cfg["hidden_size"],
        "qwen2.block_count": cfg["num_hidden_layers"],
        "qwen2.feed_forward_length": cfg["intermediate_size"],
        "qwen2.attention.head_count": cfg["num_attention_heads"],
        "qwen2.attention.head_count_kv": cfg["num_key_value_heads"],
        "qwen2.rope.freq_base": 10000.0,
        "qwen2.attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if t.startswith("<|") else 1 for t in tokens],
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.eos_token_id": tokens.index("<|im_end|>"),
    }
    names = {
        "model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
        "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    tensors = []
    for name, arr in sorted(load_file(str(hf / "model.safetensors")).items()):
        stem, kind = name.rsplit(".", 1)
        if stem.startswith("model.layers."):
            _, _, layer, rest = stem.split(".", 3)
            stem = f"blk.{layer}.{names[rest]}"
        else:
            stem = names[stem]
        tensors.append((f"{stem}.{kind}", arr.astype(np.float32)))
    return kv, tensors


def write_gguf(path: Path, kv: dict[str, Any], tensors: list[tuple[str, np.ndarray]]) -> Path:
    w = gguf.GGUFWriter(str(path), "qwen2")
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_int64(key, value) if not 0 <= value < 2**32 else w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---- generic mutations --------------------------------------------------------------------------
def _any_value(rnd: random.Random) -> Any:
    return rnd.choice(
        [None, True, "", "x" * rnd.randint(1, 40), [], {}, [1, 2], {"a": 1}, 1.5, -0.0, 1e308]
        + INTERESTING_INTS
        + [-(2**63), 2**64 + 5]
    )


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k != "json":  # the tokenizer's own JSON string: mutated as text below
                out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:8]):
            out += _paths(v, (*prefix, i))
    return out


def mutate_tree(doc: Any, rnd: random.Random) -> str:
    """One edit somewhere in a JSON-like tree: delete, retype, replace a number, rename."""
    path = rnd.choice(_paths(doc)[1:] or [()])
    if not path:
        return "noop"
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    key, old = path[-1], parent[path[-1]]
    op = rnd.choice(["delete", "value", "int", "int", "nudge", "rename", "wrap"])
    if op == "delete":
        del parent[key]
    elif op == "value":
        parent[key] = _any_value(rnd)
    elif op == "int" or not isinstance(old, int | float) or isinstance(old, bool):
        op = "int"
        parent[key] = rnd.choice(INTERESTING_INTS + [-(2**40), 2**40])
    elif op == "nudge":
        parent[key] = old + rnd.choice([-1, 1, -64, 64, 4096]) * rnd.choice([1, 1, 2**20])
    elif op == "rename" and isinstance(parent, dict):
        parent[f"{key}_"] = parent.pop(key)
    else:
        parent[key] = [old]
    return f"{op}:{'/'.join(map(str, path))}"


def mutate_bytes(data: bytes, rnd: random.Random, lo: int = 0, hi: int | None = None) -> bytes:
    """Byte-level edits in [lo, hi): flips, overwrites with interesting values, cut, splice."""
    b = bytearray(data)
    hi = len(b) if hi is None else min(hi, len(b))
    if hi <= lo:
        return bytes(b)
    op = rnd.choice(["flip", "flip", "u64", "u32", "cut", "insert", "delete"])
    at = rnd.randrange(lo, hi)
    if op == "flip":
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(lo, hi)] ^= 1 << rnd.randrange(8)
    elif op in ("u64", "u32") and at + 8 <= len(b):
        fmt = "<Q" if op == "u64" else "<I"
        value = rnd.choice(INTERESTING_U64) % (2 ** (struct.calcsize(fmt) * 8))
        struct.pack_into(fmt, b, at, value)
    elif op == "cut":
        del b[at:]
    elif op == "insert":
        b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
    else:
        del b[at : at + rnd.randint(1, 64)]
    return bytes(b)


# ---- engine files -------------------------------------------------------------------------------
def mutate_engine(raw: bytes, rnd: random.Random) -> tuple[bytes, str]:
    h = parse_header(raw)
    meta = json.loads(raw[h["json_offset"] : h["json_offset"] + h["json_bytes"]])
    op = rnd.choice(["header", "truncate", "bytes", "meta", "meta", "tensor", "tensor", "text",
                     "data"])  # fmt: skip
    if op == "header":
        field = rnd.choice(HEADER_FIELDS[1:])
        h[field] = rnd.choice(
            [*INTERESTING_U64, h[field] + rnd.randint(-64, 64), len(raw) + rnd.randint(-9, 9)]
        ) % (2**32 if field in ("version", "flags") else 2**64)
        return pack_header(h) + raw[_core.ENGINE_HEADER_BYTES :], f"header:{field}={h[field]}"
    if op == "truncate":
        cut = rnd.choice([rnd.randrange(len(raw)), h["json_offset"], h["data_offset"], 63, 64])
        return raw[:cut], f"truncate:{cut}"
    if op == "bytes":
        return mutate_bytes(raw, rnd), "bytes"
    if op in ("meta", "tensor"):
        if op == "tensor":
            role = rnd.choice(sorted(meta["models"]))
            name = rnd.choice(sorted(meta["models"][role]["tensors"]))
            t = meta["models"][role]["tensors"][name]
            fld = rnd.choice(["offset", "bytes", "shape", "type", "checksum", "shape"])
            t[fld] = rnd.choice(
                {
                    "offset": [0, 64, t["offset"] + 64, t["offset"] - 64, 2**63, h["data_bytes"]],
                    "bytes": [0, t["bytes"] - 64, t["bytes"] + 64, 2**62, -t["bytes"]],
                    "shape": [[], [0], [1, 2, 3], [t["shape"][-1]], [2**31, 2**31], [-1, 64]],
                    "type": ["f16", "q4", "q8", "bf16", "f64", 7],
                    "checksum": ["", "0" * 16, "g" * 16, t["checksum"][::-1], "1" * 17],
                }[fld]
            )
            what = f"tensor:{role}/{name}.{fld}={t[fld]!r}"[:120]
        else:
            what = mutate_tree(meta, rnd)
        return reserialise(raw, meta), what
    if op == "text":
        text = raw[h["json_offset"] : h["json_offset"] + h["json_bytes"]]
        return reserialise(raw, text=mutate_bytes(text, rnd)), "json-text"
    # Tensor bytes changed and their checksum rewritten: the loader accepts, generation runs.
    role = rnd.choice(sorted(meta["models"]))
    name = rnd.choice(sorted(meta["models"][role]["tensors"]))
    t = meta["models"][role]["tensors"][name]
    start = h["data_offset"] + t["offset"]
    blob = bytearray(raw[start : start + t["bytes"]])
    fill = rnd.choice([b"\xff", b"\x00", b"\x7f\x80", b"\x00\x7c", b"\x7f\xff\xff\xff"])
    for _ in range(rnd.randint(1, 32)):
        at = rnd.randrange(0, max(1, len(blob) - len(fill)))
        blob[at : at + len(fill)] = fill
    t["checksum"] = f"{_core.checksum64(np.frombuffer(bytes(blob), np.uint8)):016x}"
    out = bytearray(raw)
    out[start : start + len(blob)] = blob
    return reserialise(bytes(out), meta), f"data:{role}/{name}"


def _engine_case(seeds: list[Path], work: Path, rnd: random.Random) -> tuple[str, Callable]:
    raw = rnd.choice(seeds).read_bytes()
    what = []
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        if len(raw) < _core.ENGINE_HEADER_BYTES:
            break
        try:
            raw, w = mutate_engine(raw, rnd)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            break  # the previous mutation left nothing this one can parse: load what we have
        what.append(w)
    path = work / "case.engine"
    path.write_bytes(raw)
    verify = rnd.random() < 0.9

    def load() -> None:
        Engine(path, n_threads=1, verify=verify).generate("<t1> <t2>", max_new_tokens=2)

    return "; ".join(what) + ("" if verify else " (verify=False)"), load


# ---- builder inputs -----------------------------------------------------------------------------
def _gguf_case(seed: Path, work: Path, rnd: random.Random) -> str:
    path = work / "case.gguf"
    if rnd.random() < 0.5:  # a semantic edit, written by gguf's own writer
        kv, tensors = gguf_description(seed.parent / "hf")
        what = []
        for _ in range(rnd.randint(1, 2)):
            if rnd.random() < 0.6:
                what.append(mutate_tree(kv, rnd))
            else:
                i = rnd.randrange(len(tensors))
                name, arr = tensors[i]
                op = rnd.choice(["drop", "shape", "dtype", "rename"])
                if op == "drop":
                    tensors.pop(i)
                elif op == "shape":
                    tensors[i] = (name, arr.reshape(-1)[: rnd.choice([1, 64, arr.size // 2])])
                elif op == "dtype":
                    tensors[i] = (name, arr.astype(rnd.choice([np.float16, np.int32, np.int8])))
                else:
                    tensors[i] = (name + ".x", arr)
                what.append(f"tensor:{name}:{op}")
        write_gguf(path, kv, tensors)
        return "; ".join(what)
    data = seed.read_bytes()
    for _ in range(rnd.randint(1, 3)):
        lo, hi = rnd.choice([(0, 24), (24, 4096), (0, len(data))])
        data = mutate_bytes(data, rnd, lo, hi)
    path.write_bytes(data)
    return "gguf-bytes"


def _hf_case(seed: Path, work: Path, rnd: random.Random) -> str:
    folder = work / "hf"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(seed, folder)
    which = rnd.choice(["st-header", "st-json", "st-bytes", "config", "config", "tokenizer"])
    if which == "config":
        cfg = json.loads((folder / "config.json").read_text())
        what = mutate_tree(cfg, rnd)
        (folder / "config.json").write_text(json.dumps(cfg))
        return f"config:{what}"
    if which == "tokenizer":
        p = folder / "tokenizer.json"
        p.write_bytes(mutate_bytes(p.read_bytes(), rnd))
        return "tokenizer-bytes"
    st = folder / "model.safetensors"
    data = st.read_bytes()
    n = int.from_bytes(data[:8], "little")
    if which == "st-header":
        data = mutate_bytes(data, rnd, 0, 8)
    elif which == "st-bytes":
        data = mutate_bytes(data, rnd, 0, 8 + n + 64)
    else:
        header = json.loads(data[8 : 8 + n])
        name = rnd.choice(sorted(k for k in header if k != "__metadata__"))
        fld = rnd.choice(["dtype", "shape", "data_offsets", "data_offsets"])
        old = header[name][fld]
        if fld == "dtype":
            header[name][fld] = rnd.choice(["F16", "BF16", "I64", "F64", "BOOL", "XX"])
        elif fld == "shape":
            header[name][fld] = rnd.choice(
                [[], [0], [old[0]], [old[0] * 2, 1], [-1, 2], [2**40, 2**40]]
            )
        else:
            header[name][fld] = rnd.choice(
                [[0, 0], [old[1], old[0]], [old[0], old[1] + 4], [0, 2**62]]
            )
        text = json.dumps(header).encode()
        data = len(text).to_bytes(8, "little") + text + data[8 + n :]
        return f"st-json:{name}.{fld}={header[name][fld]}"
    st.write_bytes(data)
    return which


def _build_case(
    target: str, seeds: list[Path], work: Path, rnd: random.Random
) -> tuple[str, Callable]:
    seed = rnd.choice(seeds)
    if target == "gguf":
        what, src = _gguf_case(seed, work, rnd), work / "case.gguf"
    else:
        what, src = _hf_case(seed, work, rnd), work / "hf"
    out = work / "built.engine"
    weights = rnd.choice(["f32", "q8", "q4"])

    def build() -> None:
        out.unlink(missing_ok=True)
        build_engine(src, out, weights=weights, max_seq_len=32)
        Engine(out, n_threads=1).generate("hello", max_new_tokens=2)

    return f"{what} ({weights})", build


# ---- one case -----------------------------------------------------------------------------------
def run_case(target: str, seed: int, seeds: dict[str, list[Path]], work: Path) -> Outcome:
    """Runs case (target, seed) in-process; only a crash escapes (and kills the process).

    A mutation that even the writers refuse (gguf's writer given a value it cannot encode) makes
    a ``skipped`` case: there is no input to load.
    """
    rnd = random.Random(f"{target}:{seed}")
    work.mkdir(parents=True, exist_ok=True)
    try:
        if target == "engine":
            what, action = _engine_case(seeds["engine"], work, rnd)
        else:
            what, action = _build_case(target, seeds[target], work, rnd)
    except Exception as e:  # noqa: BLE001
        return Outcome(target, seed, "skipped", f"{type(e).__name__}: {e}"[:200])
    try:
        action()
        return Outcome(target, seed, "accepted", what)
    except (EngineFileError, BuildError) as e:
        return Outcome(target, seed, "rejected", f"{what}: {type(e).__name__}: {e}"[:400])
    except Exception as e:  # noqa: BLE001 - anything else is the bug being looked for
        return Outcome(target, seed, "unexpected", f"{what}: {type(e).__name__}: {e}"[:600])
