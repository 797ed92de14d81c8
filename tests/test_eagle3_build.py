"""Building engines with an EAGLE-3 head as the draft (builder/eagle3_source.py), the builder's
side only: heads in the published layout (eagle3_heads.save_head: LlamaForCausalLMEagle3, in
model.safetensors or pytorch_model.bin, full or reduced draft vocabulary) and in SpecForge's and
vLLM's names, read back from the engine file (format version, the draft_heads entry's config,
taps, draft_tokens and every eagle3.* tensor's shape and values against the torch weights),
the RoPE frequencies against transformers' own, the default taps from the target's depth, the
dispatch between Medusa and EAGLE-3 folders, a Hub id of a head published as a .bin only, and
the BuildErrors of heads that do not fit. No Engine is loaded (test_eagle3 runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import eagle3_heads
import numpy as np
import pytest
import spec_pairs
import torch
from engine_file_tools import parse_header, read_metadata
from safetensors.torch import load_file, save_file
from trt_spec import BuildError, _core, build_engine
from trt_spec.builder import resolve
from trt_spec.builder.draft_heads import is_heads, open_heads

D, V, H, KV, HD, F = 128, 384, 4, 2, 32, 256  # the tiny target's sizes; the head's own
TAPS = [0, 1, 2]  # the 2-layer target's three depths
NAMES = [
    "eagle3.fc.0.weight",
    "eagle3.fc.1.weight",
    "eagle3.fc.2.weight",
    "eagle3.input_norm.weight",
    "eagle3.hidden_norm.weight",
    "eagle3.post_norm.weight",
    "eagle3.norm.weight",
    "eagle3.qkv_embed.weight",
    "eagle3.qkv_hidden.weight",
    "eagle3.o.weight",
    "eagle3.gate_up.weight",
    "eagle3.down.weight",
    "eagle3.head.weight",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("eagle3-build")


@pytest.fixture(scope="module")
def target(root: Path) -> Path:
    return spec_pairs.make_markov_target(root)


def make_head(tokens: torch.Tensor | None = None, seed: int = 0, **kw) -> eagle3_heads.Eagle3Head:
    """A random head (norms away from 1, so that each is told apart) over ``tokens`` (all)."""
    torch.manual_seed(seed)
    head = eagle3_heads.Eagle3Head(D, V, torch.arange(V) if tokens is None else tokens, **kw)
    m = head.midlayer
    with torch.no_grad():
        for p in (m.input_layernorm, m.hidden_norm, m.post_attention_layernorm, head.norm):
            p.add_(0.1 * torch.randn_like(p))
    return head


def build(target: Path, draft: Path, out: Path, **kw) -> Path:
    build_engine(
        target, out, draft=draft, weights="f32", max_seq_len=64, max_batch=1, draft_len=4, **kw
    )
    return out


def read_engine(path: Path) -> tuple[dict, dict, dict[str, np.ndarray]]:
    """(header, metadata, the draft heads' tensors as float32 arrays)."""
    raw = path.read_bytes()
    h, meta = parse_header(raw), read_metadata(raw)
    tensors = {}
    for name, t in meta["draft_heads"]["tensors"].items():
        assert t["type"] == "f32", name
        start = h["data_offset"] + t["offset"]
        data = np.frombuffer(raw[start : start + t["bytes"]], np.float32)
        tensors[name] = data.reshape(t["shape"])
    return h, meta, tensors


def expected_tensors(head: eagle3_heads.Eagle3Head) -> dict[str, np.ndarray]:
    """The engine's tensors, sliced from the torch weights as the runtime reads them."""
    sd = {k: v.detach().numpy() for k, v in head.state_dict().items()}
    m = "midlayer."
    fc = sd["fc.weight"]
    qkv = np.concatenate([sd[f"{m}self_attn.{n}_proj.weight"] for n in "qkv"])
    mlp = m + "mlp."
    return {
        **{f"eagle3.fc.{t}.weight": fc[:, t * D : (t + 1) * D] for t in range(3)},
        "eagle3.input_norm.weight": sd[m + "input_layernorm"],
        "eagle3.hidden_norm.weight": sd[m + "hidden_norm"],
        "eagle3.post_norm.weight": sd[m + "post_attention_layernorm"],
        "eagle3.norm.weight": sd["norm"],
        "eagle3.qkv_embed.weight": qkv[:, :D],
        "eagle3.qkv_hidden.weight": qkv[:, D:],
        "eagle3.o.weight": sd[m + "self_attn.o_proj.weight"],
        "eagle3.gate_up.weight": np.concatenate(
            [sd[mlp + "gate_proj.weight"], sd[mlp + "up_proj.weight"]]
        ),
        "eagle3.down.weight": sd[mlp + "down_proj.weight"],
        "eagle3.head.weight": sd["lm_head.weight"],
    }


def transformers_inv_freq(theta: float, scaling: dict, head_dim: int = HD) -> np.ndarray:
    """transformers' own RoPE inverse frequencies for a Llama config with this scaling."""
    import transformers
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kw = dict(hidden_size=D, num_attention_heads=H, head_dim=head_dim)
    if int(transformers.__version__.split(".")[0]) >= 5:
        cfg = LlamaConfig(**kw, rope_parameters={"rope_theta": theta, **scaling})
    else:
        cfg = LlamaConfig(**kw, rope_theta=theta, rope_scaling=scaling)
    return ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu")[0].numpy()


def assert_float32_list(values: list, want: np.ndarray) -> None:
    got = np.asarray(values, np.float64)
    assert (got == got.astype(np.float32)).all()  # float32 values, written as Python floats
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


# ---- engines: metadata and tensors ------------------------------------------------------------
@pytest.mark.parametrize("layout", ["safetensors", "bin"])
def test_head_packs_into_the_engine(target: Path, tmp_path: Path, layout: str) -> None:
    """A head with a reduced draft vocabulary (.bin) or the whole one (.safetensors): format
    version, the draft_heads entry and every tensor equal to its slice of the torch weights."""
    tokens = torch.arange(1, V, 3) if layout == "bin" else None  # 128 tokens: 1, 4, 7, ...
    head = make_head(tokens, seed=1)
    folder = eagle3_heads.save_head(head, tmp_path / "head", taps=TAPS, bin=layout == "bin")
    assert (folder / ("pytorch_model.bin" if layout == "bin" else "model.safetensors")).is_file()
    h, meta, tensors = read_engine(build(target, folder, tmp_path / "e.engine"))
    assert h["version"] == meta["format_version"] == _core.ENGINE_FORMAT_DRAFT_HEADS_VERSION
    assert list(meta["models"]) == ["target"]  # no draft model
    heads = meta["draft_heads"]
    assert heads["kind"] == "eagle3" and heads["weights"] == "f32"
    assert heads["source"] == {"path": "head", "format": "eagle", "name": "head"}
    vd = V if tokens is None else tokens.numel()
    cfg = dict(heads["config"])
    assert_float32_list(cfg.pop("rope_freq"), 1.0 / 10000.0 ** (np.arange(0, HD, 2) / HD))
    assert cfg == {
        "dim": D,
        "n_heads": H,
        "n_kv_heads": KV,
        "head_dim": HD,
        "ffn_dim": F,
        "vocab_size": V,
        "draft_vocab": vd,
        "rms_eps": 1e-6,
        "taps": TAPS,
        "norm_before_residual": False,
    }
    want_tokens = list(range(V)) if tokens is None else tokens.tolist()
    assert heads["draft_tokens"] == want_tokens
    assert list(heads["tensors"]) == NAMES and heads["tensor_type_counts"] == {"f32": 13}
    want = expected_tensors(head)
    shapes = {
        "eagle3.fc.0.weight": [D, D],
        "eagle3.input_norm.weight": [D],
        "eagle3.qkv_embed.weight": [(H + 2 * KV) * HD, D],
        "eagle3.qkv_hidden.weight": [(H + 2 * KV) * HD, D],
        "eagle3.o.weight": [D, H * HD],
        "eagle3.gate_up.weight": [2 * F, D],
        "eagle3.down.weight": [D, F],
        "eagle3.head.weight": [vd, D],
    }
    for name in NAMES:
        assert heads["tensors"][name]["shape"] == list(want[name].shape), name
        if name in shapes:
            assert list(want[name].shape) == shapes[name], name
        np.testing.assert_array_equal(tensors[name], want[name], err_msg=name)
    assert heads["weight_bytes"] == sum(t.nbytes for t in tensors.values())


def test_specforge_and_vllm_names_read_the_same(target: Path, tmp_path: Path) -> None:
    """``model.`` prefixes, ``layers.0.`` for ``midlayer.``, an embed_tokens (ignored), no d2t
    (the whole vocabulary), taps at the top level, an architecture merely containing Eagle3 or
    model_type eagle3 only: the same engine tensors as the published names."""
    head = make_head(seed=2)
    ref = eagle3_heads.save_head(head, tmp_path / "ref", taps=TAPS)
    _, _, want = read_engine(build(target, ref, tmp_path / "ref.engine"))
    state = load_file(str(ref / "model.safetensors"))
    renamed = {
        "model." + k.replace("midlayer.", "layers.0."): v
        for k, v in state.items()
        if k not in ("d2t", "t2d")
    }
    renamed["model.embed_tokens.weight"] = torch.randn(V, D)
    cfg = json.loads((ref / "config.json").read_text())
    cfg.pop("eagle_config")
    cfg["eagle_aux_hidden_state_layer_ids"] = TAPS
    for i, arch in enumerate([["Eagle3LlamaForCausalLM"], None]):
        folder = tmp_path / f"other-{i}"
        folder.mkdir()
        save_file(renamed, str(folder / "model.safetensors"))
        c = dict(cfg, architectures=arch)
        if arch is None:
            del c["architectures"]
            c["model_type"] = "eagle3"
        (folder / "config.json").write_text(json.dumps(c))
        assert is_heads(folder) and open_heads(folder).kind == "eagle3"
        _, meta, got = read_engine(build(target, folder, tmp_path / f"other-{i}.engine"))
        assert meta["draft_heads"]["draft_tokens"] == list(range(V))
        assert meta["draft_heads"]["config"]["taps"] == TAPS
        assert list(got) == NAMES
        for name in NAMES:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize(
    "scaling",
    [
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        {"rope_type": "linear", "factor": 4.0},
    ],
)
def test_config_options_reach_the_engine(target: Path, tmp_path: Path, scaling: dict) -> None:
    """rope_theta and rope_scaling (llama3's three bands all present: wavelengths from 6 to
    2100 against 16 and 64) as transformers computes them, norm_before_residual, rms_norm_eps,
    and the defaults of num_key_value_heads and head_dim."""
    head = make_head(
        seed=3, kv_heads=H, eps=1e-5, theta=500.0, norm_before_residual=True, rope_scaling=scaling
    )
    extra = {"_name_or_path": "org/eagle3-tiny"}
    folder = eagle3_heads.save_head(head, tmp_path / "head", taps=[2, 0, 1], config_extra=extra)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["norm_before_residual"] is True and cfg["rope_scaling"] == scaling
    del cfg["num_key_value_heads"], cfg["head_dim"]
    (folder / "config.json").write_text(json.dumps(cfg))
    _, meta, tensors = read_engine(build(target, folder, tmp_path / "e.engine"))
    assert meta["draft_heads"]["source"]["name"] == "org/eagle3-tiny"
    c = meta["draft_heads"]["config"]
    assert (c["n_kv_heads"], c["head_dim"], c["rms_eps"]) == (H, HD, 1e-5)
    assert c["norm_before_residual"] is True and c["taps"] == [2, 0, 1]
    want = transformers_inv_freq(500.0, scaling)
    assert_float32_list(c["rope_freq"], want)
    # the test helper's torch reference uses the same frequencies
    np.testing.assert_allclose(head.inv_freq.numpy(), want, rtol=2e-6, atol=0)
    assert tensors["eagle3.qkv_embed.weight"].shape == (3 * H * HD, D)
    # transformers 5's rope_parameters, the theta inside it
    del cfg["rope_scaling"]
    cfg["rope_parameters"] = {"rope_theta": 500.0, **scaling}
    del cfg["rope_theta"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert_float32_list(open_heads(folder).config["rope_freq"], want)


def test_default_taps_from_the_target_depth(root: Path, tmp_path: Path) -> None:
    """Without eagle_aux_hidden_state_layer_ids: (2, L // 2, L - 3) of a 6-layer target."""
    deep = spec_pairs.make_checkpoint(root, "deep", seed=5, small_vocab=False, layers=6)
    folder = eagle3_heads.save_head(make_head(seed=4), tmp_path / "head", taps=None)
    assert open_heads(folder).config["taps"] is None  # until the target is known
    _, meta, _ = read_engine(build(deep, folder, tmp_path / "e.engine"))
    assert meta["draft_heads"]["config"]["taps"] == [2, 3, 3]
    folder = eagle3_heads.save_head(make_head(seed=4), tmp_path / "last", taps=[0, 3, 6])
    _, meta, _ = read_engine(build(deep, folder, tmp_path / "last.engine"))
    assert meta["draft_heads"]["config"]["taps"] == [0, 3, 6]  # 6: after the last layer


def test_kinds_are_told_apart(target: Path, tmp_path: Path) -> None:
    """open_heads picks the reader of the folder's kind; a model folder is no heads."""
    e3 = eagle3_heads.save_head(make_head(seed=5), tmp_path / "e3", taps=TAPS)
    src = open_heads(e3)
    assert (src.kind, src.layout, src.count) == ("eagle3", "eagle", len(NAMES))
    assert [n for n, _, _ in src.arrays()] == NAMES
    assert [n for n, _, out in src.arrays() if out] == ["eagle3.head.weight"]
    w = 0.01 * torch.randn(D, D)
    medusa = spec_pairs.write_medusa_heads(tmp_path / "m", [(w, torch.zeros(D), torch.ones(V, D))])
    assert is_heads(medusa) and open_heads(medusa).kind == "medusa"
    assert not is_heads(target) and not is_heads(tmp_path / "absent")


# ---- heads that do not fit --------------------------------------------------------------------
def _edit(folder: Path, config: dict | None = None, state=None) -> Path:
    """Changes a saved head's config.json keys (None: delete) and its tensors (a function)."""
    if config:
        cfg = json.loads((folder / "config.json").read_text())
        for k, v in config.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (folder / "config.json").write_text(json.dumps(cfg))
    if state is not None:
        st = load_file(str(folder / "model.safetensors"))
        state(st)
        save_file(st, str(folder / "model.safetensors"))
    return folder


def _d2t_twice(st: dict) -> None:
    st["d2t"][5] = st["d2t"][4] - 1  # draft tokens 4 and 5 both target token 4 + d2t[4]


def _d2t_past(st: dict) -> None:
    st["d2t"][-1] = V - st["d2t"].numel() + 1  # the last draft token: target token V


CASES = {
    "hidden": (
        dict(dim=64),
        None,
        None,
        r"hidden size 64 and vocabulary 384 do not fit the "
        r"target's \(128, 384\)",
    ),
    "vocab": (dict(vocab=500), None, None, r"vocabulary 500 do not fit the target's \(128, 384\)"),
    "missing": (
        {},
        None,
        lambda st: st.pop("midlayer.mlp.down_proj.weight"),
        "lacks tensor midlayer.mlp.down_proj.weight",
    ),
    "bias": (
        {},
        None,
        lambda st: st.__setitem__("midlayer.self_attn.q_proj.bias", torch.zeros(H * HD)),
        r"biases \(midlayer.self_attn.q_proj.bias\) are not supported",
    ),
    "fc-bias": (
        {},
        None,
        lambda st: st.__setitem__("fc.bias", torch.zeros(D)),
        r"biases \(fc.bias\) are not supported",
    ),
    "shape": (
        {},
        {"num_key_value_heads": 4},
        None,
        r"midlayer.self_attn.k_proj.weight is \[64, 256\], expected \[128, 256\]",
    ),
    "layers": ({}, {"num_hidden_layers": 2}, None, "EAGLE-3 heads of 2 layers are not supported"),
    "taps-default": (
        {},
        {"eagle_config": None},
        None,
        r"reads target layers \[2, 1, -1\], but the target has 2 layers \(0 to 2\); "
        "set eagle_aux_hidden_state_layer_ids",
    ),
    "taps-past": (
        {},
        {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 3]}},
        None,
        r"reads target layers \[0, 1, 3\]",
    ),
    "taps-two": (
        {},
        {"eagle_aux_hidden_state_layer_ids": [0, 1], "eagle_config": None},
        None,
        r"eagle_aux_hidden_state_layer_ids must list 3 ints: \[0, 1\]",
    ),
    "d2t-twice": (dict(tokens=torch.arange(0, 200)), None, _d2t_twice, "d2t maps"),
    "d2t-past": (dict(tokens=torch.arange(100, 300)), None, _d2t_past, "d2t maps"),
    "d2t-absent": (
        dict(tokens=torch.arange(0, 200)),
        None,
        lambda st: st.pop("d2t"),
        "a draft vocabulary of 200 of 384 tokens needs d2t",
    ),
    "target-hidden": ({}, {"target_hidden_size": 256}, None, r"target_hidden_size \(256\)"),
    "rope-yarn": (
        {},
        {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}},
        None,
        "rope_scaling 'yarn' is not supported",
    ),
    "rope-incomplete": (
        {},
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        None,
        "rope_scaling 'llama3': missing or bad",
    ),
    "no-weights": ({}, None, "unlink", r"without \*.safetensors or pytorch_model.bin"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_heads_that_do_not_fit_are_refused(target: Path, tmp_path: Path, case: str) -> None:
    """One BuildError naming what does not fit, and no engine file."""
    head_kw, config, state, message = CASES[case]
    dim, vocab = head_kw.get("dim", D), head_kw.get("vocab", V)
    torch.manual_seed(0)
    tokens = head_kw.get("tokens", torch.arange(V))
    head = eagle3_heads.Eagle3Head(dim, vocab, tokens, ffn=F)
    folder = eagle3_heads.save_head(head, tmp_path / "head", taps=TAPS)
    if state == "unlink":
        (folder / "model.safetensors").unlink()
        state = None
    _edit(folder, config, state)
    out = tmp_path / "x.engine"
    with pytest.raises(BuildError, match=message):
        build(target, folder, out)
    assert not out.exists() and list(tmp_path.glob(".x.engine*")) == []


def test_draft_vocab_option_is_for_draft_models(target: Path, tmp_path: Path) -> None:
    folder = eagle3_heads.save_head(make_head(), tmp_path / "head", taps=TAPS)
    with pytest.raises(BuildError, match="--draft-vocab needs --draft with a draft model"):
        build(target, folder, tmp_path / "x.engine", draft_vocab=64)


# ---- a Hub id of a head published as pytorch_model.bin only -----------------------------------
class FakeHub:
    """huggingface_hub.snapshot_download over local 'repositories' (folders): the files matching
    allow_patterns copied into one snapshot folder per repository, the calls recorded."""

    def __init__(self, repos: dict[str, Path], cache: Path) -> None:
        self.repos, self.cache, self.calls = repos, cache, []

    def __call__(self, repo_id: str, *, revision, allow_patterns, local_files_only) -> str:
        from fnmatch import fnmatch

        self.calls.append((repo_id, list(allow_patterns)))
        snap = self.cache / repo_id.replace("/", "--")
        snap.mkdir(parents=True, exist_ok=True)
        for f in self.repos[repo_id].iterdir():
            if any(fnmatch(f.name, p) for p in allow_patterns):
                (snap / f.name).write_bytes(f.read_bytes())
        return str(snap)


def test_hub_id_of_a_bin_only_head_fetches_its_weights(
    target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heads repository without *.safetensors gets its pytorch_model.bin in a second fetch;
    a model repository gets one fetch (its *.safetensors), a .bin-only model no .bin."""
    import huggingface_hub

    head = eagle3_heads.save_head(make_head(seed=6), tmp_path / "repo-head", taps=TAPS, bin=True)
    (head / "README.md").write_text("an EAGLE-3 head")
    plain = tmp_path / "repo-model-bin"
    plain.mkdir()
    (plain / "config.json").write_text((target / "config.json").read_text())
    (plain / "pytorch_model.bin").write_bytes(b"not fetched")
    hub = FakeHub(
        {"org/eagle3-head": head, "org/model": target, "org/model-bin": plain}, tmp_path / "cache"
    )
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    path = resolve.resolve_checkpoint("org/eagle3-head", offline=False)
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "pytorch_model.bin"]
    assert hub.calls == [
        ("org/eagle3-head", resolve.HF_MODEL_FILES),
        ("org/eagle3-head", resolve.HEADS_CHECKPOINT_FILES),
    ]
    _, meta, _ = read_engine(build(target, path, tmp_path / "hub.engine"))
    assert meta["draft_heads"]["kind"] == "eagle3"
    hub.calls.clear()
    assert (resolve.resolve_checkpoint("org/model", offline=False) / "model.safetensors").is_file()
    path = resolve.resolve_checkpoint("org/model-bin", offline=False)
    assert not (path / "pytorch_model.bin").exists()
    assert [c[0] for c in hub.calls] == ["org/model", "org/model-bin"]
