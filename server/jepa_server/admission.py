"""Admission: at most N requests computing or queued; the rest wait a bounded time, then 503."""

from __future__ import annotations

import asyncio
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

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body of the `async with`; released on every path out."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise ApiError(
                503,
                f"the server is busy ({self.limit} requests in progress); retry later",
                code="overloaded",
                headers={"Retry-After": str(max(1, math.ceil(self.timeout_s)))},
            ) from None
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
            self._slots.release()
