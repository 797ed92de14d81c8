"""Tokenizer conversion at build time: GGUF metadata or a Hugging Face folder -> a `tokenizers`
JSON string and the special-token dict, which the engine file stores for the runtime codec
(:class:`trt_spec.tokenizer.TextCodec`).

* :func:`tokenizer_json_from_gguf` / :func:`special_tokens_from_gguf` turn a GGUF file's metadata
  (read by :func:`trt_spec.builder.gguf_source.gguf_fields`) into a byte-level BPE
  ``tokenizer.json`` and the special-token dict.
* :func:`tokenizer_json_from_hf` does the same for a Hugging Face model folder.

The special-token dict has the keys ``bos_id``, ``eos_id``, ``pad_id``, ``unk_id`` (int or None),
``chat_template`` (str or None), ``add_bos``, ``add_eos`` (bool) and ``eog_ids`` (sorted list of
ids that end generation: EOS plus end-of-turn tokens such as ``<|im_end|>``, ``<|endoftext|>``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trt_spec.tokenizer import bytes_to_unicode

__all__ = [
    "PRE_TOKENIZERS",
    "special_tokens_from_gguf",
    "tokenizer_json_from_gguf",
    "tokenizer_json_from_hf",
]

# llama.cpp token types (tokenizer.ggml.token_type)
_TT_CONTROL = 3
_TT_USER_DEFINED = 4

# Texts of tokens that end a turn (llama.cpp's end-of-generation list); used only when the token
# is a control/special token.
_EOG_TEXTS = frozenset(
    [
        *"<|eot_id|> <|im_end|> <|end|> <|return|> <|call|> <end_of_turn> <|endoftext|>".split(),
        *"<|eom_id|> <EOT> _<EOT> <|end_of_text|> <end_of_utterance>".split(),
        "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek
    ]
)

# ---------------------------------------------------------------------------------------------
# Pre-tokenizers, keyed by `tokenizer.ggml.pre` (regexes as in llama.cpp's llama-vocab.cpp and
# the models' own tokenizer.json files).

_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _byte_level(use_regex: bool) -> dict[str, Any]:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": use_regex,
    }


def _split_then_bytes(regex: str) -> dict[str, Any]:
    split = {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
    return {"type": "Sequence", "pretokenizers": [split, _byte_level(False)]}


# GPT-2 regex ('s|'t|...| ?\p{L}+| ?\p{N}+|...) is what ByteLevel(use_regex=True) applies.
_GPT2 = _byte_level(True)
# StarCoder-style (SmolLM, StarCoder, Refact, CodeShell): every digit alone, then the GPT-2 regex.
_DIGITS_GPT2 = {
    "type": "Sequence",
    "pretokenizers": [{"type": "Digits", "individual_digits": True}, _byte_level(True)],
}

PRE_TOKENIZERS: dict[str, dict[str, Any]] = {
    "qwen2": _split_then_bytes(_QWEN2_SPLIT),
    "deepseek-r1-qwen": _split_then_bytes(_QWEN2_SPLIT),
    "stablelm2": _split_then_bytes(_QWEN2_SPLIT),
    "smollm": _DIGITS_GPT2,
    "starcoder": _DIGITS_GPT2,
    "refact": _DIGITS_GPT2,
    "codeshell": _DIGITS_GPT2,
    "gpt-2": _GPT2,
    "mpt": _GPT2,
    "olmo": _GPT2,
    "llama3": _split_then_bytes(_LLAMA3_SPLIT),
    "llama-bpe": _split_then_bytes(_LLAMA3_SPLIT),
    "llama-v3": _split_then_bytes(_LLAMA3_SPLIT),
    "smaug-bpe": _split_then_bytes(_LLAMA3_SPLIT),
    "dbrx": _split_then_bytes(_LLAMA3_SPLIT),
}


# ---------------------------------------------------------------------------------------------
# GGUF -> tokenizer.json


_ADDED_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _template_processor(bos: tuple[str, int] | None, eos: tuple[str, int] | None) -> dict | None:
    """A TemplateProcessing post-processor adding BOS and/or EOS, or None when neither is added."""
    if bos is None and eos is None:
        return None

    def seq(name: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = [{"Sequence": {"id": name, "type_id": 0}}]
        if bos is not None:
            items.insert(0, {"SpecialToken": {"id": bos[0], "type_id": 0}})
        if eos is not None:
            items.append({"SpecialToken": {"id": eos[0], "type_id": 0}})
        return items

    special = {s[0]: {"id": s[0], "ids": [s[1]], "tokens": [s[0]]} for s in (bos, eos) if s}
    return {
        "type": "TemplateProcessing",
        "single": seq("A"),
        "pair": seq("A") + seq("B"),
        "special_tokens": special,
    }


def tokenizer_json_from_gguf(fields: dict[str, object]) -> str:
    """Build a `tokenizers` JSON (byte-level BPE) from GGUF tokenizer metadata.

    Control tokens become special added tokens, user-defined tokens plain added tokens (both are
    matched whole in input text). The pre-tokenizer follows ``tokenizer.ggml.pre``; an unknown
    value, or a non-``gpt2`` tokenizer model, raises ValueError.
    """
    model = fields.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(
            f"only byte-level BPE ('gpt2') GGUF tokenizers are supported, got {model!r}"
        )
    pre = str(fields.get("tokenizer.ggml.pre", "default"))
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"unknown GGUF pre-tokenizer {pre!r}; supported: {', '.join(sorted(PRE_TOKENIZERS))}"
        )
    tokens = [str(t) for t in fields["tokenizer.ggml.tokens"]]  # type: ignore[attr-defined]
    types = list(fields.get("tokenizer.ggml.token_type") or [1] * len(tokens))  # type: ignore[call-overload]
    if len(types) != len(tokens):
        raise ValueError("tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length")
    merges = [m.split(" ", 1) for m in fields.get("tokenizer.ggml.merges") or []]  # type: ignore[attr-defined]

    alphabet = set(bytes_to_unicode().values())
    spell = bytes_to_unicode()
    vocab: dict[str, int] = {}
    added: list[dict[str, Any]] = []
    for index, (token, ttype) in enumerate(zip(tokens, types, strict=False)):
        in_alphabet = set(token) <= alphabet
        key = token if in_alphabet else "".join(spell[b] for b in token.encode("utf-8"))
        vocab.setdefault(key, index)
        # A control token outside the byte alphabet is a mislabel (llama.cpp/transformers skip it).
        special = ttype == _TT_CONTROL and in_alphabet
        if special or ttype == _TT_USER_DEFINED:
            added.append({"id": index, "content": token, **_ADDED_FLAGS, "special": special})

    def special_of(key: str) -> tuple[str, int] | None:
        index = _int_or_none(fields.get(f"tokenizer.ggml.{key}"))
        return None if index is None or not 0 <= index < len(tokens) else (tokens[index], index)

    add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", False))
    add_eos = bool(fields.get("tokenizer.ggml.add_eos_token", False))
    post = _template_processor(
        special_of("bos_token_id") if add_bos else None,
        special_of("eos_token_id") if add_eos else None,
    )
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": post,
        "decoder": {**_byte_level(True), "add_prefix_space": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    return json.dumps(doc, ensure_ascii=False)


def special_tokens_from_gguf(fields: dict[str, object]) -> dict[str, Any]:
    """Special token ids, chat template and BOS/EOS flags from GGUF metadata (see module doc)."""
    tokens: list[str] = list(fields.get("tokenizer.ggml.tokens") or [])  # type: ignore[call-overload]
    types: list[int] = list(fields.get("tokenizer.ggml.token_type") or [])  # type: ignore[call-overload]

    def tid(key: str) -> int | None:
        return _int_or_none(fields.get(f"tokenizer.ggml.{key}"))

    eos = tid("eos_token_id")
    eog = {i for i in (eos, tid("eot_token_id"), tid("eom_token_id")) if i is not None}
    eog.update(
        i
        for i, (t, ty) in enumerate(zip(tokens, types, strict=False))
        if ty == _TT_CONTROL and t in _EOG_TEXTS
    )
    template = fields.get("tokenizer.chat_template")
    return {
        "bos_id": tid("bos_token_id"),
        "eos_id": eos,
        "pad_id": tid("padding_token_id"),
        "unk_id": tid("unknown_token_id"),
        "chat_template": None if template is None else str(template),
        "add_bos": bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos": bool(fields.get("tokenizer.ggml.add_eos_token", False)),
        "eog_ids": sorted(eog),
    }


# ---------------------------------------------------------------------------------------------
# Hugging Face folder


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: invalid JSON ({e})") from e


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: object) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]  # type: ignore[call-overload]


def _chat_template_from_hf(folder: Path, config: dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default", next(iter(named.values()), None))
    if isinstance(template, str):
        return template
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    return _read_json(folder / "chat_template.json").get("chat_template")


def _post_processor_adds_bos(post: dict[str, Any] | None) -> bool:
    if not post:
        return False
    if post.get("type") == "Sequence":
        return any(_post_processor_adds_bos(p) for p in post.get("processors", []))
    single = post.get("single") if post.get("type") == "TemplateProcessing" else None
    return bool(single) and "SpecialToken" in single[0]


def tokenizer_json_from_hf(folder: Path) -> tuple[str, dict[str, Any]]:
    """``(tokenizer.json text as-is, special-token dict)`` for a Hugging Face model folder."""
    folder = Path(folder)
    text = (folder / "tokenizer.json").read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{folder / 'tokenizer.json'}: invalid JSON ({e})") from e
    lookup: dict[str, int] = dict(doc.get("model", {}).get("vocab") or {})
    if not isinstance(doc.get("model", {}).get("vocab"), dict):  # e.g. Unigram: list of pairs
        lookup = {}
    special_added = {t["content"]: t["id"] for t in doc.get("added_tokens", []) if t.get("special")}
    lookup.update({t["content"]: t["id"] for t in doc.get("added_tokens", [])})
    tok_cfg = _read_json(folder / "tokenizer_config.json")
    gen_cfg = _read_json(folder / "generation_config.json")
    model_cfg = _read_json(folder / "config.json")

    def resolve(name: str) -> int | None:
        text_value = _token_text(tok_cfg.get(f"{name}_token"))
        if text_value is not None and text_value in lookup:
            return lookup[text_value]
        for cfg in (gen_cfg, model_cfg):
            ids = _ids(cfg.get(f"{name}_token_id"))
            if ids:
                return ids[0]
        return None

    eos = resolve("eos")
    eog = set(_ids(eos))
    eog.update(_ids(gen_cfg.get("eos_token_id")) + _ids(model_cfg.get("eos_token_id")))
    eog.update(i for t, i in special_added.items() if t in _EOG_TEXTS)
    add_bos = tok_cfg.get("add_bos_token")
    if add_bos is None:
        add_bos = _post_processor_adds_bos(doc.get("post_processor"))
    special = {
        "bos_id": resolve("bos"),
        "eos_id": eos,
        "pad_id": resolve("pad"),
        "unk_id": resolve("unk"),
        "chat_template": _chat_template_from_hf(folder, tok_cfg),
        "add_bos": bool(add_bos),
        "add_eos": bool(tok_cfg.get("add_eos_token", False)),
        "eog_ids": sorted(eog),
    }
    return text, special
