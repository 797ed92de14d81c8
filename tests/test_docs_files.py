"""The documents name files that exist, and stay lean.

Every file or folder that README.md and benchmarks/README.md name (in backticks, in links, and
in code blocks where a token starts with a top-level folder of the repository or names a source
file) must exist: a
results file named bare (`prefill_s29.md`) in benchmarks/results/, another bare file name
anywhere in the repository, a path relative to the repository, to the document's folder, or as
the tail of a repository path (`peers/runs.py`). Names with placeholders (`spec_<tag>.json`,
`*.safetensors`, `$M/...`) and files outside the repository (Hugging Face's `config.json`, a
GPU run's `calibration.json`) are not checked. README.md is at most 300 lines and
benchmarks/results/ holds at most 40 files (the latest run of each benchmark, the runs the
documents and tests name, and HISTORY.md; older runs are in git history).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "benchmarks/README.md")
RESULTS = REPO / "benchmarks" / "results"
TOP = ("cpp/", "python/", "tests/", "benchmarks/", "build_scripts/", "third_party/", ".ci/")
CODE_EXTS = (".py", ".h", ".cuh", ".cu", ".cpp", ".sh")
EXTS = (".py", ".h", ".cuh", ".cu", ".cpp", ".sh", ".md", ".json", ".jsonl", ".txt", ".png")
RESULT_NAME = re.compile(
    r"^(decode|prefill|spec|server|gpu|memory|draft_window|lookup_bound|verify_rows|matmul|fuzz"
    r"|exactness)[\w.-]*\.(md|json|png|txt)$"
)
# Names of things outside the repository: a Hugging Face folder's files, a GPU run's outputs,
# the peer project.
EXTERNAL = {
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "calibration.json",
    "gpu_logs",
    "llama.cpp",
}
SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache", "gpu_logs"}


def repo_paths() -> set[str]:
    """Every file and folder of the checkout, relative, with '/' separators."""
    out: set[str] = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        rel = Path(root).relative_to(REPO).as_posix()
        if rel != ".":
            out.add(rel)
        out.update(f"{rel}/{f}" if rel != "." else f for f in files)
    return out


def candidates(text: str) -> list[str]:
    """The path-like names of a markdown text: inline code, link targets, and the tokens of code
    blocks that start with a top-level folder or end in a source file's extension."""
    names: list[str] = []
    parts = re.split(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    for i, part in enumerate(parts):
        if i % 2:  # a fenced code block
            tokens = [t.rstrip(".,;:)") for t in re.split(r"[\s=\"'(]+", part)]
            names += [t for t in tokens if t.startswith(TOP) or t.endswith(CODE_EXTS)]
        else:
            names += re.findall(r"`([^`\n]+)`", part)
            names += re.findall(r"\]\(([^)\s#]+)", part)
    return names


def unresolved(text: str, doc_dir: str, paths: set[str]) -> list[str]:
    """The names in `text` (a document in the folder `doc_dir`, relative) that name no file."""
    basenames = {p.rsplit("/", 1)[-1] for p in paths}
    bad = []
    for raw in candidates(text):
        name = raw.strip().rstrip(".,;:)").removeprefix("./")
        if not name or any(c in name for c in "<>*{}$~ |") or "://" in name:
            continue
        if name.startswith(("/", "-", "#")) or name.rstrip("/").rsplit("/", 1)[-1] in EXTERNAL:
            continue
        slash = "/" in name.rstrip("/")
        if not slash:
            if not name.endswith(EXTS) or name.startswith("."):  # `.md`: an extension
                continue
            ok = (RESULTS / name).is_file() if RESULT_NAME.match(name) else name in basenames
        else:
            if not (name.startswith(TOP) or name.startswith("results/") or name.endswith(EXTS)):
                continue  # `org/name` model ids and the like
            rel = name.rstrip("/")
            local = os.path.normpath(f"{doc_dir}/{rel}") if doc_dir else rel
            ok = rel in paths or local in paths or any(p.endswith("/" + rel) for p in paths)
        if not ok:
            bad.append(name)
    return bad


def test_documents_name_only_files_that_exist() -> None:
    paths = repo_paths()
    for doc in DOCS:
        text = (REPO / doc).read_text(encoding="utf-8")
        assert len(candidates(text)) >= 20, f"{doc}: too few names parsed; the parser is broken"
        bad = unresolved(text, os.path.dirname(doc), paths)
        assert not bad, f"{doc} names files that do not exist: {sorted(set(bad))}"


def test_readme_names_the_results_it_cites() -> None:
    """The Performance table's result files are checked (not skipped as bare names)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    cited = {n for n in candidates(text) if RESULT_NAME.match(n)}
    assert len(cited) >= 5, cited
    assert all((RESULTS / n).is_file() for n in cited)


def test_the_check_catches_missing_names() -> None:
    paths = repo_paths()
    text = (
        "Run `build_scripts/fuzz_formats.sh`, see `prefill_s1-missing.md` and "
        "[the log](results/spec_missing.json); `bench_gone.py`.\n"
        "```\npython benchmarks/no_such_script.py --x 1\nbuild_scripts/   old_tool.sh: gone\n```\n"
        "Fine: `build_scripts/fuzz_formats.py`, `spec_q4_t0.json`, `config.json`, `org/name`, "
        "`spec_<tag>.json`, `peers/runs.py`.\n"
    )
    assert sorted(unresolved(text, "benchmarks", paths)) == [
        "bench_gone.py",
        "benchmarks/no_such_script.py",
        "build_scripts/fuzz_formats.sh",
        "old_tool.sh",
        "prefill_s1-missing.md",
        "results/spec_missing.json",
    ]


def test_readme_is_at_most_300_lines() -> None:
    n = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 300, f"README.md has {n} lines (at most 300: the dated log goes to HISTORY.md)"


def test_results_folder_is_lean() -> None:
    files = [
        p
        for p in RESULTS.rglob("*")
        if p.is_file()
        and not p.name.startswith(".")
        and "gpu_logs" not in p.relative_to(RESULTS).parts
    ]
    assert len(files) <= 40, (
        f"benchmarks/results/ holds {len(files)} files (at most 40): keep the latest run of each "
        "benchmark and the runs the documents and tests name; the dated log is HISTORY.md"
    )
