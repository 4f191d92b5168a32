"""The Kubernetes doors' gRPC servers on ``grpc.aio``: one asyncio event loop per process, in its own thread.

A synchronous gRPC server keeps a Python thread that wakes five to eight times a second (grpc's cython
poll looking for signals), one per server; the device plugin runs one server per resource. A ``grpc.aio``
server's Python side sleeps in the loop's ``epoll`` until a call comes (docs/engine.md, "What an idle
door still costs"). The loop runs in a thread of its own so that the main thread keeps the stop idiom
(:mod:`vgpukit.stopping`: a ``poll`` on the stop's pipe); the plugin's other threads hand servers to
the loop (:meth:`Loop.call`), and the watch's thread tells a stream that something changed with
:class:`Wake` (``loop.call_soon_threadsafe``: no polling).

A handler that does blocking host work (the engine, the host lock, a host read) runs in the loop's
executor (:meth:`Loop.blocking`), so the loop never blocks; a refusal from there is :class:`Abort`,
which the handler turns into ``await context.abort``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent import futures
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

T = TypeVar("T")
if TYPE_CHECKING:
    Context = grpc.aio.ServicerContext[Any, Any]  # a handler's context (the messages' types are the handler's)
else:
    Context = grpc.aio.ServicerContext
STOP_GRACE = 0.5  # seconds a stopping server gives the calls under way
STOP_WAIT = 10.0  # seconds a stop waits at most (a handler that never returns must not keep a door up)


class Abort(Exception):
    """A handler's refusal raised where no ``context.abort`` can be awaited (the executor): code, details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class Loop:
    """One asyncio event loop in its own thread, serving every ``grpc.aio`` server of the process."""

    def __init__(self, name: str, workers: int = 4) -> None:
        self.loop = asyncio.new_event_loop()
        self.executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-work")
        self.loop.set_default_executor(self.executor)
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True, name=f"{name}-loop")
        self.thread.start()
        ready.wait()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = STOP_WAIT) -> T:
        """Run ``coro`` on the loop from another thread; its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the executor, awaited (host reads, the engine, the host lock)."""
        return await self.loop.run_in_executor(None, partial(fn, *args))

    def server(self, add: Callable[[grpc.aio.Server], None], addresses: list[str]) -> grpc.aio.Server:
        """A started ``grpc.aio`` server with ``add``'s services on ``addresses`` (``unix://...``); OSError
        (the address) when one cannot be bound."""

        async def start() -> grpc.aio.Server:
            server = grpc.aio.server()
            add(server)
            for address in addresses:
                cause: RuntimeError | None = None
                try:
                    bound = server.add_insecure_port(address)
                except RuntimeError as err:
                    bound, cause = 0, err
                if not bound:
                    await server.stop(None)
                    raise OSError(address) from cause
            await server.start()
            return server

        return self.call(start())

    def stop(self, server: grpc.aio.Server) -> None:
        """Stop ``server``, bounded: the calls under way get STOP_GRACE seconds, the whole at most STOP_WAIT."""
        if self.loop.is_closed() or not self.loop.is_running():
            return
        try:
            self.call(server.stop(STOP_GRACE), STOP_WAIT)
        except (futures.TimeoutError, RuntimeError):
            pass

    def close(self) -> None:
        """End the loop and its thread (every server stopped before)."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(STOP_WAIT)
        self.executor.shutdown(wait=False, cancel_futures=True)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()  # its selector and self-pipe: three descriptors a process would otherwise keep


class Wake:
    """What a thread rings to wake one stream awaiting on the loop: ``ring`` from any thread (the watch's,
    the manager's), ``await wait()`` on the loop; a ring before the wait is not lost."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def ring(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # the loop closed: nothing waits any more
            pass

    def clear(self) -> None:
        """Before looking at what changed: a ring after this wakes the next :meth:`wait`."""
        self.event.clear()

    async def wait(self, timeout: float | None = None) -> bool:
        """Until rung (True) or ``timeout`` seconds passed (False)."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        return True


async def aborting(context: Context, work: Awaitable[T]) -> T:
    """``await work``; an :class:`Abort` raised by it ends the call with its code and details."""
    try:
        return await work
    except Abort as refused:
        await context.abort(refused.code, refused.details)
        raise  # context.abort raises; never reached
