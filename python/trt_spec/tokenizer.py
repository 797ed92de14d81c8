"""Tokenizer layer: GGUF or Hugging Face tokenizers -> `tokenizers` JSON, codec, chat template.

The engine file stores a Hugging Face ``tokenizer.json`` string, a chat template and the special
token ids, so the runtime needs only the ``tokenizers`` library and ``jinja2``, never transformers.

* :func:`gguf_metadata` reads a GGUF file's metadata into a plain dict (``gguf``'s public API).
* :func:`tokenizer_json_from_gguf` / :func:`special_tokens_from_gguf` turn that metadata into a
  byte-level BPE ``tokenizer.json`` and the special-token dict.
* :func:`tokenizer_json_from_hf` does the same for a Hugging Face model folder.
* :class:`TextCodec` encodes, decodes, renders chat templates and makes :class:`StreamDecoder`\\ s.

The special-token dict has the keys ``bos_id``, ``eos_id``, ``pad_id``, ``unk_id`` (int or None),
``chat_template`` (str or None), ``add_bos``, ``add_eos`` (bool) and ``eog_ids`` (sorted list of
ids that end generation: EOS plus end-of-turn tokens such as ``<|im_end|>``, ``<|endoftext|>``).
"""

from __future__ import annotations

import codecs
import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PRE_TOKENIZERS",
    "StreamDecoder",
    "TextCodec",
    "gguf_metadata",
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


@lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in _bytes_to_unicode().items()}


# ---------------------------------------------------------------------------------------------
# GGUF metadata


def gguf_metadata(path: str | Path) -> dict[str, Any]:
    """All key/value metadata of a GGUF file as plain Python values (str, int, float, bool, list).

    Read with the ``gguf`` package's public API only (``GGUFReader`` and its fields' ``parts``
    and ``data``). Tensor data is not read (the file is memory-mapped). The reader's own
    ``GGUF.*`` bookkeeping entries are left out.
    """
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(str(path), "r")
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or not field.types:
            continue
        main = field.types[0]
        if main == GGUFValueType.ARRAY:
            sub = field.types[-1] if len(field.types) > 1 else None
            if not field.data:
                out[name] = []
            elif sub == GGUFValueType.STRING:
                parts = field.parts
                out[name] = [parts[i].tobytes().decode("utf-8") for i in field.data]
            elif sub == GGUFValueType.ARRAY:
                out[name] = field.contents()
            else:
                values = np.concatenate([field.parts[i] for i in field.data]).tolist()
                out[name] = [bool(v) for v in values] if sub == GGUFValueType.BOOL else values
        elif main == GGUFValueType.STRING:
            out[name] = field.parts[-1].tobytes().decode("utf-8")
        else:
            value = field.parts[-1][0].item()
            out[name] = bool(value) if main == GGUFValueType.BOOL else value
    return out


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

    alphabet = set(_unicode_to_bytes())
    spell = _bytes_to_unicode()
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


# ---------------------------------------------------------------------------------------------
# Runtime codec


@lru_cache(maxsize=16)
def _compile_template(source: str) -> Any:
    """Compile a chat template the way transformers does (sandboxed, trim/lstrip blocks)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class TextCodec:
    """Encode/decode text with a `tokenizers` JSON plus the special-token dict."""

    def __init__(self, tokenizer_json: str, special: dict[str, Any]) -> None:
        from tokenizers import Tokenizer, decoders

        self._tok = Tokenizer.from_str(tokenizer_json)
        self.special = dict(special)
        self.bos_id: int | None = special.get("bos_id")
        self.eos_id: int | None = special.get("eos_id")
        self.pad_id: int | None = special.get("pad_id")
        self.add_bos = bool(special.get("add_bos", False))
        self.add_eos = bool(special.get("add_eos", False))
        self.eog_ids: list[int] = list(special.get("eog_ids") or [])
        self.chat_template: str | None = special.get("chat_template")
        added = self._tok.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        self.vocab_size = max(self._tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        self.byte_level = isinstance(self._tok.decoder, decoders.ByteLevel)
        self._token_bytes: list[bytes] | None = None

    @classmethod
    def from_gguf(cls, path: str | Path) -> TextCodec:
        fields = gguf_metadata(path)
        return cls(tokenizer_json_from_gguf(fields), special_tokens_from_gguf(fields))

    @classmethod
    def from_hf(cls, folder: str | Path) -> TextCodec:
        return cls(*tokenizer_json_from_hf(Path(folder)))

    @property
    def tokenizer(self) -> Any:
        """The underlying `tokenizers.Tokenizer`."""
        return self._tok

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Token ids of `text`; special-token text in it is matched. BOS only when add_bos."""
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        if add_special and self.add_bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self._tok.id_to_token(index)

    def _token_text(self, index: int | None) -> str | None:
        return None if index is None else self._tok.decode([index], skip_special_tokens=False)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """Render the chat template like transformers' ``apply_chat_template(tokenize=False)``."""
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat template")
        variables: dict[str, Any] = {
            f"{name}_token": self._token_text(self.special.get(f"{name}_id"))
            for name in ("bos", "eos", "unk", "pad")
            if self.special.get(f"{name}_id") is not None
        }
        variables.update(kwargs)
        return _compile_template(self.chat_template).render(
            messages=messages,
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )

    def token_bytes(self) -> list[bytes]:
        """Raw bytes of every token id (byte-level decoders only), as the decoder produces them."""
        if self._token_bytes is None:
            if not self.byte_level:
                raise ValueError("token_bytes() needs a ByteLevel decoder")
            to_byte = _unicode_to_bytes()
            table: list[bytes] = []
            for index in range(self.vocab_size):
                token = self._tok.id_to_token(index) or ""
                try:
                    table.append(bytes(to_byte[c] for c in token))
                except KeyError:  # like tokenizers: a token outside the alphabet is literal text
                    table.append(token.encode("utf-8"))
            self._token_bytes = table
        return self._token_bytes

    def output_bytes(self) -> list[bytes]:
        """The text of each token id inside generated output, as UTF-8 bytes (special tokens:
        none), for the runtime's scheduler: it emits text and matches stop strings with it.

        Byte-level decoders: exactly ``token_bytes()``, so the output text equals
        ``decode(ids, skip_special=True)``. Other decoders (Metaspace, WordPiece, none): each
        token's text as it decodes after a plain letter, which keeps the spaces a decoder puts
        between tokens or derives from a word-boundary marker mid-text.
        """
        if self.byte_level:
            table = list(self.token_bytes())
        else:
            anchor = self._tok.token_to_id("a")
            if anchor is None:
                anchor = 0
            base = self._tok.decode([anchor], skip_special_tokens=False)
            table = []
            for index in range(self.vocab_size):
                text = self._tok.decode([anchor, index], skip_special_tokens=False)
                piece = text[len(base) :] if text.startswith(base) else text
                table.append(piece.encode("utf-8"))
        for i in self.special_ids:
            if 0 <= i < len(table):
                table[i] = b""
        return table

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Incremental detokenizer: concatenated `push` outputs plus `flush` == `decode(all ids)`.

    Byte-level tokenizers are decoded exactly via token bytes and an incremental UTF-8 decoder
    that holds back an incomplete character. Other decoders fall back to re-decoding a short
    window of recent ids and emitting the new suffix once it no longer ends in U+FFFD.
    """

    def __init__(self, codec: TextCodec, skip_special: bool = False) -> None:
        self._codec = codec
        self._skip = codec.special_ids if skip_special else frozenset()
        self._skip_special = skip_special
        self._bytes = codec.token_bytes() if codec.byte_level else None
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, ids: list[int]) -> str:
        """Feed new ids; return the text they complete (may be empty)."""
        if self._bytes is not None:
            table, n = self._bytes, len(self._bytes)
            data = b"".join(table[i] for i in ids if 0 <= i < n and i not in self._skip)
            return self._utf8.decode(data)
        self._ids.extend(ids)
        prefix_text = self._codec.decode(self._ids[self._prefix : self._read], self._skip_special)
        new_text = self._codec.decode(self._ids[self._prefix :], self._skip_special)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """Return whatever is held back (an incomplete character decodes to U+FFFD)."""
        if self._bytes is not None:
            return self._utf8.decode(b"", final=True)
        prefix_text = self._codec.decode(self._ids[self._prefix : self._read], self._skip_special)
        new_text = self._codec.decode(self._ids[self._prefix :], self._skip_special)
        self._prefix = self._read = len(self._ids)
        return new_text[len(prefix_text) :]
