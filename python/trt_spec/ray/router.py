"""The engine deployment's request router: affinity first, else the least loaded replica.

:class:`AffinityRouter` runs inside the ingress's deployment handle. A call pinned to a replica
(the ingress's per-replica /metrics calls) goes there; a call with affinity to a live replica
(trt_spec.ray.affinity: its session, or the longest prefix of its prompt, went there last) goes
there while that replica has at most ``load_slack`` (default :data:`affinity.LOAD_SLACK`) more
requests in flight than the least loaded one; the rest go to the least loaded replica. Serve
tries the ranks in order and skips a full replica.

A replica's load: its requests in flight as Serve's queue-length cache holds them (else a
probe), plus the requests this router has just chosen it for that Serve has not yet confirmed
(so that a burst of requests arriving together is spread, not sent to the replica that looked
idle to all of them); ties are broken at random.

(Serve pickles this module by value into the handle: the shared state is used through the
``affinity`` module, which stays one module per process.)
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from trt_spec.ray import affinity
from trt_spec.ray.asgi import Call

_CHOSEN_TTL_S = 30.0  # an unconfirmed choice counts towards its replica's load this long


class AffinityRouter(RequestRouter):
    """The engine deployment's request router: a pinned call goes to its replica; a call with
    affinity to a live replica goes there unless that replica is more than LOAD_SLACK requests
    busier than the least loaded one; the rest go to the least loaded replica."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.slack = int(kwargs.get("load_slack", affinity.LOAD_SLACK))
        # request id -> (the replica chosen for it, when): choices Serve has not yet confirmed
        self._chosen: dict[str, tuple[str, float]] = {}
        affinity.ROUTERS.append(self)

    def replica_ids(self) -> list[str]:
        """The replicas this router can send to."""
        return [rid.unique_id for rid in self.curr_replicas]

    async def _loads(self, replicas: list[RunningReplica]) -> dict[str, float]:
        """Requests in flight per replica (Serve's cache, else a probe; unknown: last)."""
        loads: dict[str, float] = {}
        unknown = []
        for r in replicas:
            n = self.replica_queue_len_cache.get(r.replica_id)
            if n is None:
                unknown.append(r)
            else:
                loads[r.replica_id.unique_id] = n
        if unknown:
            for r, n in await self._probe_queue_lens(unknown, 0):
                loads[r.replica_id.unique_id] = float("inf") if n is None else n
        now = time.monotonic()
        for key, (_, when) in list(self._chosen.items()):
            if now - when > _CHOSEN_TTL_S:  # (a request whose routing was abandoned)
                del self._chosen[key]
        for rid, n in Counter(rid for rid, _ in self._chosen.values()).items():
            if rid in loads:
                loads[rid] += n
        return loads

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        if not by_id:
            return []
        call = next(
            (a for a in (pending_request.args if pending_request else ()) if isinstance(a, Call)),
            None,
        )
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # (a retry waits a little)
        if call is not None and call.replica is not None and call.replica in by_id:
            self._count(pending_request, affinity.ROUTE_PINNED)
            return [[by_id[call.replica]]]
        preferred, why = (None, affinity.ROUTE_LEAST_LOADED)
        if call is not None:
            preferred, why = affinity.TABLE.lookup(call, set(by_id))
        loads = await self._loads(candidate_replicas)
        ids = list(loads)
        random.shuffle(ids)  # (ties at random: preference's sort keeps this order)
        order = affinity.preference(preferred, {r: loads[r] for r in ids}, self.slack)
        if preferred is not None and order[0] != preferred:
            why = affinity.ROUTE_LEAST_LOADED  # (its replica is too busy)
        self._count(pending_request, why)
        if pending_request is not None:
            self._chosen[pending_request.metadata.internal_request_id] = (
                order[0],
                time.monotonic(),
            )
        # One replica per rank: Serve takes the first rank whose replica has room.
        return [[by_id[r]] for r in order]

    @staticmethod
    def _count(pending_request: PendingRequest | None, why: str) -> None:
        """Counts a request's first routing decision (a request retried after backoff is
        chosen for again)."""
        if pending_request is not None and not getattr(pending_request, "trt_spec_routed", False):
            pending_request.trt_spec_routed = True  # type: ignore[attr-defined]
            affinity.ROUTED[why] += 1

    def on_request_routed(self, pending_request: PendingRequest, replica_id: Any, result: Any):
        self._chosen.pop(pending_request.metadata.internal_request_id, None)

    def on_request_completed(self, replica_id: Any, internal_request_id: str) -> None:
        self._chosen.pop(internal_request_id, None)

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        affinity.TABLE.forget(replica_id.unique_id)
