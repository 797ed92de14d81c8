"""A few hundred mutated inputs per run: every one is accepted, or rejected with EngineFileError /
BuildError; no other exception and no crash (in-process: a crash takes pytest down with it).

The cases are those of the full run (``build_scripts/fuzz_formats.py``, 10,000 engine files and
2,000 builder inputs under ASan + UBSan; result in ``benchmarks/results/fuzz.md``). CI runs a
slice of other seeds each time the case count changes, never the same ones as the full run.
"""

from __future__ import annotations

from pathlib import Path

import format_fuzz
import pytest

CASES = {"engine": 300, "gguf": 40, "safetensors": 40}
FIRST_SEED = 1_000_000  # disjoint from the full run's seeds


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    return format_fuzz.make_seeds(tmp_path_factory.mktemp("fuzz-seeds"))


@pytest.mark.parametrize("target", list(CASES))
def test_mutated_inputs_are_accepted_or_rejected_cleanly(
    target: str, seeds: dict[str, list[Path]], tmp_path: Path
) -> None:
    outcomes = [
        format_fuzz.run_case(target, s, seeds, tmp_path)
        for s in range(FIRST_SEED, FIRST_SEED + CASES[target])
    ]
    bad = [f"{o.target}:{o.seed} {o.detail}" for o in outcomes if o.status == "unexpected"]
    assert not bad, "\n".join(bad)
    statuses = {o.status for o in outcomes}
    assert "rejected" in statuses  # the mutations do reach the checks ...
    if target == "engine":
        assert "accepted" in statuses  # ... and some inputs survive them and generate
