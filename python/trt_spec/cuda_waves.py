"""Waves of the CUDA backend's launches: for each kernel of a forward (the four matmuls of a
layer, attention, the head) and each row count, the blocks its grid has against the blocks the
GPU holds at once (resident: blocks per SM from the kernel's launch bounds, times the SMs). A
launch of more blocks than that runs a second, partly empty wave. The grids come from the
backend's own planning code (``_core.cuda_matmul_wave`` / ``cuda_attention_wave``); no GPU is
needed."""

from __future__ import annotations

from dataclasses import dataclass

from trt_spec import _core
from trt_spec.cost_model import MATMULS

ROWS = range(1, 17)  # decode (1), verify passes (K + 1, B (K + 1)) up to 16 rows


@dataclass(frozen=True)
class Wave:
    op: str  # attn_qkv, attn_output, ffn_gate_up, ffn_down, output, attention
    n: int  # rows
    kernel: str
    blocks: int
    resident: int

    @property
    def waves(self) -> float:
        return self.blocks / self.resident


def forward_waves(model: dict, n: int, max_seq: int, sm_count: int = 132) -> list[Wave]:
    """The distinct launches of one forward of n rows of an engine model (``models[role]`` of
    the engine's metadata: its tensors give each matrix's type and shape)."""
    cfg, tensors = model["config"], model["tensors"]
    ops = [(k, tensors[f"blk.0.{k}.weight"]) for k in MATMULS]
    ops.append(("output", tensors.get("output.weight") or tensors["tok_embd.weight"]))
    out = []
    for op, t in ops:
        rows, cols = t["shape"]
        w = _core.cuda_matmul_wave(t["type"], rows, cols, n, sm_count)
        out.append(Wave(op, n, w["kernel"], w["blocks"], w["resident"]))
    a = _core.cuda_attention_wave(
        n, cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], max_seq, sm_count
    )
    out.append(Wave("attention", n, a["kernel"], a["blocks"], a["resident"]))
    return out


def plan_waves(
    models: dict[str, dict], max_seq: int, sm_count: int = 132, rows=ROWS
) -> dict[str, list[Wave]]:
    """role -> the launches of its forwards of every row count in `rows`."""
    return {
        role: [w for n in rows for w in forward_waves(m, n, max_seq, sm_count)]
        for role, m in models.items()
    }


def max_waves(plan: dict[str, list[Wave]]) -> float:
    return max(w.waves for ws in plan.values() for w in ws)


def format_plan(plan: dict[str, list[Wave]], sm_count: int) -> list[str]:
    """One line per model and op: blocks / resident slots per row count; then the maximum."""
    lines = [f"cuda waves at {sm_count} SMs, blocks / resident slots by rows:"]
    for role, ws in plan.items():
        for op in dict.fromkeys(w.op for w in ws):
            mine = [w for w in ws if w.op == op]
            kernels = ", ".join(dict.fromkeys(w.kernel for w in mine))
            cells = " ".join(f"{w.n}:{w.blocks}/{w.resident}" for w in mine)
            lines.append(f"  {role} {op} ({kernels}): {cells}")
    lines.append(f"cuda waves, max over kernels and 1-16 rows: {max_waves(plan):.2f}")
    return lines
