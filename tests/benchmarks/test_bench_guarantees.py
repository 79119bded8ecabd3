"""bench/guarantees.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import guarantees  # noqa: E402


def test_guarantees_bench_small(dsn, tmp_path):
    result = guarantees.main(["--dsn", dsn, "--users", "5", "--rounds", "1", "--calls", "3",
                              "--results-dir", str(tmp_path)])
    table = result["table"]
    assert set(table) == {"re-add, vector", "re-add, no vector", "fact_lookup", "new fact, vector",
                          "supersede, vector"}
    for call, sides in table.items():
        assert set(sides) == set(guarantees.VARIANTS), call
        for name, m in sides.items():
            assert m["server_cpu_us"] > 0 and m["client_cpu_us"] > 0 and m["wall_p50_us"] > 0, (call, name)
    # what each copy differs in: forced RLS off on one, the tenant check at entry off on the other
    for name in guarantees.VARIANTS:
        db = guarantees.DB if name == "base" else f"{guarantees.DB}_{name}"
        with psycopg.connect(make_conninfo(dsn, dbname=db), autocommit=True) as c:
            forced = c.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                               "WHERE n.nspname = 'pymem' AND c.relforcerowsecurity").fetchone()[0]
            enter = c.execute("SELECT prosrc FROM pg_proc WHERE oid = 'pymem._tenant_enter(text)'::regprocedure"
                              ).fetchone()[0]
            versions = c.execute("SELECT count(*) FROM pymem.facts WHERE superseded_by IS NOT NULL").fetchone()[0]
        assert (forced == 0) == (name == "no_force_rls"), name
        assert ("tenant_allowed" in enter) == (name != "no_tenant_check"), name
        assert versions > 0, name  # the supersedes ran on every copy
    assert Path(result["result_file"]).exists()
