"""What a ``--target`` / ``--draft`` value names, and where its files are on this machine.

In order of precedence, a value is:

1. a local path (a GGUF file or a Hugging Face model folder) when one exists under that name;
2. the name of a model in trt-spec's registry (:data:`trt_spec.models.MODELS`), fetched on
   demand into trt-spec's cache;
3. a Hugging Face Hub model id, ``org/name`` (a safetensors model: its ``config.json``,
   tokenizer files and ``*.safetensors``; draft heads without ``*.safetensors``: their
   ``pytorch_model.bin`` or ``medusa_lm_head.pt``), or ``org/name:path/in/repo.gguf`` (one
   GGUF file of the repository). Files come through ``huggingface_hub`` and its cache
   (``HF_HUB_CACHE``, ``HF_HOME``); ``revision`` picks a branch, tag or commit. Offline
   (``offline=True`` or ``HF_HUB_OFFLINE=1``) only the cache is read.

Anything else, and every Hub failure (not cached while offline, no such repository, revision
or file), is a :class:`~trt_spec.builder.source.BuildError` with a one-line message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from trt_spec import models
from trt_spec.builder.source import BuildError

Progress = Callable[[str], None]

#: ``org/name`` with an optional ``:file.gguf`` (the file may sit in a folder of the repo).
_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?::(?P<file>[^:]+\.gguf))?$")
#: The files a safetensors model needs (config, weights, tokenizer, chat template).
HF_MODEL_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.jinja"]
#: Draft heads published as PyTorch checkpoints only (EAGLE-3's ``pytorch_model.bin``, Medusa's
#: ``medusa_lm_head.pt``): fetched when a repository of heads has no ``*.safetensors``.
HEADS_CHECKPOINT_FILES = ["pytorch_model*.bin", "medusa_lm_head.pt", "medusa_lm_head.bin"]


def parse_hub_id(value: str) -> tuple[str, str | None] | None:
    """``(repo_id, gguf file or None)`` of a Hub model id, or None when ``value`` is not one."""
    m = _HUB_ID.match(value)
    if m is None or "--" in m["repo"] or ".." in m["repo"] or len(m["repo"]) > 96:
        return None
    return m["repo"], m["file"]


def offline_mode(flag: bool | None = None) -> bool:
    """``flag`` if given, else whether ``HF_HUB_OFFLINE`` is set to a true value."""
    if flag is not None:
        return flag
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def resolve_checkpoint(
    value: str | os.PathLike[str],
    *,
    revision: str | None = None,
    offline: bool | None = None,
    progress: Progress | None = None,
    hub_bars: bool = False,
) -> Path:
    """The local path of the checkpoint ``value`` names (see the module docstring).

    ``revision`` applies to Hub ids only; ``hub_bars`` lets ``huggingface_hub`` draw its
    download bars.
    """
    text = os.fspath(value)
    local = Path(text).expanduser()
    hub = parse_hub_id(text)
    if local.exists() or (hub is None and text not in models.MODELS):
        if revision is not None:
            raise BuildError(f"--revision applies to Hugging Face model ids, not to {text}")
        return local  # open_source() reports a missing path in its own words
    if text in models.MODELS:
        if revision is not None:
            raise BuildError(f"--revision applies to Hugging Face model ids, not to {text}")
        return models.fetch_model(text, progress=progress)
    assert hub is not None
    return hub_download(hub[0], hub[1], revision, offline_mode(offline), progress, hub_bars)


def hub_download(
    repo_id: str,
    filename: str | None,
    revision: str | None,
    offline: bool,
    progress: Progress | None = None,
    bars: bool = False,
) -> Path:
    """One GGUF file (``filename``) or the safetensors model files of a Hub repository, from
    the Hugging Face cache (downloaded into it first unless ``offline``)."""
    import huggingface_hub
    from huggingface_hub import constants, errors
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    what = f"{repo_id}:{filename}" if filename else repo_id
    at = f" at revision {revision!r}" if revision else ""
    if progress is not None and not offline:
        progress(f"{what}{at}: fetching from the Hugging Face Hub (or its cache)")
    was_disabled = are_progress_bars_disabled()
    if not bars:
        disable_progress_bars()
    try:
        if filename is not None:
            path = Path(
                huggingface_hub.hf_hub_download(
                    repo_id, filename, revision=revision, local_files_only=offline
                )
            )
        else:

            def snapshot(patterns: list[str]) -> Path:
                return Path(
                    huggingface_hub.snapshot_download(
                        repo_id,
                        revision=revision,
                        allow_patterns=patterns,
                        local_files_only=offline,
                    )
                )

            path = snapshot(HF_MODEL_FILES)
            if _heads_without_safetensors(path):
                path = snapshot(HEADS_CHECKPOINT_FILES)
    except errors.LocalEntryNotFoundError:
        how = (
            "offline mode is on (--offline or HF_HUB_OFFLINE)"
            if offline
            else "the Hugging Face Hub cannot be reached"
        )
        raise BuildError(
            f"{what}{at} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {how}; "
            "download it once with network access, or give a local path"
        ) from None
    except errors.GatedRepoError:
        raise BuildError(f"{repo_id}: a gated repository; request access and log in") from None
    except errors.RepositoryNotFoundError:
        raise BuildError(
            f"{repo_id}: no such model on the Hugging Face Hub (or it is private: log in first)"
        ) from None
    except errors.RevisionNotFoundError:
        raise BuildError(f"{repo_id}: no revision {revision!r}") from None
    except errors.EntryNotFoundError:
        raise BuildError(f"{repo_id}{at} has no file {filename!r}") from None
    except (errors.HFValidationError, errors.HfHubHTTPError, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise BuildError(f"{what}: Hugging Face Hub: {first}") from None
    finally:
        if not bars and not was_disabled:
            enable_progress_bars()
    if filename is None and not (path / "config.json").is_file():
        ggufs = sorted(p.name for p in path.rglob("*.gguf"))
        name = ggufs[0] if ggufs else "FILE.gguf"
        raise BuildError(
            f"{repo_id}{at}: no config.json, so not a safetensors model; for a GGUF file of "
            f"the repository write {repo_id}:{name}"
        )
    return path


def _heads_without_safetensors(folder: Path) -> bool:
    """Whether a fetched snapshot is draft heads (draft_heads.py) whose weights are not in
    ``*.safetensors``: their PyTorch checkpoint is still to fetch."""
    from trt_spec.builder.draft_heads import is_heads

    return (
        (folder / "config.json").is_file()
        and not any(folder.glob("*.safetensors"))
        and is_heads(folder)
    )
