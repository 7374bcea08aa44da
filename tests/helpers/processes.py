"""Waiting on the training processes that the kill and signal tests start."""
from __future__ import annotations

import subprocess
import time
from typing import Callable

import tensorflow as tf


def recorded_step(model_dir: str) -> int:
    """The step of the checkpoint `model_dir`'s state file names (-1: none yet). The state is written after
    the checkpoint's own files, so an index file alone may belong to a checkpoint no run would restore."""
    last = tf.train.latest_checkpoint(model_dir)
    return int(last.rsplit("-", 1)[1]) if last else -1


def wait_until(done: Callable[[], object], what: str, procs: list[subprocess.Popen], timeout: float) -> None:
    """Polls `done` until true; fails (killing `procs`) when one of them ends first or `timeout` passes."""
    deadline = time.time() + timeout
    while not done():
        ended = [p for p in procs if p.poll() is not None]
        if ended or time.time() > deadline:
            for p in procs:
                p.kill()
            why = f"process ended early: {ended[0].communicate()[1][-3000:]}" if ended else f"timed out waiting for {what}"
            raise AssertionError(why)
        time.sleep(0.1)
