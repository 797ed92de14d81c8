"""Peers of ``trt-spec bench``: other engines run on the same GGUF pair and prompts (greedy).

* :mod:`.runs`: the peer table (``--peers`` names) and the orchestration (configurations,
  per-prompt runs, aggregation, comparison with trt-spec);
* :mod:`.llama_spec_runner`: llama.cpp's ``llama-speculative-simple`` / ``llama-completion``
  (binaries from ``benchmarks/peers/build_llama_cpp.sh``);
* :mod:`.transformers_assisted_runner`: transformers' assisted generation (torch);
* :mod:`.llama_cpp_runner`: ``llama_cpp.Llama`` decode timing, run as a script by the peer
  venv's Python for ``benchmarks/bench_decode.py``.

The runners are benchmark tools, never dependencies: they import only the standard library and
their own engine's package, and run on their own (``python -m trt_spec.bench.peers.<runner>``).
Importing this package imports none of them.
"""
