"""Issue 21, L1 and strict JSON: models.toml's keep_alive_s is a finite number (inf was taken: the
model never unloaded and /info wrote Infinity), and every JSON answer is JSON (a NaN anywhere is a
500, never a body no client can parse)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_server_support import in_process, run

import jepa_server.handlers
from jepa_server.catalog import Catalog, CatalogError


@pytest.mark.parametrize("value", ["nan", "inf", "+inf", "-inf", "-nan"])
def test_a_non_finite_keep_alive_in_models_toml_is_refused(tmp_path: Path, value: str) -> None:
    """Before: keep_alive_s = inf was taken (the model never unloaded, /info wrote Infinity)."""
    from jepa.demo import write_demo_model

    write_demo_model(tmp_path / "alpha.gguf", embed_dim=64, n_layer=1, n_head=2, img_size=32, seed=1)
    (tmp_path / "models.toml").write_text(f'[models.a]\nfile = "alpha.gguf"\nkeep_alive_s = {value}\n')
    with pytest.raises(CatalogError, match="keep_alive_s must be a finite number"):
        Catalog((), str(tmp_path))
    (tmp_path / "models.toml").write_text('[models.a]\nfile = "alpha.gguf"\nkeep_alive_s = 1e3\n')
    entry = Catalog((), str(tmp_path)).find("a")
    assert entry is not None and entry.keep_alive_s == 1000.0


def test_an_answer_never_holds_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """/info, /health and /v1/models write strict JSON: a non-finite number anywhere in them is a
    500, never a body with NaN in it."""
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in an answer")

    async def body() -> None:
        async with in_process() as (client, _):
            for path in ("/health", "/v1/models", "/info"):
                resp = await client.get(path)
                assert resp.status == 200
                json.loads(await resp.text(), parse_constant=refuse)
            h = jepa_server.handlers
            real_entry, real_pool = h._model_entry, h.pool_json
            monkeypatch.setattr(h, "_model_entry", lambda e: {**real_entry(e), "x": math.nan})
            monkeypatch.setattr(h, "pool_json", lambda m: {**real_pool(m), "x": math.inf})
            for path in ("/health", "/info"):
                resp = await client.get(path)
                text = await resp.text()
                assert resp.status == 500 and "NaN" not in text and "Infinity" not in text, (path, text)

    run(body)

