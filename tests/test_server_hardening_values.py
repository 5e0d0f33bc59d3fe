"""Issue 21, L1: models.toml's keep_alive_s is a finite number (inf was taken: the model never
unloaded and /info wrote Infinity)."""

from __future__ import annotations

from pathlib import Path

import pytest

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

