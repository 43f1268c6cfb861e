"""Seeds of the protocol, derived from a deployment secret (PROTOCOL.md section 2.5).

Protocol seeds are public indices (sweep ``0 .. n-1``, screening ``1000 + i`` from a pool of
``SCREEN_POOL``, confirmation ``2000 + i``); what they expand into is not. Each index expands, under the secret of the current *epoch*, into
independent 31-bit streams for the data split, the data order and the init, and each
synthetic track's task constants come from the same secret. Without the secret neither
the submitted code nor the agent can regenerate a split, so no file can answer the
validation or test rows from labels it computed itself.

Seeds are not hunted (PROTOCOL.md 2.5): each job draws its screening seeds from the pool
under the secret and its own key (``screening_seeds``), its capture builds every init in a
secret order (``capture_order``), and the confirmation's seeds are expanded under the key of
the captured models themselves (``model_key``), so an identical model resubmitted gets the
same confirmation and re-rolls nothing.

Pair i of the two arms shares all three streams; an arm with more parameters draws more
init numbers from its own generator and cannot shift the other's.

A report carries the epoch and a commitment to its secret (``SeedSecret.commitment``);
when the epoch is retired (``SecretStore.rotate``) its key may be published, and anyone
can check it against the commitment and rerun any run of that epoch bit for bit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.errors import BenchError, ErrorCode

SWEEP_SEED_BASE = 0
FINAL_SEED_BASE = 1000
CONFIRM_SEED_BASE = 2000  # confirmation seeds: expanded under the job's own key, never shared
SCHEME = "hmac-sha256/v1"
SECRET_FILE = "seed_secret.json"
_MASK = 0x7FFFFFFF
# Screening seeds are drawn per job from the epoch's pool ``FINAL_SEED_BASE + 0 .. SCREEN_POOL-1``:
# a job's 8 are a secret 8 of 64 (4.4e9 subsets), so what a probe learns of one job's seeds is
# of little use to the next, while the baseline cache, keyed by seed, still fills after a few
# dozen jobs (each pool member once per config).
SCREEN_POOL = 64


@dataclass(frozen=True)
class SeedSecret:
    """The key of one seed epoch: every split, order, init and task seed derives from it."""

    key: bytes
    epoch: int

    def derive(self, *labels: object) -> int:
        """A 31-bit seed: HMAC-SHA256 of the labels under the key (independent per label)."""
        message = json.dumps([SCHEME, self.epoch, *labels], separators=(",", ":")).encode()
        return int.from_bytes(hmac.new(self.key, message, hashlib.sha256).digest()[:4], "big") & _MASK

    @property
    def commitment(self) -> str:
        """sha256 over the scheme, the epoch and the key: binds a report to its seeds, reveals nothing."""
        return hashlib.sha256(f"{SCHEME}|{self.epoch}|".encode() + self.key).hexdigest()

    def report_block(self) -> dict[str, Any]:
        """The report's ``seed_commitment``: scheme, epoch and commitment (never the key)."""
        return {"scheme": SCHEME, "epoch": self.epoch, "commitment": self.commitment}


def public_secret(epoch: int = 0) -> SeedSecret:
    """A fixed, public secret for unit tests and benchmarks: never for judging submissions."""
    return SeedSecret(key=hashlib.sha256(b"ideabench public test secret").digest(), epoch=epoch)


@dataclass(frozen=True)
class RunSeeds:
    """The three independent 31-bit seeds of one protocol seed."""

    seed: int
    split: int
    order: int
    init: int


def sweep_seeds(n: int) -> list[int]:
    """Protocol seeds of the sweep: ``0 .. n-1``."""
    return [SWEEP_SEED_BASE + i for i in range(n)]


def final_seeds(n: int) -> list[int]:
    """The first ``n`` members of the screening pool, disjoint from every sweep seed: what a
    custom track is validated on at registration. A job screens on ``screening_seeds``."""
    return [FINAL_SEED_BASE + i for i in range(n)]


def screening_pool() -> list[int]:
    """Every protocol seed a job's screening may draw (``SCREEN_POOL`` of them)."""
    return final_seeds(SCREEN_POOL)


def _secret_rank(items: list[int], secret: SeedSecret, *labels: object) -> list[int]:
    """``items`` ordered by their HMAC under ``labels``: a permutation only the secret predicts."""
    return sorted(items, key=lambda item: (secret.derive(*labels, item), item))


def screening_seeds(n: int, secret: SeedSecret, job_key: str) -> list[int]:
    """The job's ``n`` screening seeds: a secret draw from the pool under its key (ascending)."""
    if not 0 < n <= SCREEN_POOL:
        raise ValueError(f"a job screens on 1 to {SCREEN_POOL} seeds, not {n}")
    return sorted(_secret_rank(screening_pool(), secret, "screen", job_key)[:n])


def capture_order(seeds: list[int], secret: SeedSecret, job_key: str) -> list[int]:
    """The order the capture child builds ``seeds`` in: a secret permutation per job, so a file
    that counts its builds cannot tell which protocol seed (sweep, screening) it is building."""
    return _secret_rank(list(seeds), secret, "capture-order", job_key)


def model_key(identity: object) -> str:
    """The key the confirmation's seeds are expanded under: 32 hex digits of sha256 over the
    captured models' identity (both arms' graphs and their tensors at the sweep seeds, the
    track and grids). Identical models get the same key, hence the same confirmation."""
    raw = json.dumps([SCHEME, identity], sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def confirmation_seeds(n: int) -> list[int]:
    """Protocol seeds of the confirmation stage (PROTOCOL.md 2.6): ``2000 + i``, expanded
    under the captured models' key (``model_key``, via ``run_seeds``), so no other model, sweep
    or screening shares them and an identical model resubmitted draws the same ones."""
    return [CONFIRM_SEED_BASE + i for i in range(n)]


def build_seed(secret: SeedSecret, init: int, *, bench: bool, shared: bool, track: str, job_key: str,
               seed: int) -> int:
    """The seed a file builds protocol seed ``seed``'s model with (torch's, numpy's and Python's
    seed in its capture child); the trusted trainer draws the parameters' values from ``init``
    whatever the file built (``bench.redraw``).

    ``init`` when the seed is ``shared`` (a sweep seed, part of the models' key; a confirmation
    seed: a resubmission re-rolls nothing) or when the file is the ``bench``'s own code (a
    built-in track's baseline, whose runs the baseline cache keeps by seed and graph across
    jobs). Every other file (an idea, a matched baseline, a custom track's baseline: its author's
    code) builds the screening's seeds with seeds of this job alone. The screening pool's init
    seeds are shared by every job of the epoch: a file that learnt them (written into an error's
    text or its own numbers) could tell the confirmation's decoys from its new seeds and
    sabotage only those, or compute offline the values every idea starts from."""
    if shared or bench:
        return init
    return secret.derive("build", track, job_key, seed)


def run_seeds(seed: int, secret: SeedSecret, job_key: str | None = None, *, track: str, repeat: int = 0) -> RunSeeds:
    """Expand one protocol seed of ``track`` (a built-in track's name, a custom track's
    ``name@version``) into split / order / init seeds under ``secret``. The track is in the
    labels (issue 25.8): what one track's data could reveal of its split seeds (a custom track
    whose author writes the seed into its data) says nothing of another track's.

    Sweep and pool seeds expand alike for every job of an epoch (the baseline cache stands
    on that); a confirmation seed (``>= CONFIRM_SEED_BASE``) is drawn for one model alone: its
    labels hold ``job_key`` (the models' ``model_key``), so its data, order and init are fresh
    to those models.

    ``repeat`` r > 0: the r-th repeat run of the seed (a card's ``defaults.repeats``): the same
    split, its own order and init seeds, drawn under the same labels and ``r``; repeat 0 is
    the seed's own run.
    """
    if seed >= CONFIRM_SEED_BASE:
        if not job_key:
            raise ValueError("a confirmation seed needs the models' key")
        labels: tuple[object, ...] = ("confirm", track, job_key, seed - CONFIRM_SEED_BASE)
    else:
        labels = ("run", track, seed)
    split, order, init = (secret.derive(*labels, stream) for stream in ("split", "order", "init"))
    if repeat:
        order, init = (secret.derive(*labels, stream, "repeat", repeat) for stream in ("order", "init"))
    return RunSeeds(seed=seed, split=split, order=order, init=init)


def task_seed(track_name: str, secret: SeedSecret) -> int:
    """The seed of a synthetic track's task constants (projections, dynamics) in this epoch."""
    return secret.derive("task", track_name)


class SecretStore:
    """The deployment's seed epochs in one file (mode 0600): ``{"current", "epochs"}``.

    Embedded mode generates it under the data directory on first use. A retired epoch's
    key may be revealed (``reveal``); the current one never is.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise BenchError(ErrorCode.INTERNAL, f"seed secret file {self.path} is unreadable: {exc}") from None
        return data

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, self.path)

    def _create(self, data: dict[str, Any]) -> dict[str, Any]:
        """Create the file holding ``data`` unless another process did first; returns what the
        file holds. The file appears whole or not at all: written under a name of this process's
        own, then linked into place (``link`` fails when the name exists, as ``O_EXCL`` does), so
        processes starting at once agree on one key and none reads a half-written file (a worker
        that did judged nothing: "unreadable: Expecting value")."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return self._read()
            return data
        finally:
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _new_epoch(number: int) -> dict[str, Any]:
        return {"key": secrets.token_hex(32), "created": datetime.now(UTC).isoformat(), "retired": None}

    def current(self) -> SeedSecret:
        """The current epoch's secret, generating epoch 1 when the file does not exist yet."""
        data = self._read()
        if not data:
            data = self._create({"current": 1, "epochs": {"1": self._new_epoch(1)}})
        epoch = int(data["current"])
        return SeedSecret(key=bytes.fromhex(data["epochs"][str(epoch)]["key"]), epoch=epoch)

    def rotate(self) -> SeedSecret:
        """Retire the current epoch and start the next; returns the new secret."""
        old = self.current()
        data = self._read()
        data["epochs"][str(old.epoch)]["retired"] = datetime.now(UTC).isoformat()
        data["current"] = old.epoch + 1
        data["epochs"][str(old.epoch + 1)] = self._new_epoch(old.epoch + 1)
        self._write(data)
        return self.current()

    def reveal(self, epoch: int) -> SeedSecret:
        """A retired epoch's secret; the current epoch (or an unknown one) is refused."""
        entry = self._read().get("epochs", {}).get(str(epoch))
        if entry is None or entry.get("retired") is None:
            state = "unknown" if entry is None else "still current"
            raise LookupError(f"seed epoch {epoch} is {state}; only a retired epoch's key is revealed.")
        return SeedSecret(key=bytes.fromhex(entry["key"]), epoch=epoch)


def parse_secret(configured: str, epoch: int) -> SeedSecret:
    """A deployment's configured secret (hex, at least 16 bytes; the setting ``seed_secret``,
    ``IDEABENCH_SEED_SECRET``) at ``epoch``."""
    try:
        key = bytes.fromhex(configured.strip())
    except ValueError:
        raise BenchError(ErrorCode.INTERNAL, "The seed secret (IDEABENCH_SEED_SECRET) must be a hex string.") from None
    if len(key) < 16:
        raise BenchError(ErrorCode.INTERNAL, "The seed secret (IDEABENCH_SEED_SECRET) must hold at least 16 bytes "
                         "(32 hex digits).")
    return SeedSecret(key=key, epoch=epoch)
