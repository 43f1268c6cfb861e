"""Attempt records (families) and the false-discovery accounting across ideas, through the API,
on SQLite and on Postgres."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.jobs.models import Job
from app.reports.service import adopt_graph_family, attempts_block, build_report_row
from bench.family import family_of
from tests.app.factories import insert_job, insert_report, key_id, report_body
from tests.conftest import bearer

T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
IDEA = """
from torch import nn

HPARAMS = {"width": [16, 32]}


def build_model(spec):
    w = spec["hparams"]["width"]
    return nn.Sequential(nn.Linear(spec["n_features"], w), nn.SiLU(), nn.Linear(w, 1))
"""
REROLL = '''"""The same idea, re-rolled: other names, other constants, a docstring."""
from torch import nn

HPARAMS = {"hidden": [24]}


def build_model(spec):
    h = spec["hparams"]["hidden"]  # renamed
    return nn.Sequential(nn.Linear(spec["n_features"], h), nn.SiLU(), nn.Linear(h, 1))
'''



def test_families_group_re_rolls_and_not_other_ideas() -> None:
    assert family_of(IDEA) == family_of(REROLL)
    assert family_of(IDEA).startswith("ast-v1:")
    assert family_of(IDEA) != family_of(IDEA.replace("nn.SiLU()", "nn.ReLU()"))  # another idea
    assert family_of(IDEA) != family_of(IDEA.replace("nn.SiLU(), ", "nn.SiLU(), nn.Linear(w, w), nn.SiLU(), "))
    assert family_of("def build_model(:\n") == family_of("def build_model(:\n")  # no parse: its text


def test_a_submission_records_its_family(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    response = client.post("/v1/ideas", json={"track": "smoke", "code": REROLL}, headers=bearer(tokens["agent"]))
    assert response.status_code == 202, response.text
    with app.state.sessionmaker() as session:
        assert session.get(Job, response.json()["job_id"]).family == family_of(IDEA)


def test_attempts_count_the_family_and_the_key_before_this_job(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, _client, tokens = env
    a, b = key_id(tokens["agent"]), key_id(tokens["agent2"])
    fam, other = family_of(IDEA), family_of("def build_model(spec):\n    return None\n")
    with app.state.sessionmaker() as session:
        minute = dt.timedelta(minutes=1)
        insert_report(session, a, report_body("worked", "helps"), T0, family=fam)
        insert_report(session, b, report_body("failed", "inconclusive", mechanism_ok=None), T0 + minute, family=fam)
        insert_report(session, a, report_body("failed", "harms", mechanism_ok=None), T0 + 2 * minute, family=other)
        insert_job(session, b, family=fam, created_at=T0 + 3 * minute)  # still queued: an attempt, no verdict
        insert_report(session, a, report_body("worked", "helps"), T0 + 4 * minute, family=fam, track="tabular")
        job = insert_job(session, a, family=fam, created_at=T0 + 5 * minute)
        insert_report(session, a, report_body("worked", "helps"), T0 + 6 * minute, family=fam)  # after it
        block = attempts_block(session, job)
        session.rollback()
    assert block == {"family": fam, "family_before": 3, "family_helps_before": 1, "key": a, "key_before": 2,
                     "key_helps_before": 1, "name": None}


def test_a_judged_job_takes_its_captured_graphs_family(env: tuple[Any, Any, dict[str, str]]) -> None:
    """Issue 25.6: re-rolls whose text differs (an alias, a no-op line) share one graph; the
    worker gives the job the graph's family before it counts the attempts, so they count."""
    app, _, tokens = env
    a = key_id(tokens["agent"])
    graph = "graph-v1:" + "ab" * 8
    with app.state.sessionmaker() as session:
        insert_report(session, a, report_body("failed", "inconclusive", mechanism_ok=None), T0, family=graph)
        job = insert_job(session, a, family=family_of(IDEA), created_at=T0 + dt.timedelta(minutes=1))
        body = report_body("worked", "helps")
        for bad in ("ast-v1:" + "0" * 16, "graph-v1:XYZ", 7, None):  # only the engine's form is taken
            body["bench_report"]["capture"] = {"idea": {"family": bad}}
            adopt_graph_family(session, job, body)
            assert job.family == family_of(IDEA)
        body["bench_report"]["capture"] = {"idea": {"family": graph}}
        adopt_graph_family(session, job, body)
        assert attempts_block(session, job)["family_before"] == 1
        session.commit()
        assert session.get(Job, job.id).family == graph


def test_a_verdict_on_a_track_its_own_key_registered_counts_nowhere(env: tuple[Any, Any, dict[str, str]]) -> None:
    """Issue 25.8: the key that registered a custom track chose its data and baseline; its own
    ideas' verdicts there are marked and enter no totals, q-values or discoveries."""
    from app.reports.service import build_report_row, mark_own_track
    from app.tracks.models import CustomTrackRow

    app, _, tokens = env
    author, other = key_id(tokens["agent"]), key_id(tokens["agent2"])
    with app.state.sessionmaker() as session:
        session.add(CustomTrackRow(id="mine@1", name="mine", version=1, sha256="0" * 64, source="", card={},
                                   domain="test", author=author, created_at=T0))
        session.flush()
        rows = {}
        for who in (author, other):
            job = insert_job(session, who, track="mine@1", created_at=T0)
            body = report_body("worked", "helps", track="mine@1", p_helps=0.001)
            body["bench_report"]["custom_track"] = {"name": "mine", "version": 1, "build_checked": True}
            mark_own_track(session, job, body)
            rows[who] = build_report_row(job, body, T0, track_vouched=True)
        # version 2 uploaded by an operator (a takeover, or the same file validated again after a
        # rotation): still the author's track (red team, session 22)
        session.add(CustomTrackRow(id="mine@2", name="mine", version=2, sha256="1" * 64, source="", card={},
                                   domain="test", author="cli:operator", created_at=T0))
        session.flush()
        second = report_body("worked", "helps", track="mine@2", p_helps=0.001)
        mark_own_track(session, insert_job(session, author, track="mine@2", created_at=T0), second)
        assert second["bench_report"]["own_track"] is True
        builtin = insert_job(session, author, created_at=T0)
        body = report_body("worked", "helps")
        mark_own_track(session, builtin, body)
        # a track whose baseline did not beat the bench's reference fits at validation: no one's
        # verdict on it counts (two keys could otherwise share a weak track)
        weak = report_body("worked", "helps", track="mine@1", p_helps=0.001)
        weak["bench_report"]["custom_track"] = {"name": "mine", "version": 1, "weak_baseline": True,
                                                "build_checked": True}
        job = insert_job(session, other, track="mine@1", created_at=T0)
        weak_counted = build_report_row(job, weak, T0, track_vouched=True).counted
        weak["bench_report"]["custom_track"] = "not a block"  # nothing stored breaks the counting
        odd_counted = build_report_row(job, weak, T0, track_vouched=True).counted
        # a job whose baseline build was not checked against validation's (another seed epoch,
        # or a report from before session 21): deny by default
        unchecked = report_body("worked", "helps", track="mine@1", p_helps=0.001)
        unchecked["bench_report"]["custom_track"] = {"name": "mine", "version": 1, "build_checked": False}
        unchecked_counted = build_report_row(job, unchecked, T0, track_vouched=True).counted
        del unchecked["bench_report"]["custom_track"]["build_checked"]
        unchecked_counted |= build_report_row(job, unchecked, T0, track_vouched=True).counted
        unvouched = build_report_row(job, weak, T0).counted  # deny by default: no vouch, no count
        session.rollback()
    assert weak_counted is False and odd_counted is False and unvouched is False and unchecked_counted is False
    assert rows[author].body["bench_report"]["own_track"] is True and rows[author].counted is False
    assert "own_track" not in rows[other].body["bench_report"] and rows[other].counted is True
    assert "own_track" not in body["bench_report"]



def test_a_custom_tracks_verdicts_count_only_once_an_operator_vouches_for_it(
    env: tuple[Any, Any, dict[str, str]],
) -> None:
    """Issue 25.8 (the second red team's data-signal track, tests/security/hostile/
    data_signal_track.py): a custom track is its author's data and baseline, and its data can
    carry a sabotage of its own baseline that no check of the baseline sees, so another key's
    ``helps`` there counts nowhere until an operator has read the file and vouches for it. The
    vouch recounts what is stored (totals, q-values, discoveries), a withdrawal takes it back,
    and the reports that never count (its own key's, a weak baseline's) stay out."""
    from app.reports.service import mark_own_track, track_vouched
    from app.tracks.models import CustomTrackRow
    from bench.track_source import parse_track_source

    app, client, tokens = env
    author, other = key_id(tokens["agent"]), key_id(tokens["agent2"])
    source = (Path(__file__).parents[1] / "security" / "hostile" / "data_signal_track.py").read_text()
    with app.state.sessionmaker() as session:
        for ident, status in (("signal@1", "active"), ("pending@1", "validating")):
            session.add(CustomTrackRow(id=ident, name=ident.split("@")[0], version=1, sha256="0" * 64,
                                       source=source, card=parse_track_source(source), domain="test",
                                       author=author, status=status,
                                       created_at=T0))
        session.flush()
        ids = {}
        for label, who, custom in (("other", other, {"name": "signal", "version": 1, "build_checked": True}),
                                   ("own", author, {"name": "signal", "version": 1, "build_checked": True}),
                                   ("weak", other, {"name": "signal", "version": 1, "weak_baseline": True,
                                                    "build_checked": True}),
                                   ("unchecked", other, {"name": "signal", "version": 1})):
            body = report_body("worked", "helps", track="signal@1", p_helps=0.001)
            body["bench_report"]["custom_track"] = custom
            job = insert_job(session, who, status="succeeded", track="signal@1", created_at=T0)
            mark_own_track(session, job, body)
            report = build_report_row(job, body, T0, track_vouched=track_vouched(session, job.track))
            job.report_id = report.id
            session.add(report)
            ids[label] = report.id
        session.commit()

    def state() -> tuple[dict[str, bool], dict[str, Any], Any, dict[str, Any]]:
        page = client.get("/v1/reports?track=signal@1&limit=50", headers=bearer(tokens["viewer"])).json()["items"]
        counted = {label: next(r["counted"] for r in page if r["report_id"] == rid) for label, rid in ids.items()}
        q = next(r["q_value"] for r in page if r["report_id"] == ids["other"])
        summary = client.get("/v1/verdicts/summary?track=signal@1&since=2026-11-01&until=2026-11-30",
                             headers=bearer(tokens["viewer"])).json()
        card = client.get("/v1/tracks/signal@1", headers=bearer(tokens["agent2"])).json()
        return counted, summary, q, card

    counted, summary, q, card = state()
    assert counted == {"other": False, "own": False, "weak": False, "unchecked": False} and q is None
    assert not any(row["counts"] for row in summary["rows"])
    assert card["vouched"] is False and card["vouched_by"] is None and card["n_reports"] == 4
    assert card["links"]["vouch"] == "/v1/tracks/signal@1/vouch"

    refused = client.put("/v1/tracks/signal@1/vouch", headers=bearer(tokens["agent2"]))
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden_role"
    assert client.put("/v1/tracks/signal@1/vouch", headers=bearer(tokens["viewer"])).status_code == 403
    for ident, status, code in (("nope@1", 404, "unknown_track"), ("smoke", 404, "unknown_track"),
                                ("pending@1", 409, "track_not_ready")):
        answer = client.put(f"/v1/tracks/{ident}/vouch", headers=bearer(tokens["operator"]))
        assert (answer.status_code, answer.json()["code"]) == (status, code), ident

    for _ in range(2):  # idempotent: a second vouch counts nothing twice
        vouched = client.put("/v1/tracks/signal@1/vouch", headers=bearer(tokens["operator"]))
        assert vouched.status_code == 200 and vouched.json()["vouched"] is True
        assert vouched.json()["vouched_by"] == key_id(tokens["operator"])
    counted, summary, q, card = state()
    assert counted == {"other": True, "own": False, "weak": False, "unchecked": False} and q == pytest.approx(0.001)
    assert [row["counts"] for row in summary["rows"] if row["counts"]] == [{"worked/helps": 1}]
    assert card["vouched"] is True and card["n_reports"] == 4
    with app.state.sessionmaker() as session:
        assert track_vouched(session, "signal@1") and not track_vouched(session, "pending@1")
        assert track_vouched(session, "smoke")

    withdrawn = client.delete("/v1/tracks/signal@1/vouch", headers=bearer(tokens["operator"]))
    assert withdrawn.status_code == 200 and withdrawn.json()["vouched"] is False
    counted, summary, q, card = state()
    assert counted == {"other": False, "own": False, "weak": False, "unchecked": False} and q is None
    assert not any(row["counts"] for row in summary["rows"])


def _seed_p(app: Any, token: str, rows: list[tuple[str, float, bool, str | None]]) -> list[str]:
    ids = []
    with app.state.sessionmaker() as session:
        for i, (track, p, worked, baseline_code) in enumerate(rows):
            body = report_body("worked" if worked else "failed", "helps" if worked else "inconclusive",
                               mechanism_ok=None, p_helps=p, track=track)
            report = insert_report(session, key_id(token), body, T0 + dt.timedelta(minutes=i), track=track,
                                   family=f"ast-v1:{i:016x}", baseline_code=baseline_code)
            ids.append(report.id)
        session.commit()
    return ids


def test_q_values_in_the_listing_equal_a_hand_computation(env: tuple[Any, Any, dict[str, str]]) -> None:
    app, client, tokens = env
    matched = "def build_model(spec):\n    return None\n"
    ids = _seed_p(app, tokens["agent"], [
        ("smoke", 0.01, True, None), ("smoke", 0.04, False, None), ("smoke", 0.03, True, matched),
        ("smoke", 0.5, False, None), ("smoke", 0.02, True, None), ("tabular", 0.01, True, None),
    ])
    page = client.get("/v1/reports?limit=200", headers=bearer(tokens["viewer"])).json()["items"]
    q = {row["report_id"]: (row["q_value"], row["q_value_baseline"], row["baseline"]) for row in page}
    # smoke's canonical stream, m = 4 (the matched baseline's win is not in it):
    # p 0.01 0.02 0.04 0.5 -> 4p/rank 0.04 0.04 0.0533 0.5
    assert q[ids[0]][0] == pytest.approx(0.04) and q[ids[3]][0] == pytest.approx(0.5)
    assert q[ids[1]][0] == pytest.approx(0.04 * 4 / 3)
    assert q[ids[5]][0] == pytest.approx(0.01)  # tabular alone: q = p
    assert q[ids[0]][1] == pytest.approx(0.04) and q[ids[1]][1] == pytest.approx(0.04 * 4 / 3)
    # the matched baseline's win: the matched stream only (every matched baseline's, since session 36)
    assert q[ids[2]][0] is None and q[ids[2]][1] == pytest.approx(0.03) and q[ids[2]][2] == "matched"
    one = client.get(f"/v1/reports/{ids[1]}", headers=bearer(tokens["viewer"])).json()
    assert one["q_value"] == pytest.approx(0.04 * 4 / 3) and one["p_helps"] == 0.04
    fam = client.get(f"/v1/reports?family=ast-v1:{2:016x}", headers=bearer(tokens["viewer"])).json()["items"]
    assert [row["report_id"] for row in fam] == [ids[2]]


def test_the_summary_gives_the_expected_false_discoveries_among_worked(
    env: tuple[Any, Any, dict[str, str]],
) -> None:
    app, client, tokens = env
    _seed_p(app, tokens["agent"], [("smoke", 0.01, True, None), ("smoke", 0.04, True, None),
                                   ("smoke", 0.03, False, None), ("smoke", 0.5, False, None)])
    summary = client.get("/v1/verdicts/summary?since=2026-11-01&until=2026-11-30",
                         headers=bearer(tokens["viewer"])).json()
    (smoke,) = summary["totals"]
    # m = 4: p 0.01 0.03 0.04 0.5 -> 4p/rank 0.04 0.04 0.0533 0.5, monotone: 0.04 0.0533 0.0533 0.5
    found = smoke["discoveries"]
    assert (found["judged"], found["worked"]) == (4, 2)
    assert found["q_max_worked"] == pytest.approx(0.16 / 3)
    assert found["expected_false_worked"] == pytest.approx(0.16 / 3 * 3, abs=1e-6)  # three ideas at or below q*


def test_a_report_judged_under_a_weak_sandbox_counts_nowhere(env: tuple[Any, Any, dict[str, str]]) -> None:
    """Issue 25.10: a report judged without the sandbox's judging layers (possible only under the
    development setting IDEABENCH_ALLOW_WEAK_SANDBOX) stays readable but enters no verdict totals
    and no q-values: its code could have changed its own numbers."""
    app, client, tokens = env
    weak = report_body("worked", "helps", p_helps=0.001)
    weak["bench_report"]["sandbox"] = {"complete": False, "missing": ["namespaces", "no_network"]}
    full = report_body("failed", "inconclusive", mechanism_ok=None, p_helps=0.2)
    full["bench_report"]["sandbox"] = {"complete": True, "missing": []}
    with app.state.sessionmaker() as session:
        weak_row = insert_report(session, key_id(tokens["agent"]), weak, T0)
        full_row = insert_report(session, key_id(tokens["agent"]), full, T0 + dt.timedelta(minutes=1))
        session.commit()
        assert (weak_row.counted, full_row.counted) == (False, True)
    summary = client.get("/v1/verdicts/summary?since=2026-11-01&until=2026-11-30",
                         headers=bearer(tokens["viewer"])).json()
    (smoke,) = summary["totals"]
    assert smoke["counts"] == {"failed/inconclusive": 1}
    assert (smoke["discoveries"]["judged"], smoke["discoveries"]["worked"]) == (1, 0)
    page = {row["report_id"]: row for row in client.get("/v1/reports?limit=200",
                                                         headers=bearer(tokens["viewer"])).json()["items"]}
    assert page[weak_row.id]["q_value"] is None and page[full_row.id]["q_value"] == pytest.approx(0.2)


def test_junk_wins_and_re_rolls_buy_no_discovery(env: tuple[Any, Any, dict[str, str]]) -> None:
    """Issue 25.6-7: 20 junk wins over an agent's own matched baselines moved a track's q-values
    from 0.188 to 0.046 (a discovery), and re-rolling one idea 21 times got 3 helps. Matched
    baselines and lr_confounded results stay out of the canonical stream, and one key's attempts
    of one family are one hypothesis (Bonferroni over them)."""
    app, client, tokens = env
    agent = key_id(tokens["agent"])
    with app.state.sessionmaker() as session:
        honest = insert_report(session, agent, report_body("worked", "helps", mechanism_ok=None, p_helps=0.04),
                               T0, family="ast-v1:honest")
        for i in range(20):  # junk wins over baselines of the agent's own
            insert_report(session, agent, report_body("worked", "helps", mechanism_ok=None, p_helps=0.001),
                          T0 + dt.timedelta(minutes=1 + i), family=f"ast-v1:junk{i}",
                          baseline_code=f"def build_model(spec):\n    return {i}\n")
        confounded = report_body("failed", "inconclusive", mechanism_ok=None, p_helps=0.001)
        confounded["practical_detail"] = "lr_confounded"
        insert_report(session, agent, confounded, T0 + dt.timedelta(minutes=30), family="ast-v1:edge")
        rolls = [insert_report(session, agent, report_body("failed", "inconclusive", mechanism_ok=None,
                                                           p_helps=p), T0 + dt.timedelta(minutes=40 + i),
                               family="ast-v1:reroll") for i, p in enumerate([0.5, 0.3, 0.02, 0.6])]
        session.commit()
    page = {row["report_id"]: row for row in client.get("/v1/reports?limit=200&track=smoke",
                                                         headers=bearer(tokens["viewer"])).json()["items"]}
    # canonical stream: the honest idea (0.04) and the re-rolled family (4 x 0.02 = 0.08), m = 2
    assert page[honest.id]["q_value"] == pytest.approx(0.08)
    assert [page[r.id]["q_value"] for r in rolls] == pytest.approx([0.08] * 4)
    summary = client.get("/v1/verdicts/summary?since=2026-11-01&until=2026-11-30",
                         headers=bearer(tokens["viewer"])).json()
    (smoke,) = summary["totals"]
    assert smoke["discoveries"]["judged"] == 2 and smoke["discoveries"]["worked"] == 1


def test_a_stream_is_one_track_version_epoch_and_device_class_and_public_data_enters_none(
    env: tuple[Any, Any, dict[str, str]],
) -> None:
    """Issues 25.4 and 28.1: ideas judged on another track version (other data), under another
    seed epoch or on another device class are other experiments; each is its own stream, and a
    track's accounting adds them up. A report on public data (cifar10: a file can embed what it
    evaluates) gets no q-value and is never a discovery."""
    app, client, tokens = env
    ids = []
    with app.state.sessionmaker() as session:
        for i, (version, epoch, device, public, p) in enumerate([
            (2, 1, "cpu", False, 0.01), (2, 1, "cpu", False, 0.04),  # one stream: m = 2
            (1, 1, "cpu", False, 0.02),  # the track's old version
            (2, 2, "cpu", False, 0.03),  # a rotated secret
            (2, 1, "cuda:0", False, 0.05),  # a GPU worker
            (2, 1, "cpu", True, 0.001),  # public data
        ]):
            body = report_body("worked", "helps", mechanism_ok=None, p_helps=p)
            body["bench_report"].update(track_version=version, device=device, public_data=public,
                                        seed_commitment={"scheme": "hmac-sha256/v1", "epoch": epoch})
            ids.append(insert_report(session, key_id(tokens["agent"]), body, T0 + dt.timedelta(minutes=i),
                                     family=f"ast-v1:{i:016x}").id)
        session.commit()
    page = {r["report_id"]: r["q_value"] for r in client.get(
        "/v1/reports?limit=200", headers=bearer(tokens["viewer"])).json()["items"]}
    assert page[ids[0]] == pytest.approx(0.02) and page[ids[1]] == pytest.approx(0.04)  # 2p/1, 2p/2
    assert [page[i] for i in ids[2:5]] == pytest.approx([0.02, 0.03, 0.05])  # each alone: q = p
    assert page[ids[5]] is None
    (smoke,) = client.get("/v1/verdicts/summary?since=2026-11-01&until=2026-11-30",
                          headers=bearer(tokens["viewer"])).json()["totals"]
    assert (smoke["discoveries"]["judged"], smoke["discoveries"]["worked"]) == (5, 5)
    assert smoke["discoveries"]["q_max_worked"] == pytest.approx(0.05)


def test_kept_q_values_equal_the_whole_procedure_as_reports_arrive(
    env: tuple[Any, Any, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28.9: a process keeps each track's streams between reads and adds the reports
    stored since; every page's q-values and every track's accounting equal the whole
    procedure (``qvalues_from_scratch``, ``per_track_from_scratch``) as reports of every kind
    arrive (streams by version, epoch and device; matched baselines; re-rolled families; reports
    without a family; lr_confounded, public-data and uncounted ones). New reports advance the
    kept streams (no rebuild); a stored report that stops counting rebuilds its track; a read
    with nothing stored since does neither."""
    import random

    from app.reports import discoveries
    from app.reports.models import Report

    app, _, tokens = env
    keys = [key_id(tokens[k]) for k in ("agent", "agent2", "operator")]
    calls: dict[str, list[str]] = {"_build": [], "_advance": []}
    for name in calls:
        real = getattr(discoveries, name)
        monkeypatch.setattr(discoveries, name, lambda session, state_or_track, *rest, _real=real, _name=name: (
            calls[_name].append(state_or_track if isinstance(state_or_track, str) else rest[0]),
            _real(session, state_or_track, *rest))[1])
    rng = random.Random(28)
    with app.state.sessionmaker() as session:
        for round_ in range(6):
            for i in range(14):
                job = insert_job(session, rng.choice(keys), status="succeeded", track=rng.choice(["smoke", "tabular"]),
                                 family=rng.choice([f"ast-v1:{n:016x}" for n in range(6)] + [None]),
                                 created_at=T0 + dt.timedelta(minutes=round_ * 20 + i),
                                 baseline_code=rng.choice([None, None, None, "def build_model(spec):\n    return 1\n"]))
                worked = rng.random() < 0.4
                body = report_body("worked" if worked else "failed", "helps" if worked else "inconclusive",
                                   track=job.track, p_helps=rng.choice([0.0078125, 0.01, 0.3, rng.random()]))
                row = build_report_row(job, body, job.created_at)
                row.track_version, row.seed_epoch = rng.choice([1, 2]), rng.choice([1, 1, 2])
                row.device_class = rng.choice(["cpu", "cpu", "cuda"])
                row.public_data = rng.random() < 0.05
                row.counted = rng.random() > 0.1
                if rng.random() < 0.1:
                    row.practical_detail = "lr_confounded"
                job.report_id = row.id
                session.add(row)
                if round_ == 5:  # one at a time: each read advances by one report
                    session.commit()
                    assert discoveries.qvalues(session, [row]) == {
                        k: v for k, v in discoveries.qvalues_from_scratch(session, {row.track}).items() if k == row.id}
            session.commit()
            if round_ == 3:  # a stored report stops counting (as a withdrawn vouch does)
                first = session.scalars(select(Report).where(Report.counted.is_(True)).limit(1)).one()
                first.counted = False
                session.commit()
            reports = list(session.scalars(select(Report)))
            for read in range(2):  # the second read finds every track kept
                before = {name: len(made) for name, made in calls.items()}
                kept = discoveries.qvalues(session, reports)
                scratch = discoveries.qvalues_from_scratch(session, {"smoke", "tabular"})
                none = discoveries.QValues(None, None)
                assert {r.id: kept.get(r.id, none) for r in reports} == {
                    r.id: scratch.get(r.id, none) for r in reports}, round_
                assert discoveries.per_track(session, None) == discoveries.per_track_from_scratch(session, None)
                assert discoveries.per_track(session, {"smoke"}) == discoveries.per_track_from_scratch(session, {"smoke"})
                made = {name: calls[name][before[name]:] for name in calls}
                if read == 1:
                    assert made == {"_build": [], "_advance": []}, "a read with nothing stored since redid work"
                elif round_ == 3:
                    assert made["_build"], "a report that stopped counting did not rebuild its track"
                elif round_ in (1, 2, 4):
                    assert made["_build"] == [] and made["_advance"], "new reports rebuilt the track"
            assert any(q.track is not None for q in kept.values()) and any(
                q.track is None and q.baseline is not None for q in kept.values())


def test_the_summary_keeps_one_stream_apart_or_adds_them_up(env: tuple[Any, Any, dict[str, str]]) -> None:
    """Issue 28.1: a track's verdict counts and discoveries are kept by stream (version, seed
    epoch, device class); the summary adds them up, or keeps the streams its filters name."""
    from app.reports.repository import count_verdict

    app, client, tokens = env
    with app.state.sessionmaker() as session:
        for i, (device, epoch, worked) in enumerate([("cpu", 1, True), ("cuda", 1, True), ("cuda", 2, False),
                                                     ("cuda", 2, True)]):
            job = insert_job(session, key_id(tokens["agent"]), status="succeeded", created_at=T0,
                             family=f"ast-v1:{i:016x}")
            body = report_body("worked" if worked else "failed", "helps" if worked else "inconclusive",
                               p_helps=0.01 if worked else 0.4)
            row = build_report_row(job, body, T0)
            row.track_version, row.seed_epoch, row.device_class = 1, epoch, device
            job.report_id = row.id
            session.add(row)
            session.flush()
            count_verdict(session, row)
        session.commit()

    def totals(**stream: Any) -> tuple[dict[str, int], Any]:
        answer = client.get("/v1/verdicts/summary", params={"track": "smoke", "since": "2026-11-01",
                                                            "until": "2026-11-30", **stream},
                            headers=bearer(tokens["viewer"]))
        assert answer.status_code == 200, answer.text
        (total,) = answer.json()["totals"] or [{"counts": {}, "discoveries": None}]
        return total["counts"], total["discoveries"]

    counts, found = totals()
    assert counts == {"worked/helps": 3, "failed/inconclusive": 1} and found["judged"] == 4
    counts, found = totals(device_class="cuda")
    assert counts == {"worked/helps": 2, "failed/inconclusive": 1} and found["judged"] == 3
    counts, found = totals(device_class="cuda", seed_epoch=2)
    assert counts == {"worked/helps": 1, "failed/inconclusive": 1} and (found["judged"], found["worked"]) == (2, 1)
    assert totals(track_version=2) == ({}, None)
    refused = client.get("/v1/verdicts/summary", params={"device_class": "tpu"}, headers=bearer(tokens["viewer"]))
    assert refused.status_code == 422
