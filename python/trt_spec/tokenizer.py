"""The runtime text codec: encode, decode, chat templates and token bytes, from the tokenizer an
engine file stores (a Hugging Face ``tokenizer.json`` string, a chat template and the special
token ids), so the runtime needs only the ``tokenizers`` library and ``jinja2``, never
transformers. The conversion from GGUF or Hugging Face checkpoints happens when the engine is
built (:mod:`trt_spec.builder.tokenizer_convert`).

The special-token dict has the keys ``bos_id``, ``eos_id``, ``pad_id``, ``unk_id`` (int or None),
``chat_template`` (str or None), ``add_bos``, ``add_eos`` (bool) and ``eog_ids`` (sorted list of
ids that end generation).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

__all__ = ["TextCodec", "bytes_to_unicode"]


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
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
    return {c: b for b, c in bytes_to_unicode().items()}


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
