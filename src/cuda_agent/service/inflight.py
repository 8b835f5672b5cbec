"""Keeping N pieces of work in flight on the service: the one loop bench, baselines, synth and the
agent's many-task runs share. Each of `width` lanes takes its next item, works it (an evaluation
waited on, an agent's run that evaluates through the service, ...) and takes the next; the caller
reads each outcome as it comes, in the order they finish."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def in_flight(width: int, take: Callable[[], T | None], work: Callable[[T], R], *,
              poll: Callable[[], object] | None = None, name: str = "in-flight") -> Iterator[tuple[T, Future]]:
    """`work(item)` on `width` lanes at once (threads), each lane taking its items from `take()`
    (one call at a time, only when the lane is free, so `take` decides late) until it gives None.
    Yields each (item, a done Future holding what `work` returned or raised) as it finishes.
    `poll` is called about twice a second while nothing finishes (a deadline's note, say).
    Leaving the loop early stops the lanes taking more; the work they hold finishes first."""
    finished: queue.SimpleQueue = queue.SimpleQueue()
    taking = threading.Lock()
    closed = threading.Event()

    def lane() -> None:
        try:
            while not closed.is_set():
                with taking:
                    item = None if closed.is_set() else take()
                if item is None:
                    return
                future: Future = Future()
                try:
                    future.set_result(work(item))
                except BaseException as e:  # the caller decides what a failure means
                    future.set_exception(e)
                finished.put((item, future))
        finally:
            finished.put(None)  # this lane is done

    lanes = [threading.Thread(target=lane, name=f"{name}-{i}", daemon=True) for i in range(max(1, width))]
    for t in lanes:
        t.start()
    try:
        running = len(lanes)
        while running:
            try:
                got = finished.get(timeout=0.5)
            except queue.Empty:
                if poll is not None:
                    poll()
                continue
            if got is None:
                running -= 1
            else:
                yield got
    finally:
        closed.set()
        for t in lanes:
            t.join()
