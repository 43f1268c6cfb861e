"""Hostile: patch the engine in the process that runs this file. Train ten times the
track's epochs, report one parameter, and use twice the baseline's parameters. In the old
design the idea's own process trained and counted; now it only builds and is captured."""

from torch import nn

import bench.trainer as trainer

_train = trainer.train


def _longer(model, cfg, *args, **kwargs):
    cfg.epochs *= 10
    return _train(model, cfg, *args, **kwargs)


trainer.train = _longer
trainer.count_parameters = lambda model: 1


def build_model(spec):
    return nn.Sequential(nn.Linear(spec["input_shape"][0], 64), nn.ReLU(),
                         nn.Linear(64, spec["output_shape"][0]))
