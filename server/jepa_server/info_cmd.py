"""`jepa-server info`: what a server started with these flags would serve, without loading anything.

It resolves the settings exactly as `jepa-server` does (flags > JEPA_* > --config TOML > defaults)
and prints each with where its value came from, the device table (the CPU, and every CUDA device a
CUDA build sees, with its free and total memory now), and the servable models (the -m files and
--models-dir's catalog), each read from its GGUF header only: family, dtype, size, what it is. A
file whose header cannot be read is listed with the reason (`jepa-server check` fails on it).
`--json` prints the same as one JSON object."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jepa.errors import JepaError, ModelFileError

from .catalog import Catalog, CatalogError, ModelEntry, dtype_name, model_paths
from .settings import Settings, SettingsError, resolve_settings, subcommand_args

_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
# What a model's row shows, read from its header alone (jepa.gguf.header: bounded).
_INFO_KEYS = ("general.architecture", "general.name", "general.file_type", "jepa.family", "jepa.modality")


def _cpu() -> dict[str, Any]:
    name, flags = "", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    import jepa

    cores = jepa.default_threads()  # the CPUs this process may use: affinity, then the cgroup's quota
    out: dict[str, Any] = {"device": "cpu", "name": name or "unknown CPU", "cores": cores,
                           "isa": [f for f in _CPU_FLAGS if f in flags]}
    out.update(_memory("cpu"))
    return out


def _memory(device: str) -> dict[str, Any]:
    """(free, total) as the engine's backend reports them; {} where it cannot."""
    import jepa

    try:
        free, total = jepa.device_memory(device)
    except JepaError as exc:  # a device this build or machine does not have: say why
        return {"error": str(exc)}
    return {"free_mib": round(free / 2**20), "total_mib": round(total / 2**20)}


def devices(s: Settings) -> list[dict[str, Any]]:
    import jepa

    table = [_cpu()]
    wanted = [d for d in s.device_list if d != "cpu"]
    if jepa.has_cuda():
        for i in range(16):  # every device the build sees (device_memory refuses one past the last)
            row = {"device": f"cuda:{i}", **_memory(f"cuda:{i}")}
            if "error" in row:
                break
            table.append(row)
    seen = {row["device"] for row in table}
    for d in wanted:
        if d not in seen:
            table.append({"device": d, "error": "not available in this build or on this machine"})
    used = set(s.device_list)
    for row in table:
        row["serves"] = row["device"] in used
    return table


def _header(entry: ModelEntry) -> dict[str, Any]:
    row: dict[str, Any] = {"id": entry.id, "file": entry.path, "pinned": entry.pinned,
                           "aliases": list(entry.aliases)}
    try:
        row["size_mib"] = round(os.path.getsize(entry.path) / 2**20, 1)
        from jepa.gguf.header import read_header

        h = read_header(entry.path, _INFO_KEYS)
        if h.get("general.architecture") != "jepa":
            raise ModelFileError(f"general.architecture is {h.get('general.architecture')!r}, not 'jepa'")
        ft = h.get("general.file_type")
        row.update(
            family=h.get("jepa.family"),
            name=h.get("general.name"),
            modality=h.get("jepa.modality"),
            dtype=dtype_name(int(ft)) if isinstance(ft, int) else None,
            tensors=len(h.tensors),
        )
    except (OSError, JepaError) as exc:  # the file is not servable: `jepa-server check` says more
        row["error"] = str(exc) if isinstance(exc, JepaError) else exc.strerror or str(exc)
    return row


def report(s: Settings, sources: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "settings": {name: {"value": _show(getattr(s, name)), "from": sources[name]} for name in sources},
        "devices": devices(s),
    }
    try:
        catalog = Catalog(model_paths(s), s.models_dir, s.model_id)
    except CatalogError as exc:
        out["models"], out["models_error"] = [], str(exc)
        return out
    default = catalog.default
    out["default_model"] = None if default is None else default.id
    out["models"] = [_header(e) for e in catalog.entries()]
    return out


def _show(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


def _print(r: dict[str, Any], api_key_set: bool) -> None:
    print("configuration (flag > JEPA_* environment > --config file > default):")
    for name, v in r["settings"].items():
        value = "(set)" if name == "api_key" and api_key_set else v["value"]
        print(f"  {name:24s} {json.dumps(value):40s} {v['from']}")
    print("devices:")
    for d in r["devices"]:
        mark = "*" if d["serves"] else " "
        if "error" in d:
            print(f" {mark}{d['device']:8s} {d['error']}")
            continue
        what = f"{d.get('name', '')} {d.get('cores', '')} cores {','.join(d.get('isa', []))}".strip()
        print(f" {mark}{d['device']:8s} {what if d['device'] == 'cpu' else ''} "
              f"{d['free_mib']} MiB free of {d['total_mib']}")
    print("models" + (f" (default: {r['default_model']}):" if r.get("default_model") else ":"))
    if "models_error" in r:
        print(f"  cannot read the catalog: {r['models_error']}")
    for m in r["models"]:
        head = f"  {m['id']:24s} {'pinned' if m['pinned'] else 'on demand':9s}"
        if "error" in m:
            print(f"{head} {m['file']}: {m['error']}")
        else:
            aliases = f" aliases {','.join(m['aliases'])}" if m["aliases"] else ""
            print(f"{head} {m['family']} {m['dtype']} {m['size_mib']} MiB  {m['file']}{aliases}")
    if not r["models"]:
        print("  none (give -m FILE, --models-dir DIR or --demo)")


def main(argv: Sequence[str] | None = None) -> int:
    """jepa-server info [--json] [the server's own flags]."""
    args = subcommand_args("info", __doc__ or "", "[--json]", argv,
                           lambda p: p.add_argument("--json", action="store_true"))
    if args is None:
        return 0
    own, rest = args
    try:
        s, sources = resolve_settings(rest)
    except SettingsError as exc:
        print(f"jepa-server info: {exc}", file=sys.stderr)
        return 2
    r = report(s, sources)
    if s.api_key is not None:
        r["settings"]["api_key"]["value"] = "(set)"  # never printed
    if own.json:
        print(json.dumps(r, indent=1))
    else:
        _print(r, s.api_key is not None)
    return 0
