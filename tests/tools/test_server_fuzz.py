"""pyriver_dev.server_fuzz: the cases are the seed's, reach every endpoint with broken bodies too;
a short live run over loopback gets no 5xx, no hang, no slot left busy."""
from __future__ import annotations

import pytest

from pyriver_dev import server_fuzz as F


def test_cases_are_seeded_and_reach_every_endpoint():
    a, b = F.cases(3, 300), F.cases(3, 300)
    assert a == b and a != F.cases(4, 300)
    assert {p for p, _, _ in a} == {p for p, _ in F.ENDPOINTS}
    whats = " ".join(w for _, _, w in a)
    assert "broken UTF-8" in whats or "not JSON" in whats
    assert "an unknown field" in whats and "without" in whats


def test_shaped():
    assert F._shaped(200, b"[]") and F._shaped(400, b'{"error": {"message": "x"}}')
    assert not F._shaped(400, b"Bad Request") and not F._shaped(422, b'{"detail": "x"}')


def test_only_back_pressure_and_not_built_are_allowed_5xx():
    assert F._allowed_5xx(501, b'{"error": {"message": "x"}}')
    assert F._allowed_5xx(503, b'{"error": {"message": "busy", "code": "queue_full"}}')
    assert not F._allowed_5xx(503, b'{"error": {"message": "x", "code": null}}')
    assert not F._allowed_5xx(500, b'{"error": {"message": "x", "code": "queue_full"}}')
    assert not F._allowed_5xx(503, b"Service Unavailable")


@pytest.mark.slow
def test_short_live_run(smol_path):
    r = F.run(smol_path, 90, 7, 60.0)
    assert r["failures"] == [] and r["hangs"] == 0 and r["5xx"] == 0, r["failures"][:5]
    assert r["slots_busy_after"] == 0 and sum(r["counts"].values()) == 90
