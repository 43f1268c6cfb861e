"""Batched training of many runs (bench.vectorized) against one run at a time (bench.trainer)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from bench.trainer import RunConfig, lr_factor, steps_per_run, train
from bench.vectorized import NotVectorizable, probe, train_group
from tests.conftest import use_cache

REL = 1e-5


pytestmark = pytest.mark.usefixtures("one_thread")  # as in the children (tests/conftest.py)


class TinyGRU(nn.Module):
    """The dynamics track's baseline shape: GRU over tokens, residual linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(6, 8, batch_first=True)
        self.head = nn.Linear(8, 6)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(u)
        return u[:, -1] + self.head(states[:, -1])


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))


def _classifier() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 12), nn.GELU(), nn.Linear(12, 3))


def _build(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    torch.manual_seed(seed)  # exactly what bench.trainer.build_checked does
    return factory()


def _datasets(kind: str, n_sets: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for _ in range(n_sets):
        if kind == "gru":
            x = torch.randn(160, 4, 6, generator=gen)
            y = x[:, -1] * 0.9 + 0.1 * torch.roll(x[:, -1], 1, dims=-1)
            out.append((x, y, torch.randn(48, 4, 6, generator=gen)))
        elif kind == "ce":
            x = torch.randn(160, 5, generator=gen)
            y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
            out.append((x, y, torch.randn(48, 5, generator=gen)))
        else:
            x = torch.randn(160, 5, generator=gen)
            y = torch.stack([torch.sin(x[:, 0]), x[:, 1] * x[:, 2]], dim=1)
            out.append((x, y, torch.randn(48, 5, generator=gen)))
    return out


CASES = {
    "mlp": (_mlp, "mse", 6),
    "ce": (_classifier, "cross_entropy", 6),
    "gru": (TinyGRU, "mse", 3),
}


@pytest.mark.parametrize(("case", "schedule"), [*((c, "constant") for c in sorted(CASES)), ("mlp", "cosine"),
                                                ("gru", "cosine")])
def test_vectorized_matches_one_at_a_time(case: str, schedule: str) -> None:
    factory, loss, epochs = CASES[case]
    datasets = _datasets(case, 2)
    lrs = [0.003, 0.01, 0.03, 0.003, 0.01, 0.03]
    data_index = [0, 0, 0, 1, 1, 1]
    init_seeds = [11, 12, 13, 21, 22, 23]
    order_seeds = [100 + i for i in data_index]
    configs = [RunConfig(lr=lr, epochs=epochs, batch_size=32, weight_decay=1e-4, loss=loss, schedule=schedule)
               for lr in lrs]
    one_by_one = [
        train(_build(factory, init_seeds[r]), configs[r], datasets[data_index[r]][0], datasets[data_index[r]][1],
              datasets[data_index[r]][2], order_seed=order_seeds[r])
        for r in range(len(lrs))
    ]
    models = [_build(factory, s) for s in init_seeds]
    batched = train_group(models, configs, datasets, data_index, order_seeds)
    torch.manual_seed(0)
    for r, (a, b) in enumerate(zip(one_by_one, batched, strict=True)):
        assert not a.diverged and not b.diverged
        scale = float(a.predictions.abs().max())
        assert float((a.predictions - b.predictions).abs().max()) <= REL * scale, r
        # the final metric (MSE against a fixed target) agrees to 1e-5 relative
        target = torch.zeros_like(a.predictions)
        ma, mb = float(((a.predictions - target) ** 2).mean()), float(((b.predictions - target) ** 2).mean())
        assert mb == pytest.approx(ma, rel=REL)
        # the trained weights were written back into each run's own module
        for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
            assert torch.allclose(pa, pb, rtol=1e-4, atol=1e-6)


def test_a_diverging_run_does_not_disturb_the_others() -> None:
    datasets = _datasets("mlp", 1)
    configs = [RunConfig(lr=lr, epochs=4, batch_size=32) for lr in (0.01, 1e12)]
    one_by_one = [
        train(_build(_mlp, 5), cfg, *datasets[0], order_seed=3) for cfg in configs
    ]
    batched = train_group([_build(_mlp, 5), _build(_mlp, 5)], configs, datasets, [0, 0], [3, 3])
    assert one_by_one[1].diverged and batched[1].diverged
    assert not batched[0].diverged
    assert torch.allclose(batched[0].predictions, one_by_one[0].predictions, rtol=REL, atol=1e-7)


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow
            return self.l(x)
        return -self.l(x)


UNBATCHABLE = {
    "batchnorm": lambda: nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)),
    "dropout": lambda: nn.Sequential(nn.Linear(5, 8), nn.Dropout(0.5), nn.Linear(8, 2)),
    "control_flow": Branchy,
}


@pytest.mark.parametrize("name", sorted(UNBATCHABLE))
def test_unbatchable_models_are_detected(name: str) -> None:
    x, y, _ = _datasets("mlp", 1)[0]
    models = [_build(UNBATCHABLE[name], s) for s in (0, 1)]
    assert probe(models, x, y, "mse") is not None


def test_batchnorm_group_refuses_to_train() -> None:
    datasets = _datasets("mlp", 1)
    models = [_build(UNBATCHABLE["batchnorm"], s) for s in (0, 1)]
    with pytest.raises(NotVectorizable):
        train_group(models, [RunConfig(lr=0.01, epochs=1, batch_size=32)] * 2, datasets, [0, 0], [1, 1])


@pytest.mark.parametrize("case", ["mlp", "gru"])
def test_batchable_models_pass_the_probe(case: str) -> None:
    factory, loss, _ = CASES[case]
    x, y, _ = _datasets(case, 1)[0]
    assert probe([_build(factory, s) for s in (0, 1)], x, y, loss) is None


def test_an_unbatchable_idea_puts_both_arms_on_the_sequential_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from bench.judge import JudgeRequest, judge

    use_cache(tmp_path)
    idea = (
        "from torch import nn\n"
        "def build_model(spec):\n"
        "    return nn.Sequential(nn.Linear(8, 28), nn.BatchNorm1d(28), nn.ReLU(), nn.Linear(28, 1))\n"
    )
    execution = judge(JudgeRequest(track="smoke", idea_code=idea, n_seeds=2)).model_dump(mode="json")["bench_report"]["execution"]
    assert execution["path"] == "sequential"
    assert "idea" in execution["sequential_reason"] and "running statistics" in execution["sequential_reason"]


def test_a_group_of_one_matches_too() -> None:
    datasets = _datasets("mlp", 1)
    cfg = RunConfig(lr=0.01, epochs=3, batch_size=32)
    alone = train(_build(_mlp, 9), cfg, *datasets[0], order_seed=4)
    (batched,) = train_group([_build(_mlp, 9)], [cfg], datasets, [0], [4])
    assert torch.allclose(batched.predictions, alone.predictions, rtol=REL, atol=1e-7)


def test_the_warm_up_command_succeeds() -> None:
    import sys

    from bench.child import warm

    assert warm({}) == {}  # it once failed on every call (a GRU with unbatched weights), unnoticed
    assert "torch._dynamo" in sys.modules
    assert warm({"export": True}) == {}  # a capture child's: one tiny export


def test_the_cosine_schedule_decays_the_rate_to_nothing_over_the_run() -> None:
    assert [lr_factor("constant", t, 10) for t in (0, 5, 9)] == [1.0, 1.0, 1.0]
    assert lr_factor("cosine", 0, 10) == 1.0
    assert lr_factor("cosine", 5, 10) == pytest.approx(0.5)
    assert 0.0 < lr_factor("cosine", 9, 10) < 0.03  # the last step still moves, a little
    factors = [lr_factor("cosine", t, 40) for t in range(40)]
    assert factors == sorted(factors, reverse=True)
    assert steps_per_run(RunConfig(lr=0.1, epochs=3, batch_size=32), 100) == 12  # 4 batches, the last short
    with pytest.raises(ValueError, match="schedule"):
        lr_factor("linear", 0, 10)


def test_a_group_never_mixes_schedules() -> None:
    datasets = _datasets("mlp", 1)
    configs = [RunConfig(lr=0.01, epochs=1, batch_size=32, schedule=s) for s in ("constant", "cosine")]
    with pytest.raises(NotVectorizable, match="schedule"):
        train_group([_build(_mlp, 1), _build(_mlp, 2)], configs, datasets, [0, 0], [1, 1])


def test_the_schedule_changes_what_a_run_learns() -> None:
    """The trainer really applies it: the same run under the two schedules ends elsewhere."""
    x, y, x_eval = _datasets("mlp", 1)[0]
    runs = [train(_build(_mlp, 5), RunConfig(lr=0.03, epochs=3, batch_size=32, schedule=s), x, y, x_eval,
                  order_seed=1) for s in ("constant", "cosine")]
    assert float((runs[0].predictions - runs[1].predictions).abs().max()) > 1e-3
