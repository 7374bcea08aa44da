"""CPU seconds and bytes read (rchar) of a process tree, from /proc: how the datagen cost tests measure a CLI."""
from __future__ import annotations

import os
import resource
import subprocess
import time


def descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(name))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(parents.get(pid, []))
    return out


def process_cost(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, bytes read = rchar) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
    except (OSError, IndexError, ValueError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(io["rchar"])


def run_measured(cmd: list[str], cwd: str, env: dict | None = None, timeout: float = 600
                 ) -> tuple[float, int, subprocess.CompletedProcess]:
    """Run `cmd` to its end, polling its process tree: (CPU seconds, bytes read, the finished process).
    CPU is the polled sum or the reaped children's rusage, whichever is larger."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env if env is not None else os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    seen: dict[int, tuple[float, int]] = {}
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        for pid in descendants(proc.pid):
            cost = process_cost(pid)
            if cost:
                seen[pid] = cost
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    return max(reaped, sum(c for c, _ in seen.values())), sum(r for _, r in seen.values()), done
