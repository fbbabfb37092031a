#!/usr/bin/env python3
"""PID 1 of the PID namespace that kwok (and every command it execs for a pod) runs in.

kwok answers `exec` by running the command on the host, so a notifier's `kill -s HUP 1` would
signal the machine's real init. Inside this namespace, PID 1 is this process instead: it records
every signal it receives as a JSON line in the log file named by its first argument, ignores it
otherwise, starts the rest of its arguments as its only direct child, reaps every orphan, and exits
with the child's status. The host stops the whole namespace by ending the `unshare --kill-child`
process that created it.

Usage: pidns_init.py SIGNAL_LOG COMMAND [ARG...]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}


def main() -> int:
    log_path, command = sys.argv[1], sys.argv[2:]
    if not command:
        print("usage: pidns_init.py SIGNAL_LOG COMMAND [ARG...]", file=sys.stderr)
        return 2

    def record(signum: int, _frame: object) -> None:
        line = json.dumps({"signal": signal.Signals(signum).name, "time": time.time()})
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    for sig in signal.valid_signals():
        if sig in UNCATCHABLE or not isinstance(sig, signal.Signals):
            continue
        try:
            signal.signal(sig, record)
        except (OSError, ValueError):
            continue

    child = os.fork()
    if child == 0:
        for sig in signal.valid_signals():
            if sig not in UNCATCHABLE and isinstance(sig, signal.Signals):
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    continue
        os.execvp(command[0], command)

    while True:
        pid, status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
