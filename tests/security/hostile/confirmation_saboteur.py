"""Hostile (red team, issue 25): a matched baseline, the idea's own MLP, that sabotages its
model (the output bias set to 4.0: every prediction off) only where it builds for the
confirmation, so that a lucky screening (a re-rolled null idea) is confirmed as a win.

It tells the confirmation's capture child by the number of builds it is asked for: 2 + N in
the first capture (the sweep's two seeds and the screening's N), 2N in a confirmation's (N
decoys and N new seeds; N = 7 in the test). ODD_ONLY: it sabotages only odd init seeds
there, as a file that cannot tell a decoy from a new seed must guess."""

import sys

import torch
from torch import nn

ODD_ONLY = False


def _in_the_confirmations_child():
    frame = sys._getframe()
    while frame is not None:
        seeds = getattr(frame.f_locals.get("self"), "init_seeds", None)
        if isinstance(seeds, list) and seeds:
            return len(seeds) % 2 == 0
        frame = frame.f_back
    return False


def build_model(spec):
    model = nn.Sequential(nn.Linear(spec["n_features"], 32), nn.ReLU(), nn.Linear(32, 1))
    if _in_the_confirmations_child() and (not ODD_ONLY or torch.initial_seed() % 2 == 1):
        with torch.no_grad():
            model[2].bias.fill_(4.0)
    return model
