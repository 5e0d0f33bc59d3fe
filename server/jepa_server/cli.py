"""jepa-server: serve JEPA models over HTTP (the command; __main__.py guards its imports)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

from aiohttp import web

from .app import create_app, wait_ready
from .keys import RUNTIME
from .protocol import JepaAppRunner
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
    """Serve until SIGTERM or SIGINT, then shut down within a bounded time: stop accepting (new
    requests on open connections answer 503), let in-flight requests finish for
    --shutdown-timeout-s, cancel the rest (a rollout stops at its next step), stop the workers."""
    app = create_app(settings)
    runner = JepaAppRunner(app, settings, access_log=logging.getLogger("aiohttp.access"))
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        await site.start()
        try:
            await wait_ready(app)
        except Exception as exc:
            print(f"jepa-server: cannot serve the model: {exc}", file=sys.stderr)
            return 1
        registry = app[RUNTIME].registry
        assert registry is not None  # wait_ready returned: the catalog is read
        for line in startup_lines(settings, registry, runner.addresses[0][1]):
            print(line, flush=True)
        name = await _until_signalled()
        log.info("%s: shutting down (in-flight requests have %g s)", name, settings.shutdown_timeout_s)
        app[RUNTIME].drain()
        return 0
    finally:
        await runner.cleanup()


async def _until_signalled() -> str:
    """Wait for SIGINT or SIGTERM; return its name. A second signal exits at once."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    got: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        if got:
            print(f"jepa-server: {sig.name} again: exiting now", file=sys.stderr, flush=True)
            os._exit(1)
        got.append(sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    await stop.wait()
    return got[0]


def _exit_now_if_stuck(rc: int) -> int:
    """After shutdown, a decode thread still inside a decoder (non-daemon: Python would wait for it
    at exit) must not keep the process alive: leave without waiting."""
    stuck = [t.name for t in threading.enumerate()
             if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if stuck:
        log.warning("exiting with threads still running: %s", ", ".join(stuck))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # A Rust panic inside HF tokenizers (a pathological tokenizer.json) is the file's fault and is
    # answered 503 tokenizer_failed; under RUST_BACKTRACE=1 (a common developer setting) Rust's hook
    # also printed a 73-line backtrace to stderr on every such request. Its message line stays.
    os.environ["RUST_BACKTRACE"] = "0"
    if args[:1] == ["check"]:  # `jepa-server check ...`: the preflight (a systemd ExecStartPre)
        from .check import main as check

        return check(args[1:])
    if args[:1] == ["info"]:  # `jepa-server info ...`: the configuration, devices and models
        from .info_cmd import main as info

        return info(args[1:])
    try:
        settings = load_settings(args)
        if not settings.model and not settings.demo and settings.models_dir is None:
            raise SettingsError(
                "no model: give -m/--model PATH, --models-dir DIR, or --demo for the built-in demo model"
            )
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
        return _exit_now_if_stuck(asyncio.run(serve(settings)))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:  # the port is taken, the address is not ours
        print(f"jepa-server: {exc}", file=sys.stderr)
        return 1
