"""A cost model of the CUDA backend's decode, verify and speculative iteration (batch 1), in
modelled microseconds, from one calibration file measured on a GPU.

Every kernel of a forward of n rows (model.cpp: embed; per layer the qkv, o, gate / up and down
matmuls and attention; the head) is priced on its own:

* matmul of a weight of W bytes, n rows in tiles of t rows (matmul_launch.cuh: t = 1, 2, 4, 8,
  9-16 rows as two 8-row tiles, 16 beyond; T = ceil(n / t) tiles, each streams the weight):
  ``matmul_us + T W / matmul_bytes_per_us + n W row_us_per_byte``;
* attention of a layer, n rows over context c (the KV at its stored dtype, f16):
  ``attention_us + (n - 1) attention_row_us + kv_bytes / copy_bytes_per_us``;
* embed: ``embed_us``.

An iteration of draft length K is a verify pass of K + 1 rows, a draft step of 2 rows (the
accepted token and the bonus), K - 1 draft steps of one row, and ``iteration_extra_us`` (the
sampling, acceptance and read-back around the forwards). A target-only step is a one-row
forward plus the same extra.

The calibration file (``gpu_calibration.json`` beside this module) holds the microbenchmarks'
constants (``benchmarks/cpp/gpu_calibrate.cu``: bandwidth, graph node and PDL costs, dependent
load latencies, the cross-SM flag hop) and the kernel constants above, fitted by
``benchmarks/fit_gpu_cost_model.py`` to the step and verify times of one GPU run; the
iteration times of that run are held out, and ``tests/test_cost_model.py`` holds the model to
them. Every figure this module returns is MODELLED, not measured.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_spec import _core

CALIBRATION = Path(__file__).resolve().parent / "gpu_calibration.json"
MATMULS = ("attn_qkv", "attn_output", "ffn_gate_up", "ffn_down")
KV_BYTES = 2  # the CUDA backend's KV cache: f16
KERNEL_KEYS = (
    "matmul_us",
    "matmul_bytes_per_us",
    "row_us_per_byte",
    "attention_us",
    "attention_row_us",
    "embed_us",
    "iteration_extra_us",
)


@dataclass(frozen=True)
class Calibration:
    """The constants of one GPU (gpu_calibration.json)."""

    device: str
    copy_gbps: float
    kernel: dict[str, float]  # KERNEL_KEYS
    measured: dict[str, Any]  # the microbenchmarks' JSON, as measured
    source: str

    @staticmethod
    def load(path: str | Path = CALIBRATION) -> Calibration:
        d = json.loads(Path(path).read_text())
        missing = [k for k in KERNEL_KEYS if k not in d.get("kernel", {})]
        if missing:
            raise ValueError(f"{path}: calibration lacks {', '.join(missing)}")
        m = d["measured"]
        return Calibration(m["device"], float(m["copy_gbps"]), d["kernel"], m, d.get("source", ""))


@dataclass(frozen=True)
class Matrix:
    name: str  # e.g. blk.0.ffn_down.weight
    rows: int
    cols: int
    nbytes: int
    kind: str  # the engine weight type: f32, f16, bf16, q8, q4


@dataclass(frozen=True)
class OpTime:
    """One op of a forward, priced (modelled µs)."""

    kind: str  # embed, matmul, attention
    fixed: float
    streamed: float
    nbytes: int = 0  # a matmul's weight bytes


def tile_rows(n: int) -> int:
    """matmul_launch.cuh's matmul_tile_rows."""
    return 1 if n <= 1 else 2 if n <= 2 else 4 if n <= 4 else 8 if n <= 16 else 16


def matrices_of_engine(model: dict) -> list[Matrix]:
    """The matrices of an engine model's metadata (``models[role]`` of the engine's JSON)."""
    out = []
    for name, t in model["tensors"].items():
        if len(t["shape"]) == 2:
            out.append(Matrix(name, t["shape"][0], t["shape"][1], int(t["bytes"]), t["type"]))
    return out


def matrices_of_config(config: dict, weights: str) -> list[Matrix]:
    """The matrices an engine of this config and weight format holds (the builder's types),
    without writing one."""
    from trt_spec.builder.builder import choose_type
    from trt_spec.builder.schema import engine_tensors

    out = []
    for t in engine_tensors(config):
        if len(t.shape) != 2:
            continue
        head = t.name == "output.weight" or (
            t.name == "tok_embd.weight" and config["tied_embeddings"]
        )
        kind = choose_type(weights, t.name, t.shape, 16.0, head)
        nbytes = _core.weight_blob_bytes(_core.weight_type_from_name(kind), *t.shape)
        out.append(Matrix(t.name, t.shape[0], t.shape[1], int(nbytes), kind))
    return out


def model_of_config(config: dict, weights: str) -> dict:
    """Engine-metadata-like ``{"config", "tensors"}`` of a model an engine of this config and
    weight format would hold (its matrices only), without writing one."""
    return {
        "config": config,
        "tensors": {
            m.name: {"type": m.kind, "shape": [m.rows, m.cols], "bytes": m.nbytes}
            for m in matrices_of_config(config, weights)
        },
    }


@dataclass(frozen=True)
class Shape:
    """What the model prices of one model: its layer matrices, head, and attention sizes."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    layer_bytes: tuple[int, ...]  # the per-layer matrices' bytes, every layer in order
    head_bytes: int

    @staticmethod
    def of(config: dict, matrices: list[Matrix]) -> Shape:
        by = {m.name: m for m in matrices}
        layer = []
        for i in range(config["n_layers"]):
            layer += [by[f"blk.{i}.{k}.weight"].nbytes for k in MATMULS]
        head = by.get("output.weight") or by["tok_embd.weight"]
        return Shape(
            config["n_layers"], config["n_kv_heads"], config["head_dim"], tuple(layer), head.nbytes
        )


def forward_terms(shape: Shape, n: int) -> dict[str, float]:
    """The linear terms of a forward of n rows (the features the fit weighs): matmul launches,
    bytes streamed (a weight once per tile), row-bytes computed, attention launches and extra
    rows, embeds."""
    t = math.ceil(n / tile_rows(n))
    weights = list(shape.layer_bytes) + [shape.head_bytes]
    return {
        "matmul_us": float(len(weights)),
        "matmul_bytes_per_us": float(t * sum(weights)),  # (divided by the constant)
        "row_us_per_byte": float(n * sum(weights)),
        "attention_us": float(shape.n_layers),
        "attention_row_us": float(shape.n_layers * (n - 1)),
        "embed_us": 1.0,
    }


def decode_read_bytes(model: dict, context: int) -> dict[str, int]:
    """Bytes a one-row decode step of an engine model reads at `context` positions: every
    matrix but the embedding table once, one row of that table, and the KV at f16 (``bytes``);
    and the older count, the whole table and KV at 4 bytes (``old_bytes``)."""
    cfg = model["config"]
    mats = matrices_of_engine(model)
    embd = next(m for m in mats if m.name == "tok_embd.weight")
    others = sum(m.nbytes for m in mats if m.name != "tok_embd.weight")
    kv = 2 * cfg["n_layers"] * cfg["n_kv_heads"] * cfg["head_dim"] * context
    head_is_table = "output.weight" not in model["tensors"]  # tied: the head reads the table
    table = embd.nbytes if head_is_table else math.ceil(embd.nbytes / embd.rows)
    return {"bytes": others + table + kv * KV_BYTES, "old_bytes": model["weight_bytes"] + kv * 4}


def kv_read_us(cal: Calibration, shape: Shape, n: int, context: int) -> float:
    per_layer = 2 * shape.n_kv_heads * shape.head_dim * KV_BYTES * (context + n)
    return shape.n_layers * per_layer / (cal.copy_gbps * 1e3)


def boundary_us(cal: Calibration, persistent: bool) -> float:
    """What one op boundary costs: a graph node launched as a programmatic dependent (measured
    ``launch_pdl_us``), or in the persistent forward a counter release and the next op's acquire
    (measured ``flag_hop_ns`` + ``atomic_fence_ns``)."""
    m = cal.measured
    if persistent:
        return (float(m["flag_hop_ns"]) + float(m["atomic_fence_ns"])) / 1e3
    return float(m["launch_pdl_us"])


def op_times(cal: Calibration, shape: Shape, n: int, context: int = 128) -> list[OpTime]:
    """Each op of a forward of n rows in order (embed; per layer the qkv matmul, attention, o,
    gate / up and down; the head), priced as in the module docstring and split into what does
    not depend on bytes streamed from DRAM (``fixed``) and what does (``streamed``: a matmul's
    weight, attention's KV)."""
    k = cal.kernel
    t = math.ceil(n / tile_rows(n))
    kv_layer = kv_read_us(cal, shape, n, context) / shape.n_layers

    def matmul(w: int) -> OpTime:
        fixed = k["matmul_us"] + n * w * k["row_us_per_byte"]
        return OpTime("matmul", fixed, t * w / k["matmul_bytes_per_us"], w)

    attention = OpTime("attention", k["attention_us"] + (n - 1) * k["attention_row_us"], kv_layer)
    ops = [OpTime("embed", k["embed_us"], 0.0)]
    per = len(MATMULS)
    for i in range(shape.n_layers):
        qkv, o, gate_up, down = shape.layer_bytes[per * i : per * (i + 1)]
        ops += [matmul(qkv), attention, matmul(o), matmul(gate_up), matmul(down)]
    ops.append(matmul(shape.head_bytes))
    return ops


PREFETCH_BLOCK_BYTES: int = _core.CUDA_PREFETCH_BLOCK_BYTES  # kernels/cuda/l2_budget.h
PREFETCH_NEXT_BYTES: int = _core.CUDA_PREFETCH_NEXT_BYTES


def ahead_bytes(cal: Calibration, persistent: bool, n: int) -> int:
    """Bytes of the next op's weights on their way to L2 while an op runs: persistent, every
    resident block's budget (3 blocks per SM at one row, 2 at 2-16: matmul_blocks_per_sm);
    per operation, one launch's hint."""
    if not persistent:
        return PREFETCH_NEXT_BYTES
    per_sm = 3 if tile_rows(n) == 1 else 2
    return PREFETCH_BLOCK_BYTES * per_sm * int(cal.measured.get("sms", 132))


def forward_us(
    cal: Calibration,
    shape: Shape,
    n: int,
    context: int = 128,
    persistent: bool = False,
    prefetch: bool = False,
) -> float:
    """Modelled µs of a forward of n rows at `context` positions (in a CUDA graph, with PDL):
    the sum of its op_times.
    persistent: as one persistent launch (kernels/cuda/forward_program.cuh): every boundary
    after the first priced by boundary_us instead of a launch; the ops' own work is the same
    blocks. Priced as if every op waited for the whole op before (the finer waits after the qkv
    projection and attention, forward_build.cuh, overlap some of that: not priced).
    prefetch: each matmul's weights streamed toward L2 during the op before it, up to
    ahead_bytes: persistent, every block its next instruction's (matmul_prefetch in
    kernels/cuda/matmul_kernel.cuh); per operation, each launch the next matmuls' (the graphs'
    hints, set_prefetch_next). A matmul then costs ``fixed + streamed - hidden``, hidden =
    ``min(streamed * min(1, ahead_bytes / its bytes), previous op's time)``."""
    ops = op_times(cal, shape, n, context)
    ahead = ahead_bytes(cal, persistent, n)
    us, prev = 0.0, 0.0
    for op in ops:
        hidden = 0.0
        if prefetch and op.kind == "matmul":
            hidden = min(op.streamed * min(1.0, ahead / max(op.nbytes, 1)), prev)
        prev = op.fixed + op.streamed - hidden
        us += prev
    if persistent:
        us += (len(ops) - 1) * (boundary_us(cal, True) - boundary_us(cal, False))
    return us


def iteration_us(
    cal: Calibration,
    target: Shape,
    draft: Shape | None,
    k: int,
    context: int = 128,
    persistent: bool = False,
    prefetch: bool = False,
) -> dict[str, float]:
    """Modelled µs of the parts of one iteration of draft length k (k = 0: target-only), its
    forwards priced by forward_us (persistent, prefetch: as there)."""
    how = {"persistent": persistent, "prefetch": prefetch}
    verify = forward_us(cal, target, k + 1, context, **how)
    d0 = forward_us(cal, draft, 2, context, **how) if draft and k else 0.0
    d1 = forward_us(cal, draft, 1, context, **how) if draft and k > 1 else 0.0
    extra = cal.kernel["iteration_extra_us"]
    return {
        "verify_us": verify,
        "draft_step0_us": d0,
        "draft_step_us": d1,
        "iteration_us": verify + d0 + (k - 1) * d1 + extra if k else verify + extra,
    }


# ---- acceptance: tokens per iteration from a bench run's histograms ----------------------------
def load_histograms(path: str | Path) -> list[tuple[int | None, list[int]]]:
    """(K or None, accepted-length histogram) of every entry holding an 'accepted_hist'."""
    found: list[tuple[int | None, list[int]]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            h = x.get("accepted_hist")
            if isinstance(h, list) and sum(h) > 0:
                k = x.get("draft_len", x.get("k"))
                if isinstance(k, int) and not isinstance(k, bool):
                    found.append((k, [int(c) for c in h[: k + 1]]))
                elif k is None:
                    found.append((None, [int(c) for c in h]))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(Path(path).read_text()))
    return found


def fit_alpha(hists: list[tuple[int | None, list[int]]]) -> float:
    """Per-token acceptance of a truncated geometric model: accepted / (accepted + rejections)."""
    acc = rej = 0
    for k, h in hists:
        top = k if k is not None else len(h) - 1
        acc += sum(a * c for a, c in enumerate(h))
        rej += sum(c for a, c in enumerate(h) if a < top)
    return acc / (acc + rej) if acc + rej else 0.0


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens per iteration of draft length k at per-token acceptance alpha (geometric)."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def tokens_per_iteration(hists: list[tuple[int | None, list[int]]], k: int) -> tuple[float, str]:
    """Tokens per iteration at draft length k: from the histograms at this k where there are
    any, else the geometric model at the fitted alpha; and which."""
    exact = [h for kk, h in hists if kk == k]
    if exact:
        tot = [sum(col) for col in zip(*exact, strict=False)]
        return sum((a + 1) * c for a, c in enumerate(tot)) / sum(tot), "histogram at this K"
    return expected_tokens(fit_alpha(hists), k), "geometric model"
