"""Tiny random Qwen2 / Llama checkpoints (Hugging Face folders) made inside the tests.

Each folder holds config.json, model.safetensors and a small byte-level BPE tokenizer.json
trained here, so the builder's Hugging Face path and transformers (the reference) read the
same model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TEXT = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The quick brown fox jumps over the lazy dog. 0123456789 !@#$%^&*()",
    "import numpy as np\nx = np.arange(10)\nprint(x.sum())\n",
    "for i in range(100):\n    print(i * i)\n",
]


def make_tokenizer(folder: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 2,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXT * 20, trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": "<|im_end|>",
                "bos_token": None,
                "pad_token": "<|endoftext|>",
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": CHAT_TEMPLATE,
            }
        )
    )


def make_model(
    folder: Path,
    arch: str = "qwen2",
    *,
    vocab_size: int = 384,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 256,
    tied: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
):
    """Writes a random model to `folder` and returns the transformers model (fp32, eval)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        eos_token_id=vocab_size - 1,
        bos_token_id=None,
    )
    if arch == "qwen2":
        cfg = Qwen2Config(rope_theta=10000.0, **common)
    else:
        cfg = LlamaConfig(rope_theta=10000.0, **common)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():  # larger-than-default weights so logits are not all near zero
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.08)
            elif p.ndim == 1 and p.shape[0] != hidden:
                p.normal_(0.0, 0.05)  # biases
    model.eval()
    model.to(dtype).save_pretrained(folder, safe_serialization=True)
    model.to(torch.float32)
    make_tokenizer(folder, vocab_size)
    return model


_REFERENCES: dict[int, tuple[torch.nn.Module, torch.nn.Module]] = {}


def reference_logits(model, ids: list[int]):
    """transformers' logits [n, vocab] of a token sequence, as float32 numpy: the oracle of the
    f32 engine. Computed on a float64 copy of the model with eager attention: torch's float32
    CPU attention (SDPA) has been seen, in about one fresh process in 150 on a loaded 2-core
    host, to return rows from position 40 of an 80-token prompt 1.3e-4 off its float64 result
    (this engine stayed 5.6e-7 from it), which failed the 1e-4 bound of test_logits_tiny."""
    # (Keyed by id, the model kept alive beside its copy: a dead model's id, reused by a new one,
    # once returned the dead one's reference in a full run.)
    kept = _REFERENCES.get(id(model))
    ref = kept[1] if kept is not None and kept[0] is model else None
    if ref is None:
        import copy

        ref = copy.deepcopy(model).double()
        ref.config._attn_implementation = "eager"
        if hasattr(ref, "set_attn_implementation"):
            ref.set_attn_implementation("eager")
        _REFERENCES[id(model)] = (model, ref)
    with torch.no_grad():
        return ref(torch.tensor([ids])).logits[0].float().numpy()
