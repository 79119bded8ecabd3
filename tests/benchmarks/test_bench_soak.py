"""bench/soak.py in short: a few clients for ~15 s against a durable server of its own, with at
least one kill -9 of the server and one worker SIGKILLed mid-job, and every invariant holding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

@pytest.mark.slow
def test_a_short_soak_survives_its_faults_and_every_invariant_holds(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--seconds", "12", "--clients", "3",
                          "--server-kill-every", "6", "--worker-kill-every", "4", "--seed", "3", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.exists(), run.stdout + run.stderr
    result = json.loads(out.read_text())
    faults, load = result["faults"], result["load"]
    assert faults["server_kills"] >= 1 and faults["worker_kills_mid_job"] >= 1, faults
    assert faults["server_found_dead"] == 0, faults
    assert load["acked"]["turn"] and load["acked"]["persist"] and load["acked"]["update"], load
    assert load["acked"]["purge"] and load["acked"]["erase"], load
    failed = {i["name"]: i["wrong"] for i in result["invariants"] if i["wrong"]}
    # the feed invariant included: an erasure racing the feed's publication once left its counter
    # behind the positions given and stuck the feed for good (found by this soak; positions are
    # given at commit since migration 0048)
    assert run.returncode == 0 and not failed, run.stdout
    assert "every invariant held" in run.stdout
