"""jepa-server's entry point. It imports only the standard library itself, so that a package
installed without the server extra answers with one line naming the extra, not a traceback."""

from __future__ import annotations

import sys
from collections.abc import Sequence

# What the server needs beyond numpy and the engine: jepa[server] (aiohttp, prometheus_client) and
# the extras it pulls in (media: Pillow, PyAV; convert: gguf).
SERVER_EXTRA = {"aiohttp", "prometheus_client", "PIL", "av", "gguf", "multidict", "yarl"}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in SERVER_EXTRA:
            raise
        print(f"jepa-server: the server needs the `server` extra ({top} is not installed): "
              "pip install 'jepa[server]'", file=sys.stderr)
        return 1
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
