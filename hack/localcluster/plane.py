"""Acting on the processes of a running plane: stop one, start it again with the same command
line, and the same for the server replicas (kill one as a crash would, restart one or all).

Each keeps the processes recorded in processes.json, so `down` still finds every one; a stopped
or killed process stays recorded (not running) until it is restarted.
"""

from __future__ import annotations

import os
import signal

from localcluster import components, processes
from localcluster.layout import Layout


def restart(layout: Layout, name: str) -> processes.Tracked:
    """Stop one component (if it runs) and start it again with the same command line."""
    tracked = processes.load(layout.state_file)
    (old,) = [p for p in tracked if p.name == name]
    processes.stop([old])
    new = processes.start(name, old.argv, layout.logs, stop_signal=old.stop_signal).tracked
    processes.save(layout.state_file, [new if p.name == name else p for p in tracked])
    return new


def stop_component(layout: Layout, name: str) -> None:
    """Stop one component, keeping it recorded so that `restart` can start it again."""
    processes.stop([p for p in processes.load(layout.state_file) if p.name == name])


def replicas(layout: Layout) -> list[processes.Tracked]:
    """The recorded server replicas, replica 0 first."""
    recorded = {p.name: p for p in processes.load(layout.state_file)}
    found = []
    while (replica := recorded.get(components.replica(len(found)))) is not None:
        found.append(replica)
    return found


def replica(layout: Layout, index: int) -> processes.Tracked:
    """The recorded process of server replica `index`; LookupError if there is none."""
    if not 0 <= index < len(running := replicas(layout)):
        raise LookupError(f"no server replica {index}: the plane in {layout.root} records "
                          f"{len(running)} (replicas 0 to {len(running) - 1})")
    return running[index]


def kill_replica(layout: Layout, index: int) -> None:
    """SIGKILL server replica `index` (a crash: nothing of its shutdown runs) and wait until it
    is gone."""
    proc = replica(layout, index)
    if processes.is_alive(proc):
        os.kill(proc.pid, signal.SIGKILL)
        if not processes.gone_within(proc, processes.KILL_WAIT_SECONDS):
            raise RuntimeError(f"{proc.name} (pid {proc.pid}) outlived SIGKILL by "
                               f"{processes.KILL_WAIT_SECONDS} s")


def stop_replica(layout: Layout, index: int) -> None:
    """Stop server replica `index` cleanly (SIGTERM, SIGKILL after the grace period)."""
    stop_component(layout, replica(layout, index).name)


def restart_replica(layout: Layout, index: int) -> processes.Tracked:
    """Stop server replica `index` if it runs and start it again: same command line, so the
    same port, data directory and POD_NAME (the same replica)."""
    return restart(layout, replica(layout, index).name)


def stop_replicas(layout: Layout) -> list[processes.Tracked]:
    """Stop every server replica cleanly, at once (each drains for its shutdown delay), keeping
    them recorded; returns them."""
    running = replicas(layout)
    processes.stop_together(running)
    return running


def restart_replicas(layout: Layout) -> list[processes.Tracked]:
    """Stop every server replica that runs (at once), then start each again (same command
    lines)."""
    return [restart(layout, proc.name) for proc in stop_replicas(layout)]


def replace_replica(layout: Layout, index: int, argv: list[str]) -> processes.Tracked:
    """Stop server replica `index` if it runs and start it with `argv` instead (another version
    of the server, as a rolling update replaces a pod); later restarts use `argv`."""
    tracked = processes.load(layout.state_file)
    old = replica(layout, index)
    processes.stop([old])
    new = processes.start(old.name, argv, layout.logs, stop_signal=old.stop_signal).tracked
    processes.save(layout.state_file, [new if p.name == old.name else p for p in tracked])
    return new
