"""What ``trt-spec build`` and ``trt-spec bench`` print on stderr while they work
(trt_spec/progress.py): bars only on a terminal, status lines otherwise, ``-v`` one line per
tensor or prompt, ``-q`` nothing.

Runs ``trt_spec.cli.main([...])`` in-process: under pytest's capture stderr is not a terminal;
the terminal case swaps in a stream whose ``isatty()`` is True. Tiny checkpoints only.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from trt_spec import build_engine, cli

TENSOR_LINE = re.compile(r"^(target|draft): \[(\d+)/(\d+)\] \S+ \[[\d, ]+\] -> \w+", re.M)
PROMPT_LINE = re.compile(r"prompt (\d)/2 \([^)]+\): target-only [\d.]+, lookup K=1 [\d.]+")


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal, so tqdm bars are drawn into it."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def checkpoints(tiny) -> tuple[Path, Path]:
    target, _ = tiny.checkpoint("qwen2")
    draft, _ = tiny.checkpoint("qwen2", layers=1, seed=1)
    return target, draft


def build(tmp_path: Path, checkpoints: tuple[Path, Path], *flags: str) -> None:
    target, draft = checkpoints
    argv = ["build", "--target", str(target), "--draft", str(draft), "--weights", "f32"]
    assert cli.main([*argv, "--max-seq-len", "32", "-o", str(tmp_path / "e.engine"), *flags]) == 0


def test_build_not_a_terminal_has_status_lines_only(tmp_path, checkpoints, capsys) -> None:
    build(tmp_path, checkpoints)
    captured = capsys.readouterr()
    assert "reading target" in captured.err and "reading draft" in captured.err
    assert not TENSOR_LINE.search(captured.err)
    assert "\r" not in captured.err and "tensor/s" not in captured.err and "%|" not in captured.err
    assert len(captured.err.splitlines()) <= 4, captured.err
    assert re.search(r"^engine: .*e\.engine", captured.out, re.M)  # the summary is unchanged


def test_build_verbose_prints_every_tensor(tmp_path, checkpoints, capsys) -> None:
    build(tmp_path, checkpoints, "--verbose")
    err = capsys.readouterr().err
    lines = TENSOR_LINE.findall(err)
    for role in ("target", "draft"):
        mine = [(int(k), int(n)) for r, k, n in lines if r == role]
        assert mine and [k for k, _ in mine] == list(range(1, mine[0][1] + 1)), role
    assert "%|" not in err  # lines instead of bars


def test_build_quiet_prints_nothing(tmp_path, checkpoints, capsys) -> None:
    build(tmp_path, checkpoints, "-q")
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "engine:" in captured.out


def test_build_on_a_terminal_draws_one_bar_per_model(
    tmp_path, checkpoints, capsys, monkeypatch
) -> None:
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    build(tmp_path, checkpoints)
    err = term.getvalue()
    for role in ("target", "draft"):
        done = re.findall(rf"{role}: 100%\|[^|]*\| (\d+)/(\d+) ", err)
        assert done and done[-1][0] == done[-1][1], err[-2000:]
    assert "reading target" in err
    assert not TENSOR_LINE.search(err.replace("\r", "\n"))


def test_quiet_and_verbose_exclude_each_other(tmp_path, checkpoints) -> None:
    with pytest.raises(SystemExit) as exc:
        build(tmp_path, checkpoints, "-q", "-v")
    assert exc.value.code == 2


# ---- bench -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "target.engine"
    build_engine(checkpoints[0], out, draft_len=2, weights="f32", max_seq_len=64)
    return out


def bench(engine: Path, tmp_path: Path, *flags: str) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def fibonacci(n):\nfor i in range(10):\n")
    argv = ["bench", str(engine), "--prompts", str(prompts), "--n", "2", "--draft", "lookup"]
    argv += ["--draft-lens", "1", "--no-auto", "--temperatures", "0", "--max-new-tokens", "4"]
    argv += ["--threads", "2", "--out-dir", str(tmp_path), "--tag", "t", *flags]
    assert cli.main(argv) == 0
    assert (tmp_path / "spec_t.json").is_file()


def test_bench_lines_only_when_verbose(engine, tmp_path, capsys) -> None:
    bench(engine, tmp_path)
    err = capsys.readouterr().err
    assert not PROMPT_LINE.search(err) and "%|" not in err
    bench(engine, tmp_path, "-v")
    err = capsys.readouterr().err
    assert [m.group(1) for m in PROMPT_LINE.finditer(err)] == ["1", "2"], err


def test_bench_on_a_terminal_draws_a_bar_over_prompts_and_configs(
    engine, tmp_path, monkeypatch
) -> None:
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    bench(engine, tmp_path)
    err = term.getvalue()
    counts = re.findall(r"\| (\d)/4 ", err)  # 2 prompts x 2 configurations
    assert counts and counts[-1] == "4" and "100%" in err, err[-2000:]
    assert PROMPT_LINE.search(err)  # the latest prompt's speeds ride on the bar
