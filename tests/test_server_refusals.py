"""The declarations docs/serving.md's Refusals and Budgets tables are rendered from, held to the
server's code: every error code the server's source raises is declared (and nothing else), and every
limit setting has its Budgets row."""

from __future__ import annotations

import dataclasses
import re

from jepa_server.budget_table import BUDGETS, budgets_table
from jepa_server.errors import _CODE_BY_STATUS
from jepa_server.refusals import REFUSALS
from jepa_server.settings import Settings

from conftest import ROOT

SERVER = ROOT / "server" / "jepa_server"
# Settings that bound a request's memory or time (the rest tune scheduling, paths, auth, logging).
NOT_BUDGETS = {"max_batch", "max_wait_ms"}


def _raised_codes() -> set[str]:
    codes: set[str] = set(_CODE_BY_STATUS.values())
    for path in SERVER.glob("*.py"):
        if path.name in ("refusals.py", "budget_table.py"):
            continue
        text = path.read_text()
        codes |= set(re.findall(r"\bcode\s*=\s*\"(\w+)\"", text))
        codes |= set(re.findall(r"\bcode: str = \"(\w+)\"", text))
    return codes


def test_every_raised_code_is_declared_and_only_those() -> None:
    declared = [c for r in REFUSALS for c in r.codes]
    assert len(declared) == len(set(declared)), "a code declared twice"
    raised = _raised_codes()
    assert raised - set(declared) == set(), f"raised but undocumented: {sorted(raised - set(declared))}"
    assert set(declared) - raised == set(), f"documented but never raised: {sorted(set(declared) - raised)}"


def test_every_limit_setting_has_a_budget_row() -> None:
    limits = {
        f.name
        for f in dataclasses.fields(Settings)
        if (f.name.startswith("max_") or f.name.endswith("timeout_s")) and f.name not in NOT_BUDGETS
    }
    covered = {s for b in BUDGETS for s in b.settings}
    assert limits - covered == set(), f"limits without a Budgets row: {sorted(limits - covered)}"
    assert covered <= {f.name for f in dataclasses.fields(Settings)}
    table = budgets_table()
    for f in dataclasses.fields(Settings):
        if f.name in covered:
            assert f"`{f.metadata['flags'][-1]}`" in table, f.name
