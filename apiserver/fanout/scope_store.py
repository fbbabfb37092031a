"""The persistence of Notification scopes (apiserver/fanout/scope.py has their model).

No backend gives a transaction across objects, so the order of writes carries the crash safety:
``create`` writes every pod set first and the run last, and the run counts its pod sets, so a
run that can be read always has its whole pod set until it is forgotten. A crash in between
leaves pod sets without a run (``orphan_uids``, found by their first pod set, written first):
the leader's pass forgets them, and fails their Notification ScopeNotRecorded as one whose
scope was never written. ``add`` writes a new pod set before the run counts it; ``forget``
deletes the pod sets first, so the run stays until they are gone. Each write is one
``guaranteed_update`` of one object, and the writes of one Notification take turns in this
process (apiserver/fanout/write_turns.py: changes of single pods share a turn, and those of one
pod set made while it is being written are written together; anything that spans objects or
stops the run has the turn alone): only the fan-out leader writes pod states. A pod's start is
not written here: its record, named before it is created, is its claim
(apiserver/fanout/run.py); the pod set gets the pod's result. Any replica may stop a run (a
Notification deleted through it), so the leader reads the run again (from the store, which on
Kubernetes is this replica's cache) before each start: a stop another replica stored is
honoured from the moment this replica's cache has it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from apiserver.api.resources import GROUP
from apiserver.clock import Clock
from apiserver.fanout.scope import (
    FINAL_STATES,
    PENDING,
    POD_SET_SIZE,
    RELEASE_FINAL,
    ROLLBACK_FINAL,
    STARTED,
    ScopedPod,
    ScopeRun,
    pod_set_name,
)
from apiserver.fanout.write_turns import Batches, Change, Turns
from apiserver.registry.errors import AlreadyExists, NotFound, StorageUnavailable
from apiserver.registry.objects import metadata
from apiserver.registry.resources import NOTIFICATION_POD_SETS, NOTIFICATION_RUNS
from apiserver.registry.store import Object, ObjectStore
from apiserver.registry.watch import EventType

log = logging.getLogger(__name__)

POD_SET_WAIT_SECONDS = 10.0
"""How long a read waits for a pod set the run counts but the store does not have yet (another
replica wrote both, and this replica's cache of pod sets lags its cache of runs)."""
POD_SET_POLL_SECONDS = 0.05
"""How often such a read looks again."""
_API_VERSION = f"{GROUP}/v1alpha1"


class ScopeStore:
    """The scopes of every Notification, in `runs` (of ``NOTIFICATION_RUNS``) and `pod_sets`
    (of ``NOTIFICATION_POD_SETS``), two stores of one backend; waiting for a pod set that
    lags goes by `clock`."""

    def __init__(self, runs: ObjectStore, pod_sets: ObjectStore, *, clock: Clock,
                 pod_set_wait: float = POD_SET_WAIT_SECONDS) -> None:
        self._runs, self._sets = runs, pod_sets
        self._clock = clock
        self._pod_set_wait = pod_set_wait
        self._turns = Turns()
        """The writes of one Notification (by UID) take turns."""
        self._batches = Batches()
        """The changes of one pod set (Notification UID, index) wait for its next write."""
        self._namespaces: dict[str, str] = {}
        """Notification UID -> its namespace (it never changes)."""
        self._where: dict[str, dict[str, int]] = {}
        """Notification UID -> pod UID -> the index of the pod set that holds it (never
        changes either)."""

    # Creating a scope

    async def create(self, notification: dict[str, Any], pods: list[tuple[str, str]]) -> None:
        """Record a new Notification's run and initial pod set: every pod set first, the run
        last (counting them), so the run is never read without its pods. Safe to call again
        after it was interrupted (it overwrites the pod sets an interrupted call left); raises
        ``AlreadyExists`` if the run is recorded already, before writing anything."""
        meta = notification["metadata"]
        uid, namespace = meta["uid"], meta["namespace"]
        async with self._turns.turn(uid):
            with contextlib.suppress(NotFound):
                await self._runs.get(namespace, uid)
                raise AlreadyExists(
                    f"the scope of Notification {namespace}/{meta['name']} (uid {uid}) is "
                    "recorded already; a Notification's scope is created once",
                    resource=NOTIFICATION_RUNS, name=uid)
            self._namespaces[uid] = namespace
            entries = _new_entries(pods, set())
            parts = [entries[i:i + POD_SET_SIZE] for i in range(0, len(entries), POD_SET_SIZE)]
            for index, part in enumerate(parts):
                await self._write_pod_set(namespace, uid, index, part)
            await self._runs.create(_run_object(notification, len(parts)))

    # Reads

    async def run(self, notification_uid: str) -> ScopeRun | None:
        stored = await self._run_object(notification_uid)
        return None if stored is None else ScopeRun.of(stored)

    async def runs(self) -> list[ScopeRun]:
        found = []
        for item in (await self._runs.list(None)).items:
            run = ScopeRun.of(item)
            self._namespaces[run.notification_uid] = run.namespace
            found.append(run)
        return found

    async def orphan_uids(self, runs: Iterable[ScopeRun]) -> list[str]:
        """Notification UIDs with pod sets but none of `runs` (every run, as ``runs`` just
        read them): a ``create`` interrupted before its run, or one still writing on another
        replica. Reads the first pod set of each scope alone (every scope has one), not
        every pod set (50 of them, 1 MB, for 5000 pods)."""
        with_runs = {(run.namespace, run.notification_uid) for run in runs}
        orphans: dict[str, None] = {}
        for item in (await self._sets.list(None, field_selector="spec.index=0")).items:
            uid, namespace = item["spec"]["notificationUID"], item["metadata"]["namespace"]
            if (namespace, uid) not in with_runs:
                self._namespaces[uid] = namespace
                orphans[uid] = None
        return list(orphans)

    async def release_requests(self) -> AsyncIterator[str]:
        """The Notification UIDs of unfinished runs whose window has a release request, as the
        runs' watch reports them (from the store's cache: no request of its own to
        kube-apiserver): those requested already first, then one at each later change of such
        a run (a UID may come again). Ends when the store closes the watch; raises
        ``Expired`` if it fell behind (watch again)."""
        watch = await self._runs.watch(None)
        try:
            async for event in watch:
                status = event.object.get("status")
                if event.type == EventType.DELETED or not isinstance(status, dict):
                    continue
                window = status.get("window")
                if (isinstance(window, dict) and window.get("releaseRequestedTime")
                        and status.get("finished") is not True):
                    yield str(metadata(event.object).get("name"))
        finally:
            watch.close()

    async def pods(self, notification_uid: str) -> list[ScopedPod]:
        """The pods in the order they joined; none without a run."""
        stored = await self._run_object(notification_uid)
        if stored is None:
            return []
        sets = await self._pod_sets(stored)
        if sets is None:
            return []
        return [ScopedPod.of(entry) for pod_set in sets for entry in pod_set["pods"]]

    # Pod states

    async def add(self, notification_uid: str, pods: list[tuple[str, str]]) -> list[ScopedPod]:
        """Add (pod, uid) pairs not yet in the scope, as pending; returns the new ones. They
        fill the last pod set, then new ones (each written before the run counts it)."""
        async with self._turns.turn(notification_uid):
            stored = await self._run_object(notification_uid)
            sets = None if stored is None else await self._pod_sets(stored)
            if stored is None or sets is None:
                return []
            namespace = stored["metadata"]["namespace"]
            entries = _new_entries(pods, {e["podUID"] for s in sets for e in s["pods"]})
            if not entries:
                return []
            rest = entries
            if sets and len(sets[-1]["pods"]) < POD_SET_SIZE:
                room = POD_SET_SIZE - len(sets[-1]["pods"])
                await self._append(namespace, notification_uid, len(sets) - 1, rest[:room])
                rest = rest[room:]
            count = len(sets)
            while rest:
                await self._write_pod_set(namespace, notification_uid, count,
                                          rest[:POD_SET_SIZE])
                rest, count = rest[POD_SET_SIZE:], count + 1
                await self._update_run(namespace, notification_uid,
                                       _set_status(podSets=count))
            return [ScopedPod.of(entry) for entry in entries]

    async def finish_pod(self, notification_uid: str, pod_uid: str, state: str, reason: str,
                         *, record: str | None = None, stop: str = "") -> bool:
        """pending (or started, in a pod set an older release wrote) -> a final `state`, with
        the name of the pod's `record` if given; with `stop`, then also stop the run (if it is
        not already). False if the pod was already final."""
        if state not in FINAL_STATES:
            raise ValueError(f"{state!r} is not a final pod state")

        def finish(entry: dict[str, Any]) -> bool:
            if entry["state"] not in (PENDING, STARTED):
                return False
            entry.update(state=state, reason=reason)
            if record is not None:
                entry["record"] = record
            return True

        async with self._turns.turn(notification_uid, shared=not stop):
            stored = await self._run_object(notification_uid)
            if stored is None:
                return False
            changed = await self._update_pod(stored, pod_uid, finish)
            if stop:
                await self._update_run(stored["metadata"]["namespace"], notification_uid,
                                       _stop(stop))
            return changed

    async def stop(self, notification_uid: str, reason: str) -> str:
        """Start no more pods; returns the reason that stands (the first one given)."""
        async with self._turns.turn(notification_uid):
            namespace = await self._namespace(notification_uid)
            if namespace is None:
                return reason
            stored = await self._update_run(namespace, notification_uid, _stop(reason))
            return reason if stored is None else str(stored["status"]["stopped"])

    async def decide(self, notification_uid: str, outcome: str, reason: str) -> ScopeRun | None:
        """Record the outcome (the first one decided stands; it stops the run too). A Failed
        outcome makes rollback due (if the spec has a rollback notifier) for every succeeded
        pod not yet rolled back: nothing more is written for that (``rollback_due``). Returns
        the run as it now stands."""

        def decided(obj: Object) -> Object:
            status = obj["status"]
            if not status["outcome"]:
                status.update(outcome=outcome, outcomeReason=reason,
                              stopped=status["stopped"] or reason)
            return obj

        async with self._turns.turn(notification_uid):
            namespace = await self._namespace(notification_uid)
            stored = (None if namespace is None else
                      await self._update_run(namespace, notification_uid, decided))
            if stored is None:
                return None
            return ScopeRun.of(stored)

    async def finish_rollback(self, notification_uid: str, pod_uid: str, outcome: str, *,
                              record: str, attempts: int) -> None:
        """Rollback due (``rollback_due``) -> done | failed, with the deciding attempt's record
        and number."""
        if outcome not in ROLLBACK_FINAL:
            raise ValueError(f"{outcome!r} is not a final rollback state")

        def finish(entry: dict[str, Any]) -> bool:
            if entry.get("rollback") in ROLLBACK_FINAL:
                return False
            entry.update(rollback=outcome, rollbackRecord=record, rollbackAttempts=attempts)
            return True

        await self._change_pod(notification_uid, pod_uid, finish)

    async def note_window(self, notification_uid: str, **times: str) -> ScopeRun | None:
        """Store window fields not stored yet (the first value of each stands); returns the
        run as it now stands (None if it is gone). Any replica may call it (a release
        request)."""
        async with self._turns.turn(notification_uid):
            return await self._note_window(notification_uid, times)

    async def end_window(self, notification_uid: str, reason: str, at: str
                         ) -> ScopeRun | None:
        """The window ends (the first reason stands): store releaseReason and releaseTime,
        which make the release of every quiesced (succeeded) pod due (``release_due``: nothing
        more is written for that). Returns the run as it stands."""
        async with self._turns.turn(notification_uid):
            return await self._note_window(notification_uid,
                                           {"releaseReason": reason, "releaseTime": at})

    async def finish_release(self, notification_uid: str, pod_uid: str, outcome: str, *,
                             record: str, attempts: int) -> None:
        """Release due (``release_due``) -> done | failed, with the deciding attempt's record
        and number (none without release.notifier: "" and 0)."""
        if outcome not in RELEASE_FINAL:
            raise ValueError(f"{outcome!r} is not a final release state")

        def finish(entry: dict[str, Any]) -> bool:
            if entry.get("release") in RELEASE_FINAL:
                return False
            entry["release"] = outcome
            if record:
                entry.update(releaseRecord=record, releaseAttempts=attempts)
            return True

        await self._change_pod(notification_uid, pod_uid, finish)

    async def mark_finished(self, notification_uid: str) -> None:
        """The final status is stored: nothing of this run remains to do."""
        async with self._turns.turn(notification_uid):
            namespace = await self._namespace(notification_uid)
            if namespace is not None:
                await self._update_run(namespace, notification_uid, _set_status(finished=True))

    async def forget(self, notification_uid: str) -> None:
        """Delete the pod sets, then the run: an interruption leaves the run, which the
        leader's next pass forgets again (it is finished, or its Notification is gone and its
        outcome Succeeded: its pods are not read again), never pod sets without a run."""
        async with self._turns.turn(notification_uid):
            namespace = await self._namespace(notification_uid)
            if namespace is None:
                return
            await self._sets.delete_collection(namespace,
                                               field_selector=_of_notification(notification_uid))
            with contextlib.suppress(NotFound):
                await self._runs.delete(namespace, notification_uid)
            self._namespaces.pop(notification_uid, None)
            self._where.pop(notification_uid, None)

    # Internals

    async def _namespace(self, notification_uid: str) -> str | None:
        """Where the scope's objects are: the Notification's namespace, found by the run (or,
        without one, by pod sets); None if there is no trace of it."""
        namespace = self._namespaces.get(notification_uid)
        if namespace is not None:
            return namespace
        for store, selector in ((self._runs, f"metadata.name={notification_uid}"),
                                (self._sets, _of_notification(notification_uid))):
            items = (await store.list(None, field_selector=selector)).items
            if items:
                namespace = str(items[0]["metadata"]["namespace"])
                self._namespaces[notification_uid] = namespace
                return namespace
        return None

    async def _run_object(self, notification_uid: str) -> Object | None:
        namespace = await self._namespace(notification_uid)
        if namespace is None:
            return None
        try:
            return await self._runs.get(namespace, notification_uid)
        except NotFound:
            return None

    async def _pod_sets(self, run: Object) -> list[Object] | None:
        """Every pod set the run counts, in order; None if the run was forgotten meanwhile."""
        namespace, uid = run["metadata"]["namespace"], run["metadata"]["name"]
        sets = []
        for index in range(run["status"]["podSets"]):
            pod_set = await self._pod_set(namespace, uid, index)
            if pod_set is None:
                return None
            self._where.setdefault(uid, {}).update(
                (entry["podUID"], index) for entry in pod_set["pods"])
            sets.append(pod_set)
        return sets

    async def _pod_set(self, namespace: str, uid: str, index: int) -> Object | None:
        """Pod set `index`, which the run counts: waited for while the store lags the run's
        writer; None if the run is gone meanwhile."""
        name = pod_set_name(uid, index)
        deadline = self._clock.monotonic() + self._pod_set_wait
        while True:
            try:
                return await self._sets.get(namespace, name)
            except NotFound:
                if await self._run_object(uid) is None:
                    return None
                if self._clock.monotonic() >= deadline:
                    raise StorageUnavailable(
                        f"the scope of Notification uid {uid}: its run counts pod set "
                        f"{namespace}/{name}, which the storage does not have after "
                        f"{self._pod_set_wait:.0f} s; it resumes when the server starts "
                        "again") from None
                await self._clock.sleep(POD_SET_POLL_SECONDS)

    async def _write_pod_set(self, namespace: str, uid: str, index: int,
                             entries: list[dict[str, Any]]) -> None:
        """Create pod set `index` (overwriting one an interruption left before it was
        counted)."""
        body = _pod_set_object(namespace, uid, index, entries)
        try:
            await self._sets.create(body)
        except AlreadyExists:
            await self._sets.guaranteed_update(
                namespace, body["metadata"]["name"],
                lambda obj: {**obj, "spec": body["spec"], "pods": body["pods"]})
        self._where.setdefault(uid, {}).update((entry["podUID"], index) for entry in entries)

    async def _append(self, namespace: str, uid: str, index: int,
                      entries: list[dict[str, Any]]) -> None:
        def append(obj: Object) -> Object:
            present = {entry["podUID"] for entry in obj["pods"]}
            obj["pods"].extend(e for e in entries if e["podUID"] not in present)
            return obj

        await self._sets.guaranteed_update(namespace, pod_set_name(uid, index), append)
        self._where.setdefault(uid, {}).update((entry["podUID"], index) for entry in entries)

    async def _update_run(self, namespace: str, uid: str, mutate: Callable[[Object], Object]
                          ) -> Object | None:
        try:
            return await self._runs.guaranteed_update(namespace, uid, mutate)
        except NotFound:
            return None

    async def _change_pod(self, notification_uid: str, pod_uid: str,
                          change: Callable[[dict[str, Any]], bool]) -> bool:
        async with self._turns.turn(notification_uid, shared=True):
            stored = await self._run_object(notification_uid)
            return stored is not None and await self._update_pod(stored, pod_uid, change)

    async def _update_pod(self, run: Object, pod_uid: str,
                          change: Callable[[dict[str, Any]], bool]) -> bool:
        """Apply `change` to the pod's entry (it changes the entry and returns True, or
        leaves it and returns False); False if the pod is not in the scope. The changes of one
        pod set that wait while it is being written are written together, in one update."""
        uid = run["metadata"]["name"]
        index = self._where.get(uid, {}).get(pod_uid)
        if index is None:
            await self._pod_sets(run)
            index = self._where.get(uid, {}).get(pod_uid)
        if index is None:
            return False
        return await self._batches.change(
            (uid, index), pod_uid, change,
            functools.partial(self._update_entries, run["metadata"]["namespace"], uid, index))

    async def _update_entries(self, namespace: str, uid: str, index: int,
                              changes: list[Change]) -> list[bool]:
        """Apply each change (in order) to its pod's entry in pod set `index`, in one update;
        whether each changed its entry (all False if the pod set is gone)."""
        results: list[bool] = []

        def mutate(obj: Object) -> Object:
            results.clear()  # mutate runs again after a conflict
            entries = {entry["podUID"]: entry for entry in obj["pods"]}
            for item in changes:
                entry = entries.get(item.entry_key)
                results.append(entry is not None and item.change(entry))
            return obj

        try:
            await self._sets.guaranteed_update(namespace, pod_set_name(uid, index), mutate)
        except NotFound:
            return [False] * len(changes)
        return results

    async def _note_window(self, uid: str, times: dict[str, str]) -> ScopeRun | None:
        def note(obj: Object) -> Object:
            window = obj["status"].setdefault("window", {})
            for key, value in times.items():
                window.setdefault(key, value)
            return obj

        namespace = await self._namespace(uid)
        stored = None if namespace is None else await self._update_run(namespace, uid, note)
        return None if stored is None else ScopeRun.of(stored)

def _of_notification(notification_uid: str) -> str:
    return f"spec.notificationUID={notification_uid}"


def _run_object(notification: dict[str, Any], pod_sets: int) -> Object:
    meta = notification["metadata"]
    return {"apiVersion": _API_VERSION, "kind": NOTIFICATION_RUNS.kind,
            "metadata": {"namespace": meta["namespace"], "name": meta["uid"]},
            "spec": {"notificationName": meta["name"], "notification": notification["spec"]},
            "status": {"podSets": pod_sets, "stopped": "", "outcome": "", "outcomeReason": "",
                       "finished": False}}


def _pod_set_object(namespace: str, uid: str, index: int, entries: list[dict[str, Any]]
                    ) -> Object:
    return {"apiVersion": _API_VERSION, "kind": NOTIFICATION_POD_SETS.kind,
            "metadata": {"namespace": namespace, "name": pod_set_name(uid, index)},
            "spec": {"notificationUID": uid, "index": index},
            "pods": entries}


def _new_entries(pods: Iterable[tuple[str, str]], present: set[str]) -> list[dict[str, Any]]:
    """Pending entries of the pods not in `present`, each once, in order (an entry holds
    only the fields that are set: see ``ScopedPod.of``)."""
    entries = []
    seen = set(present)
    for pod, uid in pods:
        if uid not in seen:
            seen.add(uid)
            entries.append({"pod": pod, "podUID": uid, "state": PENDING})
    return entries


def _stop(reason: str) -> Callable[[Object], Object]:
    def stop(obj: Object) -> Object:
        obj["status"]["stopped"] = obj["status"]["stopped"] or reason
        return obj

    return stop


def _set_status(**changes: Any) -> Callable[[Object], Object]:
    def update(obj: Object) -> Object:
        obj["status"].update(changes)
        return obj

    return update
