"""Kubernetes Events (events.k8s.io/v1), recorded the way client-go's event recorder does.

`EventRecorder.emit` never blocks and never raises: an occurrence goes into a bounded queue
(full: dropped and counted) that `EventRecorder.run`, a background task, drains. There:

- **series**: an occurrence like one recorded in the last `series_window_seconds` (same
  regarding and related objects, type, reason, action and note class) creates no new Event; it
  increments that Event's `series.count`, moves its `series.lastObservedTime` and makes its
  note the series' latest, written by one merge patch at most once per
  `series_patch_interval_seconds` per Event (coalesced: a busy series costs one write per
  interval however many occurrences it counts). events.k8s.io/v1 refuses to change a note
  ("field is immutable"), so a patch that changes it goes through the core/v1 view of the same
  object, where the note is `message` and may change; a patch of the count alone goes through
  events.k8s.io/v1;
- **rate limits** on new Events and on series patches: a token bucket per regarding object
  (client-go's spam filter defaults: burst 25, one token back per 300 s) and one per kind of
  regarding object (the global cap: burst 100, 10 per second), so that a fan-out over
  thousands of pods writes a bounded number of Events and cannot starve the Events of other
  kinds (a Notification's own Events get through while its pods' are capped);
- **failures** to write are counted and logged (at most one warning a minute per kind of
  failure, the rest at debug): they never reach the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from apiserver.kube import paths
from apiserver.kube.client import KubeRejected, KubeUnavailable

log = logging.getLogger(__name__)

API_VERSION = "events.k8s.io/v1"
NORMAL, WARNING = "Normal", "Warning"
MAX_NOTE_BYTES = 1024
"""events.k8s.io/v1 refuses a longer note."""
MAX_FIELD_CHARS = 128
"""reason, action, reportingController and reportingInstance: at most 128 characters."""
MAX_NAME_CHARS = 253
MERGE_PATCH = "application/merge-patch+json"
LOG_INTERVAL_SECONDS = 60.0

QUEUE_FULL, RATE_LIMITED = "queue_full", "rate_limited"
"""Why an occurrence was dropped (the `cause` label of the dropped counter)."""
CREATE, PATCH = "create", "patch"
"""Which write (the `operation` label of the written and write-failure counters)."""


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (`regarding`) or mentions (`related`)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def to_json(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, "uid": self.uid}


@dataclass(frozen=True)
class Occurrence:
    """Something that happened: one Event, or one more of a series."""

    regarding: ObjectRef
    type: str
    """NORMAL or WARNING."""
    reason: str
    action: str
    note: str
    related: ObjectRef | None = None
    note_class: str | None = None
    """What makes occurrences with different notes one series (e.g. the failure reason of
    many pods); None: the note itself. The series' Event shows the note of its latest
    occurrence (once patched)."""

    @property
    def series_key(self) -> tuple[Any, ...]:
        return (self.regarding, self.related, self.type, self.reason, self.action,
                self.note if self.note_class is None else self.note_class)


class EventSink(Protocol):
    """What emitters need: hand over an occurrence, never blocking, never raising."""

    def emit(self, occurrence: Occurrence) -> None: ...


class EventWriter(Protocol):
    """What the recorder needs of `apiserver.kube.KubeClient`."""

    async def post(self, path: str, body: Mapping[str, Any],
                   params: Mapping[str, str] | None = None) -> dict[str, Any]: ...

    async def patch(self, path: str, body: Mapping[str, Any],
                    content_type: str = MERGE_PATCH) -> dict[str, Any]: ...


class EventMetrics(Protocol):
    """What the recorder counts (``apiserver.serving.metrics.Metrics``)."""

    def event_written(self, operation: str) -> None: ...

    def event_dropped(self, cause: str) -> None: ...

    def event_write_failed(self, operation: str) -> None: ...


@dataclass(frozen=True)
class Limits:
    queue_size: int = 1000
    """Occurrences waiting to be written (client-go: 1000)."""
    per_object_burst: int = 25
    per_object_refill_seconds: float = 300.0
    """One token back per this many seconds (client-go's spam filter: 25, 1/300 s)."""
    per_kind_burst: int = 100
    per_kind_per_second: float = 10.0
    series_window_seconds: float = 360.0
    """A series with no occurrence for this long ends (client-go: 6 minutes)."""
    series_patch_interval_seconds: float = 30.0
    """The least time between two writes of one Event: a series counting occurrences is
    patched (count, last time, latest note) at most once per interval, so a busy series costs
    one write per interval whatever its rate, and the newest occurrence shows at most this
    late. client-go refreshes a series every 30 minutes, which hides the newest run far too
    long; 30 s keeps it current for a person watching `kubectl events` while bounding a pod
    notified every second to 2 writes a minute (an occurrence after a quiet interval is
    patched at once). `drain` writes what is pending at shutdown."""
    cache_size: int = 4096
    """Series and per-object buckets kept (least recently used dropped; client-go: 4096)."""


class TokenBucket:
    def __init__(self, burst: int, per_second: float, now: float) -> None:
        self._burst = float(burst)
        self._per_second = per_second
        self._tokens = float(burst)
        self._at = now

    def available(self, now: float) -> bool:
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_second)
        self._at = now
        return self._tokens >= 1.0

    def take(self) -> None:
        """Use a token; call only after `available` said there is one."""
        self._tokens -= 1.0


@dataclass
class _Series:
    namespace: str
    name: str
    """The Event object's name."""
    kind: str
    """The regarding object's kind (its per-kind bucket)."""
    count: int
    last_observed: float
    """Monotonic time of the last occurrence."""
    last_observed_time: str
    note: str
    """The latest occurrence's note (cut to what the API accepts)."""
    written_count: int
    written_note: str
    last_patch: float

    def patch(self) -> tuple[str, dict[str, Any]]:
        """Where and what to merge-patch: the count and last time, through events.k8s.io/v1;
        with the latest note too if it changed since the last write, through core/v1 (see the
        module docstring)."""
        series = {"series": {"count": self.count, "lastObservedTime": self.last_observed_time}}
        if self.note == self.written_note:
            return events_path(self.namespace, self.name), series
        return core_events_path(self.namespace, self.name), {**series, "message": self.note}


class _LogLimiter:
    """At most one warning per `interval` per kind of failure; the others at debug, counted
    in the next warning."""

    def __init__(self, clock: Callable[[], float], interval: float = LOG_INTERVAL_SECONDS):
        self._clock = clock
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def failure(self, kind: str, message: str, extra: Mapping[str, Any]) -> None:
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            log.debug(message, extra=dict(extra))
            return
        self._last[kind] = now
        suppressed = self._suppressed.pop(kind, 0)
        log.warning(message, extra={**extra, "similar_since_last_warning": suppressed})


def micro_time(moment: datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_note(note: str) -> str:
    encoded = note.encode()
    if len(encoded) <= MAX_NOTE_BYTES:
        return note
    return encoded[:MAX_NOTE_BYTES - 3].decode(errors="ignore") + "..."


EVENTS_API = "/apis/events.k8s.io/v1"


def events_path(namespace: str, name: str = "") -> str:
    return paths.namespaced(EVENTS_API, namespace, "events", name)


def core_events_path(namespace: str, name: str) -> str:
    """The same Event in the core/v1 API (only to patch its note, as `message`)."""
    return paths.namespaced(paths.CORE, namespace, "events", name)


class EventRecorder:
    """Writes occurrences as Events, reported by `controller` from replica `instance`."""

    def __init__(self, kube: EventWriter, controller: str, instance: str,
                 metrics: EventMetrics, limits: Limits | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._kube = kube
        self._controller = controller[:MAX_FIELD_CHARS]
        self._instance = instance[:MAX_FIELD_CHARS]
        self._metrics = metrics
        self._limits = limits or Limits()
        self._clock = clock
        self._wall = wall
        self._queue: asyncio.Queue[Occurrence] = asyncio.Queue(self._limits.queue_size)
        self._series: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self._dirty: set[tuple[Any, ...]] = set()
        """Keys of series whose count moved since their last write."""
        self._object_buckets: OrderedDict[ObjectRef, TokenBucket] = OrderedDict()
        self._kind_buckets: dict[str, TokenBucket] = {}
        self._failures = _LogLimiter(clock)
        self._last_name_ns = 0

    def emit(self, occurrence: Occurrence) -> None:
        try:
            self._queue.put_nowait(occurrence)
        except asyncio.QueueFull:
            self._metrics.event_dropped(QUEUE_FULL)
            self._failures.failure(QUEUE_FULL, "event queue full; event dropped", {
                "reason": occurrence.reason, "regarding": occurrence.regarding.name})

    async def run(self) -> None:
        """Write queued occurrences and due series patches, until cancelled."""
        while True:
            occurrence = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._until_next_patch()):
                    occurrence = await self._queue.get()
            if occurrence is not None:
                await self._record(occurrence)
            await self._patch_due(force=False)

    def _until_next_patch(self) -> float | None:
        """Seconds until the earliest pending series patch is due (None: none pending); at
        least the time a kind's bucket takes to give a token back, so that a patch waiting
        for a token is not retried in a busy loop."""
        pending = [self._series[key].last_patch for key in self._dirty if key in self._series]
        if not pending:
            return None
        due = min(pending) + self._limits.series_patch_interval_seconds - self._clock()
        return max(due, 1.0 / self._limits.per_kind_per_second)

    async def drain(self) -> None:
        """Write everything queued and every pending series count and note now, whatever the
        patch interval (at shutdown, after `run` was cancelled; bound it with a timeout)."""
        while not self._queue.empty():
            await self._record(self._queue.get_nowait())
        await self._patch_due(force=True)

    async def _record(self, occurrence: Occurrence) -> None:
        now = self._clock()
        key = occurrence.series_key
        series = self._series.get(key)
        if series is not None and now - series.last_observed <= (
                self._limits.series_window_seconds):
            series.count += 1
            series.last_observed = now
            series.last_observed_time = micro_time(self._wall())
            series.note = truncate_note(occurrence.note)
            self._series.move_to_end(key)
            self._dirty.add(key)
            return
        self._series.pop(key, None)
        self._dirty.discard(key)
        if not self._allowed(occurrence.regarding, now):
            self._metrics.event_dropped(RATE_LIMITED)
            self._failures.failure(RATE_LIMITED, "event rate limit reached; event dropped", {
                "reason": occurrence.reason, "regarding_kind": occurrence.regarding.kind,
                "regarding": occurrence.regarding.name})
            return
        body = self._event(occurrence)
        try:
            await self._kube.post(events_path(occurrence.regarding.namespace), body)
        except Exception as error:
            self._write_failed(CREATE, error, occurrence.regarding)
            return
        self._metrics.event_written(CREATE)
        self._series[key] = _Series(
            namespace=occurrence.regarding.namespace, name=body["metadata"]["name"],
            kind=occurrence.regarding.kind, count=1, last_observed=now,
            last_observed_time=body["eventTime"], note=body["note"], written_count=1,
            written_note=body["note"], last_patch=now)
        self._forget_oldest(self._series)

    def _allowed(self, regarding: ObjectRef, now: float) -> bool:
        """Take a token from the object's bucket and its kind's, if both have one."""
        limits = self._limits
        bucket = self._object_buckets.get(regarding)
        if bucket is None:
            bucket = self._object_buckets[regarding] = TokenBucket(
                limits.per_object_burst, 1.0 / limits.per_object_refill_seconds, now)
            self._forget_oldest(self._object_buckets)
        self._object_buckets.move_to_end(regarding)
        kind = self._kind_bucket(regarding.kind, now)
        if not (bucket.available(now) and kind.available(now)):
            return False
        bucket.take()
        kind.take()
        return True

    def _kind_bucket(self, kind: str, now: float) -> TokenBucket:
        bucket = self._kind_buckets.get(kind)
        if bucket is None:
            bucket = self._kind_buckets[kind] = TokenBucket(
                self._limits.per_kind_burst, self._limits.per_kind_per_second, now)
        return bucket

    def _forget_oldest(self, cache: OrderedDict[Any, Any]) -> None:
        while len(cache) > self._limits.cache_size:
            cache.popitem(last=False)

    async def _patch_due(self, force: bool) -> None:
        """Patch every series whose count moved, once per patch interval (each patch takes a
        token of the regarding kind's bucket; without one it waits for the next round)."""
        now = self._clock()
        for key in list(self._dirty):
            series = self._series.get(key)
            if series is None or series.count <= series.written_count:
                self._dirty.discard(key)
                continue
            if not force and now - series.last_patch < self._limits.series_patch_interval_seconds:
                continue
            bucket = self._kind_bucket(series.kind, now)
            if not bucket.available(now):
                continue
            bucket.take()
            series.last_patch = now
            count, note = series.count, series.note
            path, patch = series.patch()
            try:
                await self._kube.patch(path, patch, MERGE_PATCH)
            except KubeUnavailable as error:
                self._write_failed(PATCH, error, None, series.name)  # retried next round
                continue
            except Exception as error:
                # Gone (expired, deleted) or refused: the next occurrence starts a new Event.
                self._write_failed(PATCH, error, None, series.name)
                if self._series.get(key) is series:
                    del self._series[key]
                self._dirty.discard(key)
                continue
            series.written_count, series.written_note = count, note
            if series.count == count:
                self._dirty.discard(key)
            self._metrics.event_written(PATCH)

    def _write_failed(self, operation: str, error: Exception, regarding: ObjectRef | None,
                      event: str = "") -> None:
        self._metrics.event_write_failed(operation)
        status = f" ({error.status_code})" if isinstance(error, KubeRejected) else ""
        self._failures.failure(f"{operation}{status}", f"writing an event failed ({operation})",
                               {"event": event or (regarding.name if regarding else ""),
                                "error": f"{type(error).__name__}{status}: {error}"})

    def _event(self, occurrence: Occurrence) -> dict[str, Any]:
        now = self._wall()
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "Event",
            "metadata": {"name": self._name(occurrence.regarding.name),
                         "namespace": occurrence.regarding.namespace},
            "eventTime": micro_time(now),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": occurrence.action[:MAX_FIELD_CHARS],
            "reason": occurrence.reason[:MAX_FIELD_CHARS],
            "type": occurrence.type,
            "note": truncate_note(occurrence.note),
            "regarding": occurrence.regarding.to_json(),
        }
        if occurrence.related is not None:
            body["related"] = occurrence.related.to_json()
        return body

    def _name(self, regarding: str) -> str:
        """`<regarding>.<nanoseconds in hex>`, as client-go names Events (unique here)."""
        stamp = max(time.time_ns(), self._last_name_ns + 1)
        self._last_name_ns = stamp
        suffix = f".{stamp:x}"
        return regarding[:MAX_NAME_CHARS - len(suffix)].rstrip("-.") + suffix
