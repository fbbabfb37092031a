"""coordination.k8s.io/v1 Leases: each replica's heartbeat, and the fan-out leader's election.

Two uses of the same object (docs/high-availability.md):

- `ReplicaLease`: every replica renews its own Lease (named after its identity, labelled
  `REPLICA_LEASE_LABEL`) every renew interval, and keeps an informer cache of every replica's
  Lease, so that `is_alive(replica)` needs no request: a replica is dead once its Lease's
  ``renewTime + leaseDurationSeconds`` is in the past by our clock, or it has no Lease. The
  margin (lease duration minus renew interval) must be larger than the clock skew between the
  replicas' hosts.
- `LeaderElector`: client-go's leader election (``tools/leaderelection``) over one Lease: every
  write carries the resourceVersion read (optimistic concurrency: of two candidates, one gets
  409), a candidate takes over another holder's Lease only after it has seen the Lease
  unchanged for its ``leaseDurationSeconds`` by its own clock (``observedTime``: no clock
  comparison between hosts), and a leader that cannot renew within the renew deadline stops
  leading before any other candidate can acquire (renew deadline < lease duration).

Times on the Lease are ``MicroTime`` (RFC 3339 with microseconds), as client-go writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import random
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from apiserver.clock import Clock, SystemClock
from apiserver.kube import paths
from apiserver.kube.client import KubeClient, KubeRejected, KubeUnavailable
from apiserver.kube.informer import Informer
from apiserver.timestamps import micro_time, parse_timestamp

log = logging.getLogger(__name__)

Object = dict[str, Any]

COORDINATION = "/apis/coordination.k8s.io/v1"
LEASES = "leases"
REPLICA_LEASE_LABEL = "notifier.x-k8s.io/replica-lease"
"""On every replica Lease (value "true"); the cache of replica Leases selects on it."""
REPLICA_LEASE_PREFIX = "container-notifier-replica-"
HOLDER_INDEX = "holder"
JITTER_FACTOR = 1.2
"""A candidate retries every retry period plus up to this much more of it (client-go's)."""
RELEASE_TIMEOUT_SECONDS = 2.0
"""At shutdown, how long releasing a Lease may take (it expires by itself otherwise)."""
_NAME_LIMIT = 253
_NOT_IN_A_NAME = re.compile(r"[^a-z0-9.-]+")


def whole_seconds(duration: float) -> int:
    """``leaseDurationSeconds`` of a duration: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(duration))


def replica_lease_name(identity: str) -> str:
    """The Lease of replica `identity`: ``container-notifier-replica-<identity>``, made a valid
    object name (lowercase, [a-z0-9.-]); an identity that had to be changed gets a digest of
    itself appended, so two identities never share a Lease."""
    cleaned = _NOT_IN_A_NAME.sub("-", identity.lower()).strip("-.")
    name = REPLICA_LEASE_PREFIX + cleaned
    if cleaned != identity or len(name) > _NAME_LIMIT:
        digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
        name = f"{name[:_NAME_LIMIT - 11].rstrip('-.')}-{digest}"
    return name


def _holder(lease: Object) -> list[str]:
    holder = (lease.get("spec") or {}).get("holderIdentity")
    return [holder] if holder else []


def _lease_object(namespace: str, name: str, spec: Object,
                  labels: dict[str, str] | None = None) -> Object:
    metadata: Object = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": spec}


def _error_text(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


class ReplicaLease:
    """This replica's heartbeat Lease, and the liveness of every replica (the ``Liveness``
    Protocol of notifier/housekeeping.py).

    `run()` creates the Lease (or takes over this identity's Lease left by an earlier process
    of the same replica), renews it every `renew_interval` (a failed renewal is logged and
    retried at the next interval) and runs the cache of replica Leases; cancel it to stop.
    `release()` then deletes the Lease (with a uid precondition, so it never deletes a newer
    one): the survivors see at once that this replica is gone, instead of after the lease
    duration. Call it only after this replica has ended its own runs.
    """

    def __init__(self, kube: KubeClient, namespace: str, identity: str, lease_duration: float,
                 renew_interval: float, clock: Clock | None = None) -> None:
        if not 0 < renew_interval < lease_duration:
            raise ValueError(f"replica lease: the renew interval ({renew_interval}s) must be "
                             f"positive and shorter than the lease duration ({lease_duration}s)")
        self.namespace = namespace
        self.identity = identity
        self.name = replica_lease_name(identity)
        self.lease_duration = lease_duration
        self.renew_interval = renew_interval
        self._kube = kube
        self._clock = clock or SystemClock()
        self._path = paths.namespaced(COORDINATION, namespace, LEASES, self.name)
        self._lease: Object | None = None
        """The Lease as last written (its resourceVersion is the next write's precondition)."""
        self.informer = Informer(
            kube, paths.namespaced(COORDINATION, namespace, LEASES), name="replica-leases",
            params={"labelSelector": f"{REPLICA_LEASE_LABEL}=true"},
            indexes={HOLDER_INDEX: _holder})

    @property
    def synced(self) -> bool:
        """Ready: this replica's Lease was written at least once and the cache has listed."""
        return self._lease is not None and self.informer.has_synced()

    def is_alive(self, replica: str) -> bool:
        """False once `replica`'s Lease expired (``renewTime + leaseDurationSeconds`` in the
        past by our clock) or if it has none. True until the cache has listed (nothing is
        known yet: no replica is declared dead on an empty cache)."""
        if not self.informer.has_synced():
            return True
        now = self._clock.now()
        for lease in self.informer.by_index(HOLDER_INDEX, replica):
            spec = lease.get("spec") or {}
            renewed = parse_timestamp(spec.get("renewTime"))
            duration = spec.get("leaseDurationSeconds")
            if renewed is not None and isinstance(duration, int) and renewed + duration > now:
                return True
        return False

    async def run(self) -> None:
        cache = asyncio.create_task(self.informer.run(), name="replica-lease-cache")
        try:
            while True:
                await self.renew()
                await self._clock.sleep(self.renew_interval)
        finally:
            cache.cancel()
            await asyncio.gather(cache, return_exceptions=True)

    async def renew(self) -> bool:
        """One renewal (creating the Lease if needed); False (logged) if it failed."""
        now = self._clock.now()
        try:
            if self._lease is not None:
                try:
                    self._lease = await self._kube.put(self._path, self._renewed(self._lease, now))
                    return True
                except KubeRejected as error:
                    if error.status_code not in (404, 409):
                        raise
                    self._lease = None  # deleted or changed by someone else: read it again
            self._lease = await self._create_or_take_over(now)
            return True
        except (KubeRejected, KubeUnavailable) as error:
            log.warning("renewing the replica lease failed; retrying", extra={
                "lease": self.name, "namespace": self.namespace,
                "retry_seconds": self.renew_interval, "error": _error_text(error)})
            return False

    async def release(self) -> None:
        """Delete this replica's Lease (only the one it wrote: a uid precondition); a failure
        is logged (the Lease then expires after its duration)."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        uid = lease["metadata"].get("uid")
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT_SECONDS):
                await self._kube.delete(self._path, {"preconditions": {"uid": uid}})
            log.info("released the replica lease", extra={"lease": self.name})
        except (KubeRejected, KubeUnavailable, TimeoutError) as error:
            log.warning("releasing the replica lease failed; it expires by itself", extra={
                "lease": self.name, "error": _error_text(error)})

    def _spec(self, now: float, acquired: str) -> Object:
        return {"holderIdentity": self.identity,
                "leaseDurationSeconds": whole_seconds(self.lease_duration),
                "acquireTime": acquired, "renewTime": micro_time(now)}

    def _renewed(self, lease: Object, now: float) -> Object:
        acquired = (lease.get("spec") or {}).get("acquireTime") or micro_time(now)
        metadata = dict(lease["metadata"])
        metadata["labels"] = {**(metadata.get("labels") or {}), REPLICA_LEASE_LABEL: "true"}
        return {**lease, "metadata": metadata, "spec": self._spec(now, acquired)}

    async def _create_or_take_over(self, now: float) -> Object:
        """Create the Lease; if it exists (an earlier process of this replica), overwrite it
        with the resourceVersion just read."""
        fresh = _lease_object(self.namespace, self.name, self._spec(now, micro_time(now)),
                              {REPLICA_LEASE_LABEL: "true"})
        try:
            return await self._kube.post(
                paths.namespaced(COORDINATION, self.namespace, LEASES), fresh)
        except KubeRejected as error:
            if error.status_code != 409:
                raise
        current = await self._kube.get(self._path)
        return await self._kube.put(self._path, {**self._renewed(current, now),
                                                 "spec": self._spec(now, micro_time(now))})


@dataclass(frozen=True)
class ElectionStatus:
    """What an elector knows, for logs and gauges."""

    leading: bool
    holder: str
    """The holder of the Lease as last observed ("" if none or unknown)."""
    transitions: int


class LeaderElector:
    """Leader election over the Lease `name` in `namespace`, as client-go's LeaderElector.

    `run(on_started_leading, on_stopped_leading)` campaigns until it acquires, calls
    `on_started_leading()` (as a task, while renewing goes on), renews every retry period and,
    once it cannot renew within the renew deadline (or sees another holder), stops leading:
    `on_stopped_leading()` is awaited, then it campaigns again. Cancelling `run()` stops
    leading the same way and then releases the Lease (holderIdentity emptied, client-go's
    ReleaseOnCancel), so another replica acquires at once.

    A leader's renew deadline counts from the start of its last successful renewal: it stops
    leading at most `renew_deadline` after that write was sent, while another candidate waits
    at least `lease_duration` after it saw that write; `lease_duration > renew_deadline` keeps
    the two apart (by the difference, less the clock-rate error). A process restarted with the
    same identity finds itself the holder and renews at once.
    """

    def __init__(self, kube: KubeClient, namespace: str, name: str, identity: str,
                 lease_duration: float, renew_deadline: float, retry_period: float,
                 clock: Clock | None = None, rand: Callable[[], float] = random.random) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(
                f"leader election: need lease duration ({lease_duration}s) > renew deadline "
                f"({renew_deadline}s) > retry period ({retry_period}s) > 0")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._kube = kube
        self._clock = clock or SystemClock()
        self._rand = rand
        self._path = paths.namespaced(COORDINATION, namespace, LEASES, name)
        self._lease: Object | None = None
        """The Lease as last read or written: the next write's resourceVersion."""
        self._observed: Object = {}
        """The Lease's spec as last observed (client-go's observedRecord)."""
        self._observed_raw = ""
        self._observed_time = 0.0
        """Our clock when the observed spec last changed (client-go's observedTime)."""
        self._renewed_at = 0.0
        """Our clock at the start of the last successful acquire or renewal."""
        self._leading = False

    @property
    def is_leader(self) -> bool:
        """True from acquiring until stopping leading (`on_stopped_leading` is called)."""
        return self._leading

    def status(self) -> ElectionStatus:
        return ElectionStatus(self._leading, str(self._observed.get("holderIdentity") or ""),
                              int(self._observed.get("leaseTransitions") or 0))

    async def run(self, on_started_leading: Callable[[], Coroutine[Any, Any, None]],
                  on_stopped_leading: Callable[[], Coroutine[Any, Any, None]]) -> None:
        while True:
            await self._acquire()
            self._leading = True
            log.info("started leading", extra={"lease": self.name, "identity": self.identity})
            started = asyncio.create_task(on_started_leading(), name="on-started-leading")
            cancelled = False
            try:
                await self._renew_until_lost()
            except asyncio.CancelledError:
                cancelled = True
                raise
            finally:
                self._leading = False
                started.cancel()
                await asyncio.gather(started, return_exceptions=True)
                log.info("stopped leading", extra={"lease": self.name,
                                                   "identity": self.identity})
                await on_stopped_leading()
                if cancelled:
                    await self._release()

    async def _acquire(self) -> None:
        while not await self.try_acquire_or_renew():
            await self._clock.sleep(self.retry_period * (1 + JITTER_FACTOR * self._rand()))

    async def _renew_until_lost(self) -> None:
        """Renew every retry period; return once renewing failed for the renew deadline."""
        while True:
            await self._clock.sleep(self.retry_period)
            deadline = self._renewed_at + self.renew_deadline
            while not await self._renew_before(deadline):
                if self._holder_is_another():
                    log.warning("another replica holds the lease; stopping leading", extra={
                        "lease": self.name, "holder": self._observed.get("holderIdentity")})
                    return
                remaining = deadline - self._clock.now()
                if remaining <= 0:
                    log.warning("could not renew the lease within the renew deadline; stopping "
                                "leading", extra={"lease": self.name,
                                                  "renew_deadline": self.renew_deadline})
                    return
                await self._clock.sleep(min(self.retry_period, remaining))

    async def _renew_before(self, deadline: float) -> bool:
        remaining = deadline - self._clock.now()
        if remaining <= 0:
            return False
        try:
            async with asyncio.timeout(remaining):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            return False

    def _holds(self) -> bool:
        return self._observed.get("holderIdentity") == self.identity

    def _holder_is_another(self) -> bool:
        holder = self._observed.get("holderIdentity")
        return bool(holder) and holder != self.identity

    def _lease_valid(self, now: float) -> bool:
        duration = self._observed.get("leaseDurationSeconds")
        return isinstance(duration, int) and self._observed_time + duration > now

    def _observe(self, spec: Object) -> None:
        raw = json.dumps(spec, sort_keys=True)
        if raw != self._observed_raw:
            self._observed, self._observed_raw = dict(spec), raw
            self._observed_time = self._clock.now()

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew): renew our Lease on the resourceVersion
        last seen (fast path), else read it and acquire it if it is free, expired (unchanged
        for its duration since we first saw it) or already ours. Any failure is False."""
        now = self._clock.now()
        record: Object = {"holderIdentity": self.identity,
                          "leaseDurationSeconds": whole_seconds(self.lease_duration),
                          "acquireTime": micro_time(now), "renewTime": micro_time(now),
                          "leaseTransitions": 0}
        if self._holds() and self._lease_valid(now) and self._lease is not None:
            record["acquireTime"] = self._observed.get("acquireTime") or record["acquireTime"]
            record["leaseTransitions"] = int(self._observed.get("leaseTransitions") or 0)
            if await self._write(record, now, fast=True):
                return True
        try:
            current = await self._kube.get(self._path)
        except KubeRejected as error:
            if error.status_code != 404:
                return self._failed("reading the lease", error)
            return await self._create(record, now)
        except KubeUnavailable as error:
            return self._failed("reading the lease", error)
        self._lease = current
        self._observe(current.get("spec") or {})
        if (self._observed.get("holderIdentity") and self._lease_valid(now)
                and not self._holds()):
            return False
        if self._holds():
            record["acquireTime"] = self._observed.get("acquireTime") or record["acquireTime"]
            record["leaseTransitions"] = int(self._observed.get("leaseTransitions") or 0)
        else:
            record["leaseTransitions"] = int(self._observed.get("leaseTransitions") or 0) + 1
        return await self._write(record, now, fast=False)

    async def _write(self, record: Object, now: float, fast: bool) -> bool:
        assert self._lease is not None
        try:
            self._lease = await self._kube.put(self._path, {**self._lease, "spec": record})
        except (KubeRejected, KubeUnavailable) as error:
            if fast:
                log.info("renewing the lease on the version last seen failed; reading it",
                         extra={"lease": self.name, "error": _error_text(error)})
                return False
            return self._failed("writing the lease", error)
        self._observe(record)
        self._renewed_at = now
        return True

    async def _create(self, record: Object, now: float) -> bool:
        try:
            self._lease = await self._kube.post(
                paths.namespaced(COORDINATION, self.namespace, LEASES),
                _lease_object(self.namespace, self.name, record))
        except (KubeRejected, KubeUnavailable) as error:
            return self._failed("creating the lease", error)
        self._observe(record)
        self._renewed_at = now
        return True

    def _failed(self, what: str, error: Exception) -> bool:
        conflict = isinstance(error, KubeRejected) and error.status_code == 409
        (log.info if conflict else log.warning)(
            f"leader election: {what} failed" + ("; another replica wrote it first"
                                                 if conflict else ""),
            extra={"lease": self.name, "identity": self.identity, "error": _error_text(error)})
        return False

    async def _release(self) -> None:
        """Give the Lease up (holderIdentity emptied, duration 1 s), if we still hold it."""
        if not self._holds() or self._lease is None:
            return
        now = self._clock.now()
        record = {"holderIdentity": "", "leaseDurationSeconds": 1,
                  "acquireTime": micro_time(now), "renewTime": micro_time(now),
                  "leaseTransitions": int(self._observed.get("leaseTransitions") or 0)}
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RELEASE_TIMEOUT_SECONDS):
                if await self._write(record, now, fast=False):
                    log.info("released the leader lease", extra={"lease": self.name})
