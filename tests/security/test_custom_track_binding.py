"""Custom-track validation binds: it makes every seed of a job exactly as a job does (same
directory names, same calls, one child per call, twice), and a job's data must match the
validated checksums and sizes."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench import options as engine_options
from bench.custom_track import CustomTrack, cache_dir, ensure_data, validate
from bench.errors import BenchError, ErrorCode
from bench.seeding import final_seeds, run_seeds, sweep_seeds
from tests.conftest import count_launches, use_cache

HOSTILE = Path(__file__).parent / "hostile"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    use_cache(tmp_path / "cache")
    return tmp_path / "cache"


def _job_seeds(track: CustomTrack) -> list[int]:
    d = track.card["defaults"]
    secret = engine_options.current().deployment_secret()
    return [run_seeds(s, secret, track=track.id).split for s in sweep_seeds(d["sweep_seeds"]) + final_seeds(d["n_seeds"])]


def test_a_two_faced_track_shows_its_job_face_to_validation(cache: Path) -> None:
    track = CustomTrack.from_source((HOSTILE / "two_faced_track.py").read_text())
    result = validate(track, timeout_s=600)
    validated = replace(track, sizes=result["sizes"], checksums=result["checksums"])
    assert set(validated.checksums) == {str(s) for s in _job_seeds(track)}
    # A job on another worker (an empty cache) makes its data again: the same bytes.
    shutil.rmtree(cache_dir(track, cache / "tracks"))
    ensure_data(validated, _job_seeds(track), root=cache / "tracks", timeout_s=300)
    assert {p.name for p in cache_dir(track, cache / "tracks").iterdir()} >= {str(s) for s in _job_seeds(track)}


def test_a_job_whose_data_differs_from_the_validated_data_is_refused(cache: Path) -> None:
    source = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    track = CustomTrack.from_source(source)
    seeds = _job_seeds(track)
    forged = replace(track, checksums={str(seeds[0]): "0" * 64})
    with pytest.raises(BenchError) as info:
        ensure_data(forged, seeds[:2], root=cache / "tracks", timeout_s=300)
    assert info.value.code == ErrorCode.INVALID_TRACK
    assert "other data" in info.value.message
    resized = replace(track, sizes={"train": 1, "val": 1, "test": 1})
    with pytest.raises(BenchError):
        ensure_data(resized, seeds[2:3], root=cache / "tracks", timeout_s=300)


# Hostile (found by a red-team pass): an honest tiny track whose baseline counts its builds.
# Validation builds it once and sees a sound MLP; a job built one per init seed in one capture
# child, and every build after the first was zeroed: a dead baseline that any idea beats
# ('worked'). Then refused (every init seed's tensors must be drawn like the first seed's); since
# session 21 a job builds a custom track's own baseline once, at validation's seed, and that
# build is every seed's (issue 25, "still open" (b): a baseline sabotaged only a little at
# other seeds passed every check of a single tensor).
COUNTING_BASELINE = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text().replace(
    '"name": "tiny_quadratic"', '"name": "counting_baseline"').replace(
    "def build_baseline(spec):\n    return nn.Sequential(nn.Linear(spec[\"n_features\"], 16), nn.ReLU(), nn.Linear(16, 1))",
    "BUILDS = [0]\n\n\ndef build_baseline(spec):\n    BUILDS[0] += 1\n"
    "    model = nn.Sequential(nn.Linear(spec[\"n_features\"], 16), nn.ReLU(), nn.Linear(16, 1))\n"
    "    if BUILDS[0] > 1:\n        for p in model.parameters():\n            p.data.mul_(0.9)\n    return model")


def test_a_custom_tracks_baseline_is_its_validated_build_in_every_seed(cache: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Its baseline shrinks every build after the first by 10 % (drawn alike: no check of a
    tensor's values tells), so the old job trained a slightly sabotaged baseline at every seed but
    one. Now its code builds once in the job, at validation's seed (that build bit for bit
    validation's), and the confirmation runs none of it again: no baseline rebuild child."""
    import tempfile

    from bench import protocol
    from bench.judge import JudgeRequest, judge
    from tests.bench.test_confirmation import N, lucky_screening

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    track = CustomTrack.from_source(COUNTING_BASELINE)
    result = validate(track, timeout_s=600)
    assert "BUILDS[0] > 1" in COUNTING_BASELINE and not result["warnings"]  # validation saw the first build
    track = replace(track, sizes=result["sizes"], checksums=result["checksums"],
                    baseline_graph_sha256=result["baseline_graph_sha256"],
                    baseline_seed_sha256=result["baseline_seed_sha256"], validated_epoch=result["seed_epoch"])
    started = count_launches(monkeypatch)
    monkeypatch.setattr(protocol.Job, "stage_values", lucky_screening)  # on to the confirmation
    builds: list[list[int]] = []
    real_capture = protocol.wire.Capture

    def seen(**kwargs: Any) -> Any:
        builds.append(list(kwargs["init_seeds"]))
        return real_capture(**kwargs)

    monkeypatch.setattr(protocol.wire, "Capture", seen)
    idea = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    report = judge(JudgeRequest(track=track.id, idea_code=idea, custom_track=track, n_seeds=N)).model_dump(mode="json")
    assert len(builds) == 2 and min(len(b) for b in builds) == 1 < max(len(b) for b in builds), builds
    assert report["bench_report"]["confirmation"] is not None, (report["summary"], report["bench_report"].get("warnings"))  # reached: the copy, not a rebuild
    assert report["bench_report"]["custom_track"]["build_checked"] is True  # validation's build: it may count
    assert "rebuild_baseline_1" not in started and "rebuild_idea_1" in started, started


def test_a_job_must_capture_the_baseline_graph_validation_captured(cache: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25.8: validation records the graph hash of the track's baseline; a job whose
    capture of it differs (a track file that builds another model when judging) is refused."""
    import tempfile

    from bench.judge import JudgeRequest, judge

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    source = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()
    track = CustomTrack.from_source(source)
    result = validate(track, timeout_s=600)
    assert len(result["baseline_graph_sha256"]) == 64
    fits = result["reference_fits"]  # the MLP baseline beats a constant and a ridge fit of the quadratic
    assert fits["beats"] and fits["baseline"] <= 0.98 * min(fits["constant"], fits["ridge"])
    # the record of another build (as if validation had seen another model)
    forged = replace(track, sizes=result["sizes"], checksums=result["checksums"], baseline_graph_sha256="0" * 64)
    idea = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track=track.id, idea_code=idea, custom_track=forged, n_seeds=2))
    assert info.value.code == ErrorCode.INCONSISTENT_BUILD and "validation" in info.value.message


def test_honest_inits_are_drawn_alike_and_sabotaged_ones_are_not() -> None:
    import numpy as np
    import torch

    from bench.captured import check_drawn_alike

    def init(seed: int) -> list[np.ndarray]:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 1))
        return [p.detach().numpy().copy() for p in model.parameters()]

    first = init(0)
    for seed in range(1, 200):  # 199 honest seeds x 5 tensors: no false refusal
        for j, (a, b) in enumerate(zip(first, init(seed), strict=True)):
            check_drawn_alike(a, b, "baseline", j)
    weight = first[0]
    for sabotaged in (np.zeros_like(weight), weight * 0.2, np.tile(weight[:1], (64, 1))):
        with pytest.raises(BenchError) as info:
            check_drawn_alike(weight, sabotaged, "baseline", 0)
        assert info.value.code == ErrorCode.NOT_CAPTURABLE
    with pytest.raises(BenchError):  # a LayerNorm's ones, zeroed in a later seed
        check_drawn_alike(first[2], np.zeros_like(first[2]), "baseline", 2)


# Hostile: a track author's baseline that writes the seeds it was built with into an error's text
# (the red team's leak of issue 25) once it has built every model of a job.
SEED_LEAKING_BASELINE = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text().replace(
    '"name": "tiny_quadratic"', '"name": "seed_leaking_baseline"').replace(
    "def build_baseline(spec):\n    return nn.Sequential(nn.Linear(spec[\"n_features\"], 16), nn.ReLU(), nn.Linear(16, 1))",
    "SEEN = []\n\n\ndef build_baseline(spec):\n    import torch\n    SEEN.append(torch.initial_seed())\n"
    "    if len(SEEN) == BUILDS:\n        raise RuntimeError('built with ' + ' '.join(map(str, SEEN)))\n"
    "    return nn.Sequential(nn.Linear(spec[\"n_features\"], 16), nn.ReLU(), nn.Linear(16, 1))")


def test_a_custom_tracks_baseline_never_sees_the_epochs_screening_init_seeds(cache: Path) -> None:
    """Issue 25's residual: a custom track's baseline (its author's code) built the screening
    with the epoch's shared init seeds, which every job of the epoch trains from: its author
    could learn them, then tell the confirmation's decoys from its new seeds. Then it built them
    with seeds of its job alone; since session 21 it builds once per job, at sweep seed 0 (the
    seed validation built with), and every seed trains from that build."""
    from bench.judge import JudgeRequest, judge
    from bench.seeding import public_secret, screening_pool

    track = CustomTrack.from_source(SEED_LEAKING_BASELINE.replace("BUILDS", "1"))
    secret = public_secret()
    idea = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    pool = {run_seeds(s, secret, track=track.id).init for s in screening_pool()}
    for job_key in ("job_a", "job_b"):
        with pytest.raises(BenchError) as info:
            judge(JudgeRequest(track=track.id, idea_code=idea, custom_track=track, n_seeds=2, seed_secret=secret,
                               job_key=job_key))
        assert "built with" in info.value.message, info.value.message
        seen = {int(s) for s in info.value.message.split("built with ", 1)[1].split()[:1]}
        assert seen == {run_seeds(sweep_seeds(1)[0], secret, track=track.id).init} and not seen & pool


# Hostile (red team, issue 25): tiny_quadratic whose baseline builds a sound MLP for validation and,
# in a job, a dead one: every first-layer bias -100, the output bias 2.0 (constants the redraw
# keeps, equal in every seed, so every decoy rebuilt bit for bit). With ten epochs and three lrs its
# best lr is interior: an exact copy of the validated baseline got helps, confirmed 8/8. It told a
# job by the number of seeds its capture built; a job builds one now (``Job.pins_baseline``), as
# validation does, so it tells a job by its working directory (validation's is ``*-validate-*``).
TWO_FACED_BASELINE = (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text().replace(
    '"name": "tiny_quadratic"', '"name": "two_faced_baseline"').replace(
    '"epochs": 4, "batch_size": 64, "lr_grid": [0.01, 0.03]', '"epochs": 10, "batch_size": 64, "lr_grid": [0.01, 0.03, 0.1]').replace(
    "def build_baseline(spec):\n    return nn.Sequential(nn.Linear(spec[\"n_features\"], 16), nn.ReLU(), nn.Linear(16, 1))",
    "def _in_a_job():\n    import os\n    return '-validate-' not in os.getcwd()\n\n\ndef build_baseline(spec):\n"
    "    model = nn.Sequential(nn.Linear(spec[\"n_features\"], 16), nn.ReLU(), nn.Linear(16, 1))\n"
    "    if _in_a_job():\n        import torch\n        with torch.no_grad():\n"
    "            model[0].bias.fill_(-100.0)\n            model[2].bias.fill_(2.0)\n    return model")


def test_a_baseline_sound_for_validation_and_dead_in_jobs_gives_no_win(cache: Path) -> None:
    """Red team (issue 25): a custom track's baseline built a sound model for validation and, in a
    job, a dead one (constants the redraw keeps; the decoys rebuild bit for bit); an exact copy of
    the validated baseline got helps, confirmed 8/8. The job now checks the baseline against the
    bench's reference fits on each of its test seeds: no win, the track marked weak (counted nowhere)."""
    from bench.judge import JudgeRequest, judge
    from bench.seeding import public_secret

    track = CustomTrack.from_source(TWO_FACED_BASELINE)
    copy = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    report = judge(JudgeRequest(track=track.id, idea_code=copy, custom_track=track, n_seeds=8,
                                seed_secret=public_secret(), job_key="two_faced")).model_dump(mode="json")
    br = report["bench_report"]
    assert br["comparison"]["idea_wins"] == 8  # the attack works: the copy beats the dead baseline on every seed
    assert (report["practical_verdict"], report["practical_detail"]) == ("inconclusive", "weak_baseline"), report
    assert br["custom_track"]["weak_baseline"] is True
    # never validated: its build was checked against nothing, so the report counts nowhere either
    assert br["custom_track"]["build_checked"] is False and any("unchecked build" in w for w in br["warnings"])
    fits = br["custom_track"]["reference_fits"]
    assert fits["not_beaten"] == fits["seeds"] >= 8


def _validated(track: CustomTrack, secret: object, *, stored: bool = False) -> CustomTrack:
    """``track`` as validation left it (``stored``: with the build it keeps, as a registered
    track has since session 22; without, as a track validated before)."""
    result = validate(track, timeout_s=600, secret=secret)  # type: ignore[arg-type]
    return replace(track, sizes=result["sizes"], checksums=result["checksums"],
                   baseline_graph_sha256=result["baseline_graph_sha256"],
                   baseline_seed_sha256=result["baseline_seed_sha256"], validated_epoch=result["seed_epoch"],
                   baseline_build=result["baseline_build"] if stored else None,
                   baseline_build_version=result["baseline_build_version"] if stored else None)


def test_a_job_must_build_the_tensors_validation_built_at_its_seed(cache: Path) -> None:
    """The two-faced baseline above, validated: in the validation's seed epoch a job's build at
    sweep seed 0 (the seed both build with its init seed) must be validation's, bit for bit, so
    it ends ``inconsistent_build`` before any training; an honest validated track judges as before."""
    from bench.judge import JudgeRequest, judge
    from bench.seeding import public_secret

    secret = public_secret()
    copy = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    two_faced = _validated(CustomTrack.from_source(TWO_FACED_BASELINE), secret)
    assert two_faced.baseline_seed_sha256 and two_faced.validated_epoch == secret.epoch
    with pytest.raises(BenchError) as info:
        judge(JudgeRequest(track=two_faced.id, idea_code=copy, custom_track=two_faced, n_seeds=2, seed_secret=secret))
    assert info.value.code == ErrorCode.INCONSISTENT_BUILD and "validation" in info.value.message
    honest = _validated(CustomTrack.from_source(
        (Path(__file__).resolve().parents[1] / "data" / "tracks" / "tiny_quadratic.py").read_text()), secret)
    report = judge(JudgeRequest(track=honest.id, idea_code=copy, custom_track=honest, n_seeds=2, seed_secret=secret))
    assert report.bench_report.custom_track is not None and report.bench_report.comparison.n_pairs == 2


def test_a_stored_build_is_every_jobs_baseline_and_no_job_builds_one(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 22: validation keeps the baseline's checked build with the track, and a job trains
    that build; no child of the job loads or builds the track's baseline. The two-faced baseline
    above (sound when validated, dead in a job) then shows its job face nowhere: the job trains the
    sound build (it beats the bench's reference fits on every seed; the dead one beat them on
    none), the exact copy gets no helps, and no ``inconsistent_build`` is needed. After a seed
    rotation the build is still validation's, but the job's data is checked against nothing
    (red team of the stored build: a ``make_splits`` that turns after a rotation), so that
    report does not count (``build_checked`` false). A build kept by other capture code is not
    used: the track's code builds at validation's seed, as before."""
    import io
    import zipfile

    import numpy as np

    from bench import judge as judge_mod
    from bench.captured import import_stored
    from bench.judge import JudgeRequest, judge
    from bench.seeding import SeedSecret, public_secret

    secret = public_secret()
    copy = "from torch import nn\n\ndef build_model(spec):\n    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    two_faced = _validated(CustomTrack.from_source(TWO_FACED_BASELINE), secret, stored=True)
    assert two_faced.baseline_build and "baseline_build=" not in repr(two_faced)
    rotated = SeedSecret(key=bytes(32), epoch=secret.epoch + 1)
    for epoch_secret in (secret, rotated):
        started = count_launches(monkeypatch)
        report = judge(JudgeRequest(track=two_faced.id, idea_code=copy, custom_track=two_faced, n_seeds=4,
                                    seed_secret=epoch_secret, job_key=f"stored_{epoch_secret.epoch}")).model_dump(mode="json")
        br = report["bench_report"]
        assert not any(name.startswith("capture_baseline") for name in started), started  # no child built it
        assert br["custom_track"]["build_checked"] is (epoch_secret is secret), br["warnings"]
        assert br["custom_track"]["reference_fits"]["not_beaten"] == 0  # the sound build, not the dead one
        assert report["practical_verdict"] != "helps", report["summary"]
    assert any("unchecked build" in w for w in br["warnings"])
    stale = replace(two_faced, baseline_build_version="0" * 64)
    assert judge_mod.stored_build(JudgeRequest(track=stale.id, idea_code=copy, custom_track=stale)) is None
    assert judge_mod.stored_build(JudgeRequest(track=stale.id, idea_code=copy, custom_track=two_faced)) is not None
    # the parent checks a stored build again, as a child's capture: the names it wrote and nothing else
    def rezip(build: bytes, rename: dict[str, str]) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(build)) as src, zipfile.ZipFile(out, "w") as dst:
            for name in src.namelist():
                dst.writestr(rename.get(name, name), src.read(name))
        return out.getvalue()

    build = two_faced.baseline_build
    assert build is not None
    names = zipfile.ZipFile(io.BytesIO(build)).namelist()
    for damaged in (build[: len(build) // 2], rezip(build, {names[-1]: "../x.npy"}),
                    rezip(build, {names[0]: names[0] + "x"}), build + b"\0" * (64 << 20)):
        with pytest.raises(BenchError) as info:
            import_stored(damaged, "baseline", cache / f"staging{len(damaged)}", cache / f"dest{len(damaged)}")
        assert info.value.code == ErrorCode.INTERNAL and "stored build" in info.value.message
    again = import_stored(build, "baseline", cache / "staging", cache / "dest")
    assert again.seed_sha256[0][0] == two_faced.baseline_seed_sha256
    assert again.graph_sha256[0] == two_faced.baseline_graph_sha256
    assert np.load(cache / "dest" / names[-1]).dtype == np.float32
