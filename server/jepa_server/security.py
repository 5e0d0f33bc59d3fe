"""Who may call, and which server-local files a request may name."""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from .errors import ApiError

log = logging.getLogger("jepa_server")

# Endpoints a probe or a scraper reads without a key.
OPEN_PATHS = frozenset({"/health", "/metrics"})

# Under --files-root every refusal reads the same, so a caller cannot map the server's disk by
# asking (does not exist / outside / not a file / not an image all look alike).
FILE_REFUSAL = "the path is not a readable image or video under the server's files root"


def check_admitted(api_key: str | None, max_body_bytes: int, max_body_mb: float, path: str,
                   headers: Mapping[str, str], content_length: int | None) -> None:
    """The refusals a request gets from its headers alone, before any byte of its body is read or
    asked for: an announced body over --max-body-mb (413), a missing or wrong key (401)."""
    if content_length is not None and content_length > max_body_bytes:
        raise ApiError(
            413,
            f"the request body is {content_length} bytes; this server takes at most "
            f"{max_body_bytes} (--max-body-mb {max_body_mb:g})",
        )
    check_api_key(api_key, path, headers.get("Authorization"))


def check_api_key(expected: str | None, path: str, authorization: str | None) -> None:
    """Raise 401 unless the request carries `Bearer <expected>` (or no key is configured)."""
    if expected is None or path in OPEN_PATHS:
        return
    scheme, _, token = (authorization or "").partition(" ")
    # compare_digest on bytes: constant time whatever the first differing byte.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode("utf-8", "surrogateescape"), expected.encode("utf-8")
    ):
        raise ApiError(
            401,
            "missing or invalid API key: send `Authorization: Bearer <key>`",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


class LocalFiles:
    """Whether and where server-local paths may be read.

    With a root, a path resolves against the root (never the working directory), is
    canonicalised with symlinks followed, and is served only when the canonical path lies inside
    the canonical root (so `..`, absolute paths elsewhere, symlinks out and a sibling directory
    whose name starts with the root's are all refused)."""

    def __init__(self, allowed: bool, root: str | None) -> None:
        self.allowed = allowed or root is not None
        self.root: Path | None = None
        if root is not None:
            real = Path(os.path.realpath(root))
            if not real.is_dir():
                raise ValueError(f"--files-root {root!r} is not a directory")
            self.root = real

    def resolve(self, path: str, param: str) -> str:
        """The canonical path to read, or a 400. Existence and type are checked by the reader."""
        if not self.allowed:
            raise ApiError(
                400,
                "server-local paths are off on this server (start it with --allow-local-files or "
                '--files-root); send the file\'s bytes as {"b64": ...}',
                param=param,
                code="local_files_disabled",
            )
        if not path or "\x00" in path:
            raise self.refusal(param, "an empty path or a NUL byte")
        try:
            if self.root is None:
                return os.path.realpath(path)
            # Joining an absolute path yields that path: it is then checked like any other.
            real = Path(os.path.realpath(self.root / path))
            if real != self.root and self.root not in real.parents:
                raise self.refusal(param, f"{path[:200]!r} resolves to {str(real)[:200]!r}, outside the root")
            # A first check only: the reader opens it without blocking and checks the open file
            # (jepa.media.decode.open_regular), so a FIFO or device swapped in later is refused too.
            if not real.is_file():
                raise self.refusal(param, f"{path[:200]!r} is not a regular file")
        except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, EACCES, ...
            raise self.refusal(param, f"{path[:200]!r}: {getattr(exc, 'strerror', None) or exc}") from None
        return str(real)

    def refusal(self, param: str, reason: str) -> ApiError:
        """The refusal for a local path: under a root, one sentence whatever the reason."""
        if self.root is None:
            return ApiError(400, f"cannot read the local file: {reason}", param=param, code="invalid_path")
        log.debug("refused a local path (%s): %s", param, reason)
        return ApiError(400, FILE_REFUSAL, param=param, code="invalid_path")
