"""The GPU cost model (trt_spec.cost_model): its committed calibration reproduces the GPU run it
was fitted to, within 15%, on the step and verify times it saw and on the iteration times it
did not; the calibration file is what the fit script makes of the committed measurements; the
bytes a decode reads; the projection from acceptance histograms; `trt-spec info --plan`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trt_spec import cost_model as cm

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO / "benchmarks"))
import fit_gpu_cost_model as fit  # noqa: E402

CAL = cm.Calibration.load()
REPORT = json.loads((RESULTS / json.loads(cm.CALIBRATION.read_text())["report"]).read_text())
PAIRS = {"pair-q4": "qwen2.5-1.5b", "pair7b-q4": "qwen2.5-7b"}


def test_calibration_is_the_fit_of_the_committed_run() -> None:
    saved = json.loads(cm.CALIBRATION.read_text())
    measured = json.loads((RESULTS / "gpu_calibration_h200.json").read_text())
    assert saved["measured"] == measured
    report = json.loads((RESULTS / saved["report"]).read_text())
    refit = fit.fit(report, measured)
    assert refit.keys() == saved["kernel"].keys()
    for k, v in refit.items():
        assert v == pytest.approx(saved["kernel"][k], rel=1e-9), k


@pytest.mark.parametrize("model,weights,n,us", fit.observations(REPORT))
def test_steps_and_verify_rows_within_15_percent(model: str, weights: str, n: int, us: float):
    got = cm.forward_us(CAL, fit.shape_of(model, weights), n)
    assert abs(got / us - 1) < 0.15, (model, n, got, us)


def test_iterations_held_out_within_15_percent() -> None:
    draft = fit.shape_of("qwen2.5-0.5b", "q4")
    seen = 0
    for name, target in PAIRS.items():
        for it in REPORT["iterations"][name]:
            got = cm.iteration_us(CAL, fit.shape_of(target, "q4"), draft, it["k"])
            assert abs(got["iteration_us"] / (it["iteration_ms"] * 1e3) - 1) < 0.15, (name, it)
            seen += 1
    assert seen >= 10


def test_the_model_moves_with_the_shape() -> None:
    small, big = fit.shape_of("qwen2.5-0.5b", "q4"), fit.shape_of("qwen2.5-7b", "q4")
    assert cm.forward_us(CAL, small, 1) < cm.forward_us(CAL, big, 1)
    rows = [cm.forward_us(CAL, big, n) for n in range(1, 17)]
    assert all(b > a for a, b in zip(rows, rows[1:], strict=False))
    # 9 rows take two 8-row tiles: the weights stream twice.
    assert rows[8] - rows[7] > rows[7] - rows[6]


def test_decode_read_bytes() -> None:
    cfg = {"n_layers": 2, "n_kv_heads": 2, "head_dim": 4}

    def model(tied: bool) -> dict:
        t = {
            "tok_embd.weight": {"type": "q8", "shape": [100, 8], "bytes": 1000},
            "blk.0.attn_qkv.weight": {"type": "q4", "shape": [16, 8], "bytes": 50},
        }
        if not tied:
            t["output.weight"] = {"type": "q8", "shape": [100, 8], "bytes": 2000}
        return {"config": cfg, "tensors": t, "weight_bytes": sum(v["bytes"] for v in t.values())}

    kv = 2 * 2 * 2 * 4 * 10  # k and v, layers, kv heads, head_dim, context
    untied = cm.decode_read_bytes(model(False), context=10)
    assert untied == {"bytes": 50 + 2000 + 10 + kv * 2, "old_bytes": 3050 + kv * 4}
    tied = cm.decode_read_bytes(model(True), context=10)  # the head reads the whole table
    assert tied == {"bytes": 50 + 1000 + kv * 2, "old_bytes": 1050 + kv * 4}


def test_tokens_per_iteration(tmp_path: Path) -> None:
    p = tmp_path / "bench.json"
    p.write_text(json.dumps({"r": [{"draft_len": 2, "accepted_hist": [1, 1, 2]}]}))
    hists = cm.load_histograms(p)
    assert hists == [(2, [1, 1, 2])]
    assert cm.tokens_per_iteration(hists, 2) == (pytest.approx(2.25), "histogram at this K")
    alpha = cm.fit_alpha(hists)  # 5 accepted, 2 rejections
    assert alpha == pytest.approx(5 / 7)
    tokens, how = cm.tokens_per_iteration(hists, 3)
    assert how == "geometric model" and tokens == pytest.approx(cm.expected_tokens(alpha, 3))
    assert cm.expected_tokens(1.0, 3) == 4.0


def test_persistent_forward_prices_its_boundaries() -> None:
    """One persistent launch per forward: every boundary after the first is a counter wait
    (measured flag hop + fence) instead of a launch (measured PDL launch); nothing else moves."""
    m = CAL.measured
    hop = (m["flag_hop_ns"] + m["atomic_fence_ns"]) / 1e3
    assert cm.boundary_us(CAL, True) == pytest.approx(hop)
    assert cm.boundary_us(CAL, False) == pytest.approx(m["launch_pdl_us"])
    shape = fit.shape_of("qwen2.5-1.5b", "q4")
    ops = 5 * shape.n_layers + 2  # embed, 5 per layer, the head
    for n in (1, 5, 9):
        diff = cm.forward_us(CAL, shape, n, persistent=True) - cm.forward_us(CAL, shape, n)
        assert diff == pytest.approx((ops - 1) * (hop - m["launch_pdl_us"]))


@pytest.mark.parametrize("persistent", [False, True])
def test_prefetch_hides_each_matmuls_stream_behind_the_op_before(persistent: bool) -> None:
    """Weights streamed toward L2 during the op before (persistent: every block its next
    instruction's; per operation: each launch's hint of the next matmuls): a matmul's streamed
    time, up to the bytes on their way (ahead_bytes), overlaps the op before it; the ops' split
    sums to the per-operation figure."""
    for model in ("qwen2.5-1.5b", "qwen2.5-7b"):
        shape = fit.shape_of(model, "q4")
        for n in (1, 9):
            ops = cm.op_times(CAL, shape, n)
            assert [o.kind for o in ops[:3]] == ["embed", "matmul", "attention"]
            assert len(ops) == 5 * shape.n_layers + 2
            base = cm.forward_us(CAL, shape, n)
            k = CAL.kernel  # the ops add up to the fit's linear terms (forward_terms)
            linear = cm.kv_read_us(CAL, shape, n, 128) + sum(
                x / k[key] if key == "matmul_bytes_per_us" else x * k[key]
                for key, x in cm.forward_terms(shape, n).items()
            )
            assert sum(o.fixed + o.streamed for o in ops) == pytest.approx(linear)
            assert base == pytest.approx(linear)
            ahead = cm.ahead_bytes(CAL, persistent, n)
            expect, prev = 0.0, 0.0
            for o in ops:
                hidden = 0.0
                if o.kind == "matmul":
                    hidden = min(o.streamed * min(1.0, ahead / o.nbytes), prev)
                prev = o.fixed + o.streamed - hidden
                expect += prev
            plain = cm.forward_us(CAL, shape, n, persistent=persistent)
            got = cm.forward_us(CAL, shape, n, persistent=persistent, prefetch=True)
            assert got == pytest.approx(plain - base + expect)
            assert got < plain
    big = max(o.nbytes for o in cm.op_times(CAL, fit.shape_of("qwen2.5-7b", "q4"), 1))
    assert big > cm.ahead_bytes(CAL, False, 1)  # the 7B's largest matrix: only a part ahead


def test_info_plan_prints_modelled_figures(tiny, tmp_path: Path) -> None:
    from trt_spec import _core

    if not _core.cuda_compiled():
        pytest.skip("this build has no CUDA backend (the plan needs its launch code)")
    from random_engine import write_random_engine

    cfg = dict(
        arch="qwen2", n_layers=2, dim=128, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=256,
        vocab_size=512, rope_theta=1e6, rms_eps=1e-6, tied_embeddings=True, qkv_bias=True,
    )  # fmt: skip
    eng = tmp_path / "pair.engine"
    write_random_engine(
        eng, cfg, draft=dict(cfg, tied_embeddings=False), weights="q4", max_seq_len=256,
        max_batch=1, draft_len=4, fast=True,
    )  # fmt: skip
    hist = RESULTS / "spec_q4_t0.json"
    cli = [sys.executable, "-m", "trt_spec.cli", "info", str(eng), "--no-verify"]
    out = subprocess.run(
        [*cli, "--plan", "--acceptance", str(hist)], capture_output=True, text=True, check=True
    ).stdout
    assert "cost model (MODELLED" in out
    assert "modelled verify of n rows (us): 1: " in out and " 9: " in out
    assert "modelled persistent forward: target step " in out
    assert "weights prefetched an op ahead: target step " in out
    assert "per operation, the next weights hinted: target step " in out
    assert "projected speedup at K=4 (MODELLED)" in out
    assert "projected speedup at K=4, persistent forward, weights prefetched an op ahead" in out
    assert "projected speedup at K=4, per operation, the next weights hinted" in out
    assert "histogram at this K" in out
    bad = subprocess.run([*cli, "--acceptance", str(hist)], capture_output=True, text=True)
    assert bad.returncode != 0 and "--acceptance goes with --plan" in bad.stderr
