"""jepa-server: serve one JEPA model over HTTP."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence

from aiohttp import web

from .app import create_app, wait_ready
from .errors import JepaAppRunner
from .keys import RUNTIME
from .settings import Settings, SettingsError, load_settings
from .startup import startup_lines

log = logging.getLogger("jepa_server")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.INFO if verbose >= 2 else logging.WARNING)
    # aiohttp logs every unparseable request with a traceback; the client got its 400 already.
    logging.getLogger("aiohttp.server").setLevel(logging.DEBUG if verbose else logging.CRITICAL)


async def serve(settings: Settings) -> int:
    app = create_app(settings)
    runner = JepaAppRunner(app, access_log=logging.getLogger("aiohttp.access"))
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        await site.start()
        try:
            await wait_ready(app)
        except Exception as exc:
            print(f"jepa-server: cannot serve the model: {exc}", file=sys.stderr)
            return 1
        engine = app[RUNTIME].require()
        for line in startup_lines(settings, engine, runner.addresses[0][1]):
            print(line, flush=True)
        await _until_signalled()
        return 0
    finally:
        await runner.cleanup()


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(argv)
        if not settings.model and not settings.demo:
            raise SettingsError("no model: give -m/--model PATH, or --demo for the built-in demo model")
        if settings.files_root is not None:
            from .security import LocalFiles

            LocalFiles(True, settings.files_root)  # a root that is not a directory stops here
    except (SettingsError, ValueError) as exc:
        print(f"jepa-server: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings.verbose)
    if not _loopback(settings.host):
        print(
            f"jepa-server: warning: listening on {settings.host}, not loopback: anyone who can reach this "
            f"address can use the server{'' if settings.api_key else ' (no --api-key set)'}"
            f"{' and read the files it may read' if settings.local_files else ''}",
            file=sys.stderr,
        )
    try:
        return asyncio.run(serve(settings))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:  # the port is taken, the address is not ours
        print(f"jepa-server: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
