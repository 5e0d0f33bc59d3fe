"""Admission: at most N requests computing or queued, and at most B bytes of request bodies held at
once; the rest wait a bounded time, then 503."""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .errors import ApiError


class Admission:
    def __init__(self, max_concurrent: int, timeout_s: float) -> None:
        self.limit = max_concurrent
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(max_concurrent)
        self.in_use = 0
        self.body_bytes = 0  # of request bodies held now (Admission.body)
        self._body_queue: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _busy(self, message: str) -> ApiError:
        return ApiError(503, message, code="overloaded",
                        headers={"Retry-After": str(max(1, math.ceil(self.timeout_s)))})

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body of the `async with`; released on every path out."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise self._busy(f"the server is busy ({self.limit} requests in progress); retry later") from None
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
            self._slots.release()

    @asynccontextmanager
    async def body(self, nbytes: int, budget: int) -> AsyncIterator[None]:
        """Hold `nbytes` of the server's body budget (`budget` bytes: --max-bodies-mb; every caller
        passes the same) for the `async with`, taken before the body is read. A request that does not
        fit waits its turn, first come first served, for timeout_s, then answers 503; nbytes over the
        whole budget waits for it to be free."""
        nbytes = min(nbytes, budget)
        if not self._body_queue and self.body_bytes + nbytes <= budget:
            self.body_bytes += nbytes
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (nbytes, turn)
            self._body_queue.append(entry)
            try:
                async with asyncio.timeout(self.timeout_s):
                    await asyncio.shield(turn)
            except BaseException as exc:
                if turn.done():  # granted as the wait ended: the bytes are ours, give them back
                    self._give_back(nbytes, budget)
                else:
                    self._body_queue.remove(entry)
                    self._grant(budget)  # the request behind may fit now
                if isinstance(exc, TimeoutError):
                    mib = budget / (1 << 20)
                    raise self._busy(
                        f"the request bodies held now fill this server's {mib:g} MiB (--max-bodies-mb); "
                        "retry later") from None
                raise
        try:
            yield
        finally:
            self._give_back(nbytes, budget)

    def _give_back(self, nbytes: int, budget: int) -> None:
        self.body_bytes -= nbytes
        self._grant(budget)

    def _grant(self, budget: int) -> None:
        while self._body_queue and self.body_bytes + self._body_queue[0][0] <= budget:
            nbytes, turn = self._body_queue.popleft()
            self.body_bytes += nbytes
            turn.set_result(None)
