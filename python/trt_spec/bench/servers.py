"""Server subprocesses for the serving benchmarks: `trt-spec serve` and llama.cpp's `llama-server`.

One definition of how a benchmark starts a server, waits for it, stops it and reads its CPU time,
and of the two servers' command lines, so that every serving benchmark (bench_server, bench_ray,
bench_load) runs the peers with the same settings.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


class ServerProcess:
    """A server subprocess on 127.0.0.1:`port`, its output in `log`; ready once GET /health
    answers 200 (wait_ready; the constructor waits unless wait=False)."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        port: int,
        log: Path,
        env: dict[str, str] | None = None,
        wait: bool = True,
        timeout: float = 600.0,
    ) -> None:
        self.name, self.cmd, self.port = name, cmd, port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = Path(log)
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if wait:
            try:
                self.wait_ready(timeout)
            except BaseException:
                self.stop()
                raise

    def wait_ready(self, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}; see {self.log_path}"
                )
            if get(self.url + "/health", timeout=2.0)[0] == 200:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not become ready in {timeout:.0f} s")

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server's live process tree so far."""
        import psutil

        total = 0.0
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return total
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def stop(self, timeout: float = 120.0) -> None:
        """SIGTERM (the servers drain), then SIGKILL after `timeout` seconds."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def trt_serve_command(engine: str, port: int, *extra: str) -> list[str]:
    """`trt-spec serve ENGINE` on `port`, served as model "m", logging warnings only."""
    cmd = [sys.executable, "-m", "trt_spec.cli", "serve", str(engine), "--port", str(port)]
    return [*cmd, "--served-model-name", "m", "--log-level", "warning", *extra]


def start_trt_server(engine: str, log: Path, *extra: str) -> ServerProcess:
    """`trt-spec serve ENGINE` on a free port (trt_serve_command with `extra`), ready."""
    port = free_port()
    return ServerProcess("trt-spec", trt_serve_command(engine, port, *extra), port, log)


def llama_server_command(
    binary: Path,
    target: str,
    port: int,
    *,
    threads: int,
    slots: int,
    ctx_per_slot: int,
    draft: str | None = None,
    draft_max: int | None = None,
    metrics: bool = False,
) -> list[str]:
    """`llama-server -m TARGET` with `slots` parallel slots of `ctx_per_slot` tokens, served as
    model "m"; with `draft`, speculative with that draft GGUF (`--spec-type draft-simple`:
    without it llama-server loads the draft and never drafts; its other draft settings are its
    own defaults unless `draft_max`)."""
    cmd = [str(binary), "-m", target, "--port", str(port), "--no-webui", "--alias", "m"]
    cmd += ["-t", str(threads), "-tb", str(threads), "-np", str(slots)]
    cmd += ["-c", str(ctx_per_slot * slots)]
    if metrics:
        cmd.append("--metrics")
    if draft:
        cmd += ["--model-draft", draft, "--spec-type", "draft-simple"]
        cmd += ["-td", str(threads), "-tbd", str(threads)]
        if draft_max is not None:
            cmd += ["--spec-draft-n-max", str(draft_max)]
    return cmd


def start_llama_server(
    binary: Path, target: str, name: str, log: Path, *, wait: bool = True, **options: Any
) -> ServerProcess:
    """`llama-server` on a free port (llama_server_command's `options`), its shared libraries
    beside the binary."""
    port = free_port()
    cmd = llama_server_command(binary, target, port, **options)
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(binary).parent))
    return ServerProcess(name, cmd, port, log, env, wait=wait)
