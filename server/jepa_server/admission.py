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

    async def take_body_bytes(self, nbytes: int, budget: int, started: bool = False) -> int:
        """Take `nbytes` (at most the whole `budget`: --max-bodies-mb; every caller passes the same) of
        the server's body budget; returns what was taken. A request that does not fit waits its turn,
        first come first served, for timeout_s, then answers 503. A body already under way (`started`)
        goes first: it takes what fits at once and waits at the head of the queue, since the bytes it
        holds come back only once it is whole (behind a newcomer waiting for those bytes, both would
        wait out the timeout)."""
        nbytes = min(nbytes, budget)
        if (started or not self._body_queue) and self.body_bytes + nbytes <= budget:
            self.body_bytes += nbytes
            return nbytes
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, turn)
        if started:
            self._body_queue.appendleft(entry)
        else:
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
        return nbytes

    @asynccontextmanager
    async def body(self, budget: int) -> AsyncIterator[BodyHold]:
        """A request's hold on the body budget for the `async with`, empty at first: its body's bytes
        are taken as they arrive (BodyHold.grow), so a slow client holds what it has sent, not what it
        announced (eight connections announcing 32 MiB at a byte a second held all of 256 MiB), and
        what the body becomes (its JSON, its decoded inputs) lives within it until the answer."""
        hold = BodyHold(self, budget)
        try:
            yield hold
        finally:
            self._give_back(hold.nbytes, budget)
            hold.nbytes = 0

    def _give_back(self, nbytes: int, budget: int) -> None:
        self.body_bytes -= nbytes
        self._grant(budget)

    def _grant(self, budget: int) -> None:
        while self._body_queue and self.body_bytes + self._body_queue[0][0] <= budget:
            nbytes, turn = self._body_queue.popleft()
            self.body_bytes += nbytes
            turn.set_result(None)


class BodyHold:
    """The bytes of the body budget one request holds (Admission.body)."""

    def __init__(self, admission: Admission, budget: int) -> None:
        self._admission = admission
        self._budget = budget
        self.nbytes = 0

    async def grow(self, nbytes: int) -> None:
        """Hold `nbytes` more (waiting its turn, or 503: Admission.take_body_bytes)."""
        nbytes = min(nbytes, self._budget - self.nbytes)  # one request never holds more than all of it
        if nbytes > 0:
            self.nbytes += await self._admission.take_body_bytes(nbytes, self._budget, self.nbytes > 0)

    def shrink_to(self, nbytes: int) -> None:
        """Give back what is held past `nbytes` (an estimate that turned out larger)."""
        if nbytes < self.nbytes:
            self._admission._give_back(self.nbytes - nbytes, self._budget)
            self.nbytes = nbytes
