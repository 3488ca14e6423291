"""The idempotency ledger: answers of calls by idempotency key, so that a call the
orchestrator sends again (after its crash, or to another replica sharing the ledger) is
answered with the first call's answer instead of running the tool twice."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["DEFAULT_LEDGER_TTL", "KeyLocks", "Ledger", "MemoryLedger"]

DEFAULT_LEDGER_TTL = 24 * 3600.0
"""How long answers are kept by default: 24 hours, as pkg/worker."""


class Ledger(Protocol):
    """Where answers are kept. Keys are the tool's name, a NUL and the call's
    idempotency key; answers are encoded ``InvokeResponse`` messages. A store shared by
    replicas (a database) makes the guarantee hold across them."""

    async def load(self, key: str) -> bytes | None:
        """The answer kept under key, if one has not expired."""

    async def store(self, key: str, answer: bytes, ttl: float) -> None:
        """Keeps an answer under key for ttl seconds. It is not cancelled with the call
        whose answer it keeps (a caller that left, its effect having happened), but
        given ten seconds; the key stays locked until it ends."""


class MemoryLedger:
    """A :class:`Ledger` in this process's memory, bounded in entries (the oldest goes
    first; 10,000 by default) and in time."""

    def __init__(self, max_entries: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries if max_entries > 0 else 10000
        self._clock = clock
        self._entries: collections.OrderedDict[str, tuple[bytes, float]] = collections.OrderedDict()

    async def load(self, key: str) -> bytes | None:
        e = self._entries.get(key)
        if e is None:
            return None
        answer, expires = e
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return answer

    async def store(self, key: str, answer: bytes, ttl: float) -> None:
        self._entries.pop(key, None)
        self._entries[key] = (answer, self._clock() + ttl)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class KeyLocks:
    """Serialises the calls of one key in this process: a duplicate that arrives while the
    first runs waits for its answer. A key's lock lives only while calls hold or wait for
    it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def acquire(self, key: str) -> Callable[[], None]:
        """Takes the key's lock; call the returned function to release it."""
        entry = self._locks.get(key)
        lock, refs = entry if entry is not None else (asyncio.Lock(), 0)
        self._locks[key] = (lock, refs + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._unref(key)
            raise

        def release() -> None:
            lock.release()
            self._unref(key)

        return release

    def _unref(self, key: str) -> None:
        lock, refs = self._locks[key]
        if refs <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, refs - 1)

    def __len__(self) -> int:
        return len(self._locks)
