"""``trt-spec serve ENGINE --replicas N``: the OpenAI-compatible server on Ray Serve.

The application: an ingress (the HTTP routes, trt_spec.ray.ingress) in front of N engine
replicas (trt_spec.ray.deployment), each running ``trt-spec serve``'s app over its own Engine,
one GPU each where there are GPUs. The ingress's request router (trt_spec.ray.router) keeps a
conversation on the replica holding its prompt cache (session or prompt-prefix affinity), else
picks the least loaded replica; Serve autoscales between ``--min-replicas`` and
``--max-replicas`` on queue depth and restarts replicas that die. trt_spec.ray.launch starts
Ray (or joins ``--address``), deploys, and drains on SIGTERM. ``python -m trt_spec.ray ENGINE
[serve options]`` is ``trt-spec serve`` with one replica unless told otherwise.

Needs the ``ray`` extra (``pip install 'trt-spec[ray]'``: Ray Serve) and the ``server`` extra.
"""
