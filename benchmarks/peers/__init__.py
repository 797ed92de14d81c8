"""Peers of ``benchmarks/bench_peers.py``: other engines run on the same GGUF pair and prompts
(greedy), beside ``trt-spec bench``'s own runs. Repository tools, not part of the package.

* :mod:`.runs`: the peer table (``--peers`` names) and the orchestration (configurations,
  per-prompt runs, aggregation, comparison with trt-spec);
* :mod:`.llama_spec_runner`: llama.cpp's ``llama-speculative-simple`` / ``llama-completion``
  (binaries from ``benchmarks/peers/build_llama_cpp.sh``);
* :mod:`.transformers_assisted_runner`: transformers' assisted generation (torch);
* :mod:`.llama_cpp_runner`: ``llama_cpp.Llama`` decode timing, run as a script by the peer
  venv's Python for ``benchmarks/bench_decode.py``.

The runners import only the standard library and their own engine's package, and run on their
own (``python benchmarks/peers/<runner>.py``). Importing this package imports none of them.
Scripts in ``benchmarks/`` import it as ``peers`` (their folder is first on ``sys.path``).
"""
