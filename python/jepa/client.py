"""A small client for jepa-server: urllib, json and numpy only.

    from jepa.client import Client, clip, video
    c = Client("http://127.0.0.1:8080")
    vecs = c.embed(["cat.jpg", "dog.png"])                 # [2, D]; files are read here, sent as b64
    one = c.embed(clip(["f0.png", "f1.png", "f2.png"]))    # one clip -> [1, D]
    v = c.embed(video("walk.mp4", frames=16))              # a video file, 16 frames sampled

Paths and bytes are read locally and sent as base64; the server never reads this machine's files.
Items: a path, bytes (an image file), a PIL image, a uint8 [H, W, 3] array, `clip(frames)`,
`video(src, frames=)`, or a dict in the server's own item form ({"path": ...} names a file on the
server, which must allow it). A refused request raises ServerError with the server's message
and HTTP status."""

from __future__ import annotations

import base64
import io
import json
import os
import struct
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import JepaError

__all__ = ["Client", "Clip", "ServerError", "Video", "clip", "video"]


class ServerError(JepaError):
    """The server refused or failed a request. `status` is the HTTP status; `type`, `code` and
    `param` are the fields of the server's error envelope (`error`, as it came; None without one).
    This module reads the envelope and never imports the server's ApiError: the client needs the
    standard library and numpy only."""

    def __init__(self, message: str, status: int, error: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, status)
        fields = error or {}
        self.type: str | None = fields.get("type")
        self.code: str | None = fields.get("code")
        self.param: str | None = fields.get("param")

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.message}"


@dataclass(frozen=True)
class Clip:
    """Frames that make one item (one clip), not several images."""

    frames: Sequence[Any]


@dataclass(frozen=True)
class Video:
    """A video file (path or bytes) from which the server samples `frames` frames."""

    src: str | os.PathLike[str] | bytes
    frames: int | None = None


def clip(frames: Sequence[Any]) -> Clip:
    """Mark a list of frames as one clip."""
    return Clip(list(frames))


def video(src: str | os.PathLike[str] | bytes, frames: int | None = None) -> Video:
    """Mark a video file; the server decodes it and samples `frames` frames (default: the model's)."""
    return Video(src, frames)


def _png(a: np.ndarray) -> bytes:
    """A uint8 [H, W, 3] array as a PNG file, with zlib alone (lossless, so the server sees these
    exact pixels)."""
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"an image array must be uint8 [H, W, 3], got {a.dtype} {list(a.shape)}")
    h, w, _ = a.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), np.ascontiguousarray(a).reshape(h, w * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def _file_bytes(x: Any) -> bytes:
    """An image-ish value as the bytes of a file."""
    if isinstance(x, bytes | bytearray | memoryview):
        return bytes(x)
    if isinstance(x, str | os.PathLike):
        with open(x, "rb") as fh:
            return fh.read()
    if isinstance(x, np.ndarray):
        return _png(x)
    if hasattr(x, "save") and hasattr(x, "mode"):  # a PIL image, without importing Pillow
        buf = io.BytesIO()
        x.save(buf, format="PNG")
        return buf.getvalue()
    raise TypeError(f"cannot send a {type(x).__name__}: give a path, bytes, a PIL image or a uint8 array")


def _b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode("ascii")}


def encode_item(x: Any) -> Any:
    """One item in the server's JSON form."""
    if isinstance(x, dict):
        return x
    if isinstance(x, Clip):
        return {"frames": [_b64(_file_bytes(f)) for f in x.frames]}
    if isinstance(x, Video):
        out: dict[str, Any] = {"video": _b64(_file_bytes(x.src))}
        if x.frames is not None:
            out["frames"] = x.frames
        return out
    return _b64(_file_bytes(x))


def _items(items: Any) -> list[Any]:
    # One item or a list of items; a uint8 [T, H, W, 3] array is one clip.
    if isinstance(items, np.ndarray) and items.ndim == 4:
        return [encode_item(clip(list(items)))]
    if isinstance(items, list | tuple):
        return [encode_item(x) for x in items]
    return [encode_item(items)]


class Client:
    def __init__(
        self, url: str = "http://127.0.0.1:8080", api_key: str | None = None, timeout: float = 120.0
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("JEPA_API_KEY")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # -- the calls

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def models(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/models")["data"])

    def info(self) -> dict[str, Any]:
        return self._call("GET", "/info")

    def embed(
        self,
        items: Any,
        pool: str | None = None,
        encoding_format: str = "base64",
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embed one item or a list: [n, D] (or [n, N, D] with pool="none"), float32."""
        return self._embeddings(_items(items), pool, encoding_format, dimensions)

    def embed_text(
        self,
        texts: str | Sequence[str],
        pool: str | None = None,
        encoding_format: str = "base64",
        dimensions: int | None = None,
    ) -> np.ndarray:
        """Embed one text or a list with a text model: [n, D] float32 (the file's pooling and
        normalisation unless `pool` overrides it; `dimensions` keeps the first values, re-normalised)."""
        if isinstance(texts, str):
            texts = [texts]
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("embed_text takes strings")
        return self._embeddings(list(texts), pool, encoding_format, dimensions)

    def _embeddings(
        self, inputs: Any, pool: str | None, encoding_format: str, dimensions: int | None
    ) -> np.ndarray:
        """POST /v1/embeddings (images or texts alike: the server tells them apart) and decode the rows."""
        body: dict[str, Any] = {"input": inputs, "encoding_format": encoding_format}
        if pool is not None:
            body["pool"] = pool
        if dimensions is not None:
            body["dimensions"] = dimensions
        return _rows(self._call("POST", "/v1/embeddings", body), encoding_format)

    def classify(self, items: Any, top_k: int = 5) -> list[dict[str, Any]]:
        """The top_k classes per item, in item order (a model with a classifier head): each
        {"object": "classification", "index", "predictions": [{"index", "label", "probability",
        "logit"}, ...]}, best first."""
        out = self._call("POST", "/classify", {"input": _items(items), "top_k": top_k})
        return sorted(out["data"], key=lambda e: e["index"])

    def rollout(
        self,
        context: Any,
        actions: Any = None,
        goal: Any = None,
        state: Any = None,
        plan: dict[str, Any] | None = None,
        return_latents: bool = False,
    ) -> dict[str, Any]:
        """A world model's scores of action sequences [K, H, dim] (or [H, dim]) from `context`
        frames: {"energies", "best", "states"} (V-JEPA 2-AC; `state`, the robot pose, required) or
        {"costs", "best"} (LeWM), plus "latents" with return_latents. With `plan` (samples, topk,
        cem_steps, horizon, seed; AC also maxnorm, gripper_clamp) and a `goal`, the planner's
        {"actions", "energy_per_iteration" | "cost_per_iteration"}. See docs/serving.md."""
        ctx = context if isinstance(context, Clip | Video | dict) else clip(context)
        body: dict[str, Any] = {"context": encode_item(ctx), "return_latents": return_latents}
        if actions is not None:
            body["actions"] = np.asarray(actions, dtype=np.float32).tolist()
        if goal is not None:
            body["goal"] = encode_item(goal)
        if state is not None:
            body["state"] = np.asarray(state, dtype=np.float32).tolist()
        if plan is not None:
            body["plan"] = plan
        return self._call("POST", "/rollout", body)

    # -- the wire

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise _server_error(exc) from None
        except urllib.error.URLError as exc:
            raise ServerError(f"cannot reach {self.url}: {exc.reason}", 0) from None



def _rows(out: Mapping[str, Any], encoding_format: str) -> np.ndarray:
    """An /v1/embeddings answer's vectors, in input order, float32."""
    rows = []
    for entry in sorted(out["data"], key=lambda e: e["index"]):
        shape = entry.get("shape") or [entry["dim"]]
        if encoding_format == "base64":
            row = np.frombuffer(base64.b64decode(entry["embedding"]), dtype="<f4")
        else:
            row = np.asarray(entry["embedding"], dtype=np.float32)
        rows.append(row.astype(np.float32).reshape(shape))
    if len({r.shape for r in rows}) > 1:
        counts = sorted({r.shape[0] for r in rows})
        raise ValueError(
            f"pool 'none' gave items with different token counts ({counts}): embed them separately"
        )
    return np.stack(rows)


def _server_error(exc: urllib.error.HTTPError) -> ServerError:
    raw = exc.read()
    exc.close()
    try:
        err = json.loads(raw)["error"]
        return ServerError(str(err["message"]), exc.code, err)
    except (ValueError, KeyError, TypeError):
        return ServerError(raw.decode("utf-8", "replace")[:500] or str(exc.reason), exc.code)
