"""What the command line shows on stderr while it works: progress bars, status lines, details.

One :class:`Reporter` per command, in one of three modes:

``quiet`` (``-q``)
    nothing on stderr but warnings and errors;
``normal`` (the default)
    a few status lines ("reading target ...", "wrote ..."), plus tqdm progress bars when stderr
    is a terminal; when it is not (a pipe, a log file, CI) there are no bars, so logs hold no
    carriage-return noise;
``verbose`` (``-v``)
    status lines and one line per step (per tensor in ``build``, per prompt in ``bench``)
    instead of bars, terminal or not.

The engine and the builder never import this module: they take plain callbacks, which the
CLI (``cli.py``, ``bench``) points here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Literal, TextIO

Mode = Literal["quiet", "normal", "verbose"]


def mode_from_flags(quiet: bool, verbose: bool) -> Mode:
    """The mode of ``-q`` / ``-v`` (given both, ``-q`` wins: silence is what was asked)."""
    if quiet:
        return "quiet"
    return "verbose" if verbose else "normal"


def add_output_flags(p: argparse.ArgumentParser, detail: str) -> None:
    """``-q`` / ``-v`` (see trt_spec.progress); ``detail`` names what ``-v`` prints."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help=f"{detail} instead of progress bars (bars show only when stderr is a terminal)",
    )


class Reporter:
    """Routes a command's progress to stderr according to its mode (see the module docstring).

    ``stream`` defaults to ``sys.stderr`` as it is at each call (so pytest's capture sees it).
    """

    def __init__(self, mode: Mode = "normal", stream: TextIO | None = None) -> None:
        if mode not in ("quiet", "normal", "verbose"):
            raise ValueError(f"unknown progress mode {mode!r}")
        self.mode = mode
        self._stream = stream
        self._bars: dict[str, Any] = {}  # open tqdm bars by task; lines go around them

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def bars(self) -> bool:
        """Whether progress bars are drawn: normal mode on a terminal."""
        if self.mode != "normal":
            return False
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def _write(self, msg: str) -> None:
        if self._bars:
            from tqdm import tqdm

            tqdm.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def info(self, msg: str) -> None:
        """A status line: shown unless quiet."""
        if self.mode != "quiet":
            self._write(msg)

    def detail(self, msg: str) -> None:
        """A per-step line: shown only when verbose."""
        if self.mode == "verbose":
            self._write(msg)

    def step(
        self, key: str, done: int, total: int, line: str | None = None, unit: str = "it"
    ) -> None:
        """Step ``done`` of ``total`` of the task ``key`` is finished.

        Draws the task's bar (opened at its first step, closed at its last) when bars are shown,
        with ``line`` as its postfix; when verbose, prints ``line`` instead.
        """
        if line is not None:
            self.detail(line)
        if not self.bars:
            return
        bar = self._bars.get(key)
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, desc=key, unit=unit, file=self.stream, leave=True)
            self._bars[key] = bar
        bar.update(done - bar.n)
        if line is not None:
            bar.set_postfix_str(line, refresh=False)
        if done >= total:
            self.close(key)

    def close(self, key: str | None = None) -> None:
        """Closes the bar of ``key`` (every bar when None), e.g. after an error."""
        for k in [key] if key is not None else list(self._bars):
            bar = self._bars.pop(k, None)
            if bar is not None:
                bar.close()
