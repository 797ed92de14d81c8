"""``python -m trt_spec.ray ENGINE [trt-spec serve options]``: ``trt-spec serve`` on Ray Serve
(one replica unless ``--replicas`` / ``--min-replicas`` / ``--max-replicas`` say otherwise)."""

from __future__ import annotations

import sys

from trt_spec import cli


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = ("--replicas", "--min-replicas", "--max-replicas")
    if not any(a.split("=", 1)[0] in flags for a in argv) and not {"-h", "--help"} & set(argv):
        argv += ["--replicas", "1"]
    return cli.main(["serve", *argv])


if __name__ == "__main__":
    sys.exit(main())
