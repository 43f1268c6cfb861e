"""Faster forms of ops the trusted trainer runs on a vectorized group's batched tensors.

Under ``torch.func.vmap`` each op of a captured graph runs through PyTorch's batching rule on the
group's physical tensor, whose leading dimension is the runs. For vision's CNN those rules are
slow on a CPU: a 2-D max-pool calls the contiguous (NCHW) kernel on a (runs x rows, C, H, W)
tensor, 3.0 ms for vision's first pool at 16 runs of 64 where the channels-last kernel takes
0.6 ms; a convolution whose input and weight are both batched moves the runs into the channels
and calls a grouped convolution in NCHW memory (docs/performance.md, "Session 30"); and vmap
cannot ask for a memory format. Here both run on the *grouped* layout: a batched 4-D activation
as one (rows, runs x channels, H, W) tensor in channels-last memory, each run's channels a group
of their own. ``conv2d`` makes one grouped convolution of the runs (``groups`` times the runs)
and returns its output in that layout, so the ReLU and the pool after it, and the next
convolution, read it without a copy; ``max_pool2d_with_indices`` pools that tensor (a pool is per
channel, so per run). ``conv1d`` is the same grouped convolution with a height of one, its output
left in that layout too, and ``pad``'s circular form (dynamics' circular CNN pads between its
convolutions) writes its output in the same memory order. The pool's and the pad's values (and
the pool's indices) are the aten op's bit for bit (ties included); the convolution and every
gradient equal the aten ops' to float rounding (another kernel, another order of summation):
``tests/bench/test_batched_ops.py``. ``gru`` and ``lstm`` run aten's GRU and LSTM, which have no
batching rule at all, as batched matrix products and element-wise ops on the runs' physical
tensors, so a model with one trains under the plain vmap level too. Both arms run the same path, so a job compares like
with like, and a run is still bit for bit the same when rerun.

Written here because no library has it: PyTorch's batching rules are its own, and a
``torch.library`` custom op with a vmap rule cannot take part in ``vmap(grad(...))`` (the
trainer's path for composite ops no form here batches, such as a bidirectional GRU). Only tensors batched by one plain vmap level
(the trainer's training step, whose autograd runs outside vmap on the physical tensors) take the
fast path; any other call (one model at a time, the evaluation's forward under ``vjp``, a 3-D
input, a weight the runs share) is the aten op itself. It uses functorch's private wrappers
(``torch._C._functorch``); torch is pinned (pyproject.toml), and the tests fail if a new torch
changes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch._C import _functorch

_POOL = torch.ops.aten.max_pool2d_with_indices.default
_CONV = torch.ops.aten.conv2d.default
_CONV1D = torch.ops.aten.conv1d.default


def _plain_batched(x: torch.Tensor) -> bool:
    """``x`` is batched by one vmap level over a plain CPU tensor (no grad transform, no nesting;
    the CUDA kernels' memory formats and ties are untested here, a review: a GPU worker runs aten)."""
    if not _functorch.is_batchedtensor(x):
        return False
    inner = _functorch.get_unwrapped(x)
    return inner.device.type == "cpu" and not (
        _functorch.is_batchedtensor(inner) or _functorch.is_functorch_wrapped_tensor(inner))


def _grouped(x: torch.Tensor) -> torch.Tensor:
    """A batched 4-D activation as one (rows, runs x channels, H, W) channels-last tensor: each
    run's channels a group of its own (a view where the runs already sit beside the channels)."""
    physical = _functorch.get_unwrapped(x)
    runs_dim = _functorch.maybe_get_bdim(x)
    if runs_dim != 1:
        physical = physical.movedim(runs_dim, 1)
    rows, runs, channels = physical.shape[:3]
    return physical.reshape(rows, runs * channels, *physical.shape[3:]).contiguous(memory_format=torch.channels_last)


def _ungrouped(y: torch.Tensor, runs: int, level: int) -> torch.Tensor:
    """(rows, runs x channels, H, W) back to a batched tensor of the runs (a view)."""
    # the channels counted, not ``-1``: a view of no rows has no size to infer (a review: an empty
    # evaluation chunk raised where aten gives an empty result)
    return _functorch._add_batch_dim(y.view(y.shape[0], runs, y.shape[1] // runs, *y.shape[2:]), 1, level)


def _runs(x: torch.Tensor) -> int:
    return int(_functorch.get_unwrapped(x).shape[_functorch.maybe_get_bdim(x)])


def max_pool2d_with_indices(self: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten.max_pool2d_with_indices(self, *args, **kwargs)`` (aten's names: a node may pass any
    argument by keyword), its batched 4-D form through the channels-last kernel on the runs'
    channels side by side (the module's docstring)."""
    if self.dim() != 4 or not _plain_batched(self):
        out: tuple[torch.Tensor, torch.Tensor] = _POOL(self, *args, **kwargs)
        return out
    level, runs = _functorch.maybe_get_level(self), _runs(self)
    values, indices = _POOL(_grouped(self), *args, **kwargs)
    return _ungrouped(values, runs, level), _ungrouped(indices, runs, level)


def _convolvable(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dims: int) -> bool:  # noqa: A002
    """A convolution the grouped form computes as aten would: an input and a weight of ``dims``
    dimensions, a bias of one (another rank is aten's to refuse: a review found a (2, 4) bias
    flattened), all batched by the same one plain vmap level."""
    parts = [input, weight] + ([] if bias is None else [bias])
    return (input.dim() == dims and weight.dim() == dims and (bias is None or bias.dim() == 1)
            and all(_plain_batched(t) for t in parts) and len({_functorch.maybe_get_level(t) for t in parts}) == 1)


def _grouped_conv(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,  # noqa: A002
                  stride: Any, padding: Any, dilation: Any, groups: int) -> torch.Tensor:
    """The runs' 2-D convolutions as one grouped convolution in channels-last memory (all batched)."""
    level, runs = _functorch.maybe_get_level(input), _runs(input)
    w = _functorch.get_unwrapped(weight).movedim(_functorch.maybe_get_bdim(weight), 0)
    # the rows counted, not ``-1``: a weight over no input channels has no size to infer (a review)
    w = w.reshape(w.shape[0] * w.shape[1], *w.shape[2:]).contiguous(memory_format=torch.channels_last)
    b = None if bias is None else _functorch.get_unwrapped(bias).movedim(_functorch.maybe_get_bdim(bias), 0).reshape(-1)
    return _ungrouped(_CONV(_grouped(input), w, b, stride, padding, dilation, groups * runs), runs, level)


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,  # noqa: A002 - aten's name
           stride: Any = (1, 1), padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1) -> torch.Tensor:
    """``aten.conv2d``; where the input, the weight and the bias are all batched (a vectorized
    group's runs, each its own weight), one grouped convolution over the runs' channels side by
    side, in channels-last memory (the module's docstring)."""
    if not _convolvable(input, weight, bias, 4):
        out: torch.Tensor = _CONV(input, weight, bias, stride, padding, dilation, groups)
        return out
    return _grouped_conv(input, weight, bias, stride, padding, dilation, groups)


def _one(value: Any) -> int | None:
    """A 1-D convolution's stride, padding or dilation as aten's schema has it (``[n]``) as an
    int; None for any other form (the aten op then judges it: nothing passes here that aten refuses)."""
    if isinstance(value, list | tuple) and len(value) == 1 and type(value[0]) is int:
        return value[0]
    return None


def conv1d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,  # noqa: A002 - aten's name
           stride: Any = (1,), padding: Any = (0,), dilation: Any = (1,), groups: int = 1) -> torch.Tensor:
    """``aten.conv1d``; all batched: the 2-D grouped convolution of the runs with a height of one
    (channels-last memory has no 1-D form)."""
    steps = [_one(stride), _one(padding), _one(dilation)]
    if None in steps or not _convolvable(input, weight, bias, 3):
        out: torch.Tensor = _CONV1D(input, weight, bias, stride, padding, dilation, groups)
        return out
    y = _grouped_conv(input.unsqueeze(-2), weight.unsqueeze(-2), bias, [1, steps[0]], [0, steps[1]], [1, steps[2]], groups)
    # left in the grouped layout: element-wise ops read it as fast as the runs-first one, the next
    # convolution and ``pad``'s circular form take it without a copy; putting it back runs-first
    # (session 30) and out again was a third of dynamics' circular CNN's step
    return y.squeeze(-2)


_PAD = torch.ops.aten.pad.default


def pad(self: torch.Tensor, pad: Any, mode: Any = "constant", value: Any = None) -> torch.Tensor:
    """``aten.pad``; a circular pad of a batched 3-D (rows, channels, length) tensor's last
    dimension is the concatenation of its wrapped ends, written in the grouped layout's memory
    order (rows, length, runs, channels): the 1-D convolution after it reads that without a copy.
    Bit for bit aten's values (a pad copies). Any other pad (another mode, more dimensions, a
    negative pad, one that wraps more than once) is the aten op's, which judges it; under vmap
    aten decomposes a circular pad into slices copied one by one (3.6 ms against 2.0 for
    dynamics' example, forward and backward)."""
    if (mode != "circular" or value is not None or self.dim() != 3 or not _plain_batched(self)
            or not isinstance(pad, list | tuple) or len(pad) != 2 or any(type(p) is not int for p in pad)
            or not all(0 <= p <= self.shape[-1] for p in pad)):
        out: torch.Tensor = _PAD(self, pad, mode, value)
        return out
    level, length = _functorch.maybe_get_level(self), self.shape[-1]
    physical = _functorch.get_unwrapped(self).movedim(_functorch.maybe_get_bdim(self), 0)  # (runs, rows, C, L)
    ordered = physical.permute(1, 3, 0, 2)  # (rows, L, runs, C): the grouped layout's memory order
    padded = torch.cat([ordered[:, length - pad[0]:], ordered, ordered[:, :pad[1]]], 1).contiguous()
    return _functorch._add_batch_dim(padded.permute(2, 0, 3, 1), 0, level)


def max_pool2d(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``aten.max_pool2d``: the values of ``max_pool2d_with_indices``."""
    if self.dim() != 4 or not _plain_batched(self):
        out: torch.Tensor = torch.ops.aten.max_pool2d.default(self, *args, **kwargs)
        return out
    return max_pool2d_with_indices(self, *args, **kwargs)[0]


_GRU = torch.ops.aten.gru.input
_LSTM = torch.ops.aten.lstm.input


def _rnn_shapes(input: torch.Tensor, states: list[torch.Tensor], params: Any, has_biases: Any,  # noqa: A002
                num_layers: Any, batch_first: Any, gates: int) -> bool:
    """``params`` is what aten's GRU (``gates`` 3) or LSTM (4, no projection) takes for
    ``num_layers`` one-directional layers over this input and these states: per layer
    ``w_ih (gates x H, in)``, ``w_hh (gates x H, H)`` and, with biases, ``b_ih``,
    ``b_hh (gates x H)``, one floating dtype; each state ``(num_layers, batch, H)``; at least one
    time step. Anything else is aten's to judge."""
    if type(has_biases) is not bool or type(num_layers) is not int or type(batch_first) is not bool:
        return False
    per_layer = 4 if has_biases else 2
    if num_layers < 1 or not isinstance(params, list | tuple) or len(params) != per_layer * num_layers:
        return False
    if input.dim() != 3 or not input.dtype.is_floating_point or any(s.dim() != 3 for s in states):
        return False
    if input.shape[1 if batch_first else 0] == 0:  # no time steps: aten's error
        return False
    hidden = states[0].shape[2]
    if any(tuple(s.shape) != (num_layers, input.shape[0 if batch_first else 1], hidden) for s in states):
        return False
    width = input.shape[2]
    for layer in range(num_layers):
        w_ih, w_hh, *biases = params[layer * per_layer:(layer + 1) * per_layer]
        if tuple(w_ih.shape) != (gates * hidden, width) or tuple(w_hh.shape) != (gates * hidden, hidden):
            return False
        if any(tuple(b.shape) != (gates * hidden,) for b in biases):
            return False
        width = hidden
    return all(t.dtype == input.dtype for t in (*states, *params))


def _rnn_batched(input: Any, states: Any, params: Any, has_biases: Any, num_layers: Any,  # noqa: A002
                 dropout: Any, train: Any, bidirectional: Any, batch_first: Any, gates: int) -> bool:
    """The batched form computes this call as aten would: the input and every weight batched by
    one plain vmap level, each state batched by it too or a plain tensor (one state every run
    starts from), one-directional layers, no dropout between them, and aten's shapes."""
    if not isinstance(params, list | tuple) or not isinstance(states, list | tuple) or not states:
        return False
    if not all(isinstance(t, torch.Tensor) for t in (input, *states, *params)):
        return False
    batched = [input, *params]
    for state in states:
        if _functorch.is_batchedtensor(state):
            batched.append(state)
        elif _functorch.is_functorch_wrapped_tensor(state):
            return False
    if not all(_plain_batched(t) for t in batched):
        return False
    if len({_functorch.maybe_get_level(t) for t in batched}) != 1:
        return False
    if bidirectional is not False or type(train) is not bool or type(dropout) not in (int, float):
        return False
    if train and dropout != 0 and num_layers != 1:
        return False
    return _rnn_shapes(input, list(states), params, has_biases, num_layers, batch_first, gates)


def _physical(t: torch.Tensor, runs: int) -> torch.Tensor:
    """A batched tensor's physical tensor with the runs first; an unbatched one expanded to them."""
    if not _functorch.is_batchedtensor(t):
        return t.expand(runs, *t.shape)
    return _functorch.get_unwrapped(t).movedim(_functorch.maybe_get_bdim(t), 0)


# (the step's input gates, the states, w_hh transposed, b_hh or None, H) -> the new states, h first
Cell = Callable[[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor, torch.Tensor | None, int], tuple[torch.Tensor, ...]]


def _gru_cell(step_in: torch.Tensor, states: tuple[torch.Tensor, ...], w_hh_t: torch.Tensor,
              b_hh: torch.Tensor | None, hidden: int) -> tuple[torch.Tensor, ...]:
    """``torch.nn.GRU``'s step: ``r, z = sigmoid(i_rz + h_rz)``, ``n = tanh(i_n + r * h_n)``,
    ``h = n + z * (h - n)``."""
    (h,) = states
    gates_h = torch.baddbmm(b_hh.unsqueeze(1), h, w_hh_t) if b_hh is not None else torch.bmm(h, w_hh_t)
    i_rz, i_n = step_in.split_with_sizes([2 * hidden, hidden], -1)
    h_rz, h_n = gates_h.split_with_sizes([2 * hidden, hidden], -1)
    r, z = torch.sigmoid(i_rz + h_rz).split_with_sizes([hidden, hidden], -1)
    n = torch.tanh(torch.addcmul(i_n, r, h_n))
    return (torch.lerp(n, h, z),)


def _lstm_cell(step_in: torch.Tensor, states: tuple[torch.Tensor, ...], w_hh_t: torch.Tensor,
               b_hh: torch.Tensor | None, hidden: int) -> tuple[torch.Tensor, ...]:
    """``torch.nn.LSTM``'s step (``b_hh`` already in ``step_in``): ``i, f, o`` the sigmoids and
    ``g`` the tanh of the gates, ``c = f * c + i * g``, ``h = o * tanh(c)``."""
    h, c = states
    i_f, g, o = torch.baddbmm(step_in, h, w_hh_t).split_with_sizes([2 * hidden, hidden, hidden], -1)
    i, f = torch.sigmoid(i_f).split_with_sizes([hidden, hidden], -1)
    c = torch.addcmul(f * c, i, torch.tanh(g))
    return torch.sigmoid(o) * torch.tanh(c), c


def _recurrent(input: torch.Tensor, states: list[torch.Tensor], params: Any, has_biases: bool,  # noqa: A002
               num_layers: int, batch_first: bool, gates: int, cell: Cell,
               fold_hh_bias: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The runs' recurrent layers on the physical tensors (``_rnn_batched`` holds): the output
    sequence and each state's final values per layer, batched again. Per layer the input's gates
    for every step are one product; the steps are taken with ``unbind`` and the gates with
    ``split``, whose gradients are one stack or concatenation (slicing them one by one made
    autograd write a zero tensor of the whole sequence per slice: half the step in a profile).
    ``fold_hh_bias``: ``b_hh`` is added to the input's gates once, not at every step."""
    level, runs = _functorch.maybe_get_level(input), _runs(input)
    per_layer = 4 if has_biases else 2
    time_dim = 2 if batch_first else 1  # of the physical tensors: (runs, batch, time, ...) or (runs, time, batch, ...)
    x = _physical(input, runs)
    initial = [_physical(s, runs) for s in states]
    finals: list[list[torch.Tensor]] = [[] for _ in states]
    for layer in range(num_layers):
        w_ih, w_hh, *biases = (_physical(t, runs) for t in params[layer * per_layer:(layer + 1) * per_layer])
        hidden = w_hh.shape[-1]
        flat = x.reshape(runs, x.shape[1] * x.shape[2], x.shape[3])  # rows counted: none may be empty
        b_ih, b_hh = biases if biases else (None, None)
        if fold_hh_bias and b_ih is not None and b_hh is not None:
            b_ih, b_hh = b_ih + b_hh, None
        gates_in = (torch.baddbmm(b_ih.unsqueeze(1), flat, w_ih.transpose(1, 2)) if b_ih is not None
                    else torch.bmm(flat, w_ih.transpose(1, 2))).view(*x.shape[:-1], gates * hidden)
        w_hh_t = w_hh.transpose(1, 2)
        state = tuple(s[:, layer] for s in initial)
        outputs = []
        for step_in in gates_in.unbind(time_dim):
            state = cell(step_in, state, w_hh_t, b_hh, hidden)
            outputs.append(state[0])
        x = torch.stack(outputs, time_dim)
        for kept, value in zip(finals, state, strict=True):
            kept.append(value)
    return (_functorch._add_batch_dim(x, 0, level),
            [_functorch._add_batch_dim(torch.stack(kept, 1), 0, level) for kept in finals])


def gru(input: torch.Tensor, hx: torch.Tensor, params: Any, has_biases: Any, num_layers: Any,  # noqa: A002
        dropout: Any, train: Any, bidirectional: Any, batch_first: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten.gru.input``; where the input and every weight are batched by one plain vmap level
    (the state may be batched or shared), the runs' GRUs as batched matrix products and
    element-wise ops on the physical tensors (``_recurrent``), so plain autograd differentiates
    them. aten's GRU has no batching rule, so a model with one trained only under
    ``vmap(grad(...))``, which decomposes it into per-step ops each batched on its own: a
    training step of 16 runs of dynamics' baseline took 13.0-14.1 ms, 8.4-8.9 ms with this
    (docs/performance.md, "Session 31"). One-directional layers without dropout between them
    only; any other call is the aten op's, which under a plain vmap level refuses it (the
    trainer then steps under ``vmap(grad(...))`` as before)."""
    states = [hx] if isinstance(hx, torch.Tensor) else []
    if not _rnn_batched(input, states, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, 3):
        out: tuple[torch.Tensor, torch.Tensor] = _GRU(
            input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return out
    output, (h,) = _recurrent(input, states, params, has_biases, num_layers, batch_first, 3, _gru_cell, False)
    return output, h


def _lstm_refused(input: Any, hx: Any, params: Any, has_biases: Any, num_layers: Any,  # noqa: A002
                  bidirectional: Any, batch_first: Any) -> str | None:
    """Why aten's LSTM must not run this call, or None. On a CPU aten runs a float32 LSTM through
    oneDNN, which trusts the states' shapes: a graph's learned c of one row (h expanded to the
    batch; export checks no state's rows) made it read and write the heap past c, a segfault or
    NaN read from memory, in the trusted trainer (a review, session 31). So every call is
    checked as ``nn.LSTM.check_forward_args`` would, and more (deny by default): ``[h, c]``;
    a (rows, time, width) or (time, rows, width) input; per layer and direction ``w_ih
    (4H, width)``, ``w_hh (4H, P)``, with biases ``b_ih``, ``b_hh (4H)``, with a projection
    ``w_hr (P, H)``; ``h (layers x directions, rows, P)``, ``c (... , H)``, ``P`` H without a
    projection; a hidden size of at least 1 (oneDNN refuses 0 in float32, answers in float64);
    one dtype and device."""
    if not (isinstance(hx, list | tuple) and len(hx) == 2 and isinstance(params, list | tuple)
            and all(isinstance(t, torch.Tensor) for t in (input, *hx, *params))):
        return "an LSTM takes a tensor input, a state [h, c] and a list of weight tensors"
    if (type(has_biases) is not bool or type(num_layers) is not int or num_layers < 1
            or type(bidirectional) is not bool or type(batch_first) is not bool):
        return "an LSTM's flags and layer count are not aten's types"
    if input.dim() != 3:
        return "an LSTM's input must be (batch, time, features) or (time, batch, features)"
    directions = 2 if bidirectional else 1
    cells = num_layers * directions
    base = 4 if has_biases else 2
    if len(params) not in (cells * base, cells * (base + 1)) or params[1].dim() != 2 or params[1].shape[0] % 4:
        return "an LSTM's weights are not one set per layer and direction"
    per = len(params) // cells
    hidden = params[1].shape[0] // 4
    out = params[per - 1].shape[0] if per > base and params[per - 1].dim() == 2 else hidden
    if hidden < 1 or out < 1:
        return "an LSTM's hidden size must be at least 1"
    width = input.shape[2]
    for layer in range(num_layers):
        for direction in range(directions):
            group = params[(layer * directions + direction) * per:(layer * directions + direction + 1) * per]
            shapes = [(4 * hidden, width), (4 * hidden, out)] + [(4 * hidden,)] * (base - 2)
            shapes += [(out, hidden)] if per > base else []
            if [tuple(t.shape) for t in group] != shapes:
                return "an LSTM's weights do not fit its input, hidden size and layers"
        width = out * directions
    rows = input.shape[0 if batch_first else 1]
    h, c = hx
    if tuple(h.shape) != (cells, rows, out) or tuple(c.shape) != (cells, rows, hidden):
        return (f"an LSTM's state must be h {(cells, rows, out)} and c {(cells, rows, hidden)} "
                f"(layers x directions, the input's rows, the sizes); got {tuple(h.shape)} and {tuple(c.shape)}")
    if len({(t.dtype, t.device) for t in (input, *hx, *params)}) != 1:
        return "an LSTM's input, state and weights must share one dtype and device"
    return None


def lstm(input: torch.Tensor, hx: Any, params: Any, has_biases: Any, num_layers: Any,  # noqa: A002
         dropout: Any, train: Any, bidirectional: Any, batch_first: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten.lstm.input``, as ``gru`` (no batching rule either): the state ``hx`` is ``[h, c]``,
    each batched or shared; layers without a projection (``proj_size``: another weight per layer,
    the aten op's). Every call, batched or not, is checked first (``_lstm_refused``): aten's own
    trusts the states' shapes."""
    refused = _lstm_refused(input, hx, params, has_biases, num_layers, bidirectional, batch_first)
    if refused is not None:
        raise RuntimeError(refused)
    states = list(hx)
    if not _rnn_batched(input, states, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, 4):
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = _LSTM(
            input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return out
    output, (h, c) = _recurrent(input, states, params, has_biases, num_layers, batch_first, 4, _lstm_cell, True)
    return output, h, c


def view_as_complex(self: torch.Tensor) -> torch.Tensor:
    """``aten.view_as_complex``, which needs each run's last dimension at stride 1: the grouped
    layout's outputs above (a convolution's, a pad's) are not, where aten's own are; a batched
    input is made contiguous first (a copy, under vmap with the runs first), as a review found
    a captured circular CNN with ``torch.view_as_complex`` after it refused."""
    if _plain_batched(self):
        self = self.contiguous()
    out: torch.Tensor = torch.ops.aten.view_as_complex.default(self)
    return out


def view_as(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``aten.view_as``: the values of ``reshape`` to ``other``'s shape, as ``bench.graph``
    runs ``view`` (a functional graph needs no aliasing, and the grouped layout cannot be
    viewed)."""
    out: torch.Tensor = torch.ops.aten.reshape.default(self, list(other.shape))
    return out


def sym_size(self: torch.Tensor, dim: int) -> int:
    """``aten.sym_size.int``: the size of ``self`` along ``dim``. The aten op has no batching rule
    under a plain vmap level, so a model written with ``x.view(x.size(0), -1)`` failed the
    training step's first try and trained under ``vmap(grad(...))``, where none of the faster
    forms above apply (a review); a tensor's ``size`` is the logical one under vmap."""
    return int(self.size(dim))


_SDPA = torch.ops.aten.scaled_dot_product_attention.default


def _safe_softmax(scores: torch.Tensor) -> torch.Tensor:
    """aten's ``_safe_softmax`` along the last dimension (a row of ``-inf`` only is all 0), as
    element-wise ops: aten's softmax kernel over rows of a few elements (attention over 8 tokens)
    costs about 18 ns an element on a CPU, five times these ops' (and its backward ten times)."""
    # A row of -inf only is shifted by 0, not by its top (-inf - -inf is NaN), and divided by at
    # least 1 (the top's own exp(0) makes any other row's sum 1 or more): 0 / 1, no NaN to mask.
    # A ``where`` over 0 / 0 sent back 0 times NaN, the query's and key's gradients NaN where
    # aten's ``_safe_softmax`` gives 0, for finite inputs whose scores overflow (red team).
    top = scores.amax(-1, keepdim=True).detach().nan_to_num(nan=math.nan, posinf=math.inf, neginf=0.0)
    e = (scores - top).exp()
    return e / e.sum(-1, keepdim=True).clamp_min(1.0)


def _scale_root(scale: Any, width: int) -> float | None:
    """The square root of the scale, which aten's math kernel multiplies each side by
    (``calculate_scale(...).sqrt()``): of 1 / sqrt(width) for None, of an int or a float (not a
    bool) that is a positive, finite double. None, and the call is aten's, for any other: a width
    of 0 (aten's scale is inf; Python's 1 / 0 raised ZeroDivisionError where aten answers), a
    scale of 0 or less, inf or NaN, an int past the doubles (Python's ``float`` raised
    OverflowError before aten judged it): red team."""
    if width < 1:
        return None
    if scale is None:
        return math.sqrt(1.0 / math.sqrt(width))
    if type(scale) not in (int, float):
        return None
    try:
        value = float(scale)
    except OverflowError:
        return None
    return math.sqrt(value) if 0.0 < value < math.inf else None


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """``aten.scaled_dot_product_attention``; where query, key and value are all batched by one
    plain vmap level, of one rank, float or double (and no mask, dropout, causal mask, grouped
    heads, scale but a positive finite one, key of no rows or query of no width), the math
    kernel's products on the runs' physical tensors (the runs a leading batch dimension of the
    matrix products) with its softmax as element-wise ops (``_safe_softmax``).
    Under vmap aten runs the math kernel through batching rules, its softmax on rows of the
    token count; the children run attention on the math kernel alone (``bench.vectorized``), so
    one model at a time is the same arithmetic up to float rounding. Any other call is aten's."""
    parts = (query, key, value)
    if not (all(isinstance(t, torch.Tensor) and _plain_batched(t) for t in parts)
            and len({_functorch.maybe_get_level(t) for t in parts}) == 1
            and query.dim() == key.dim() == value.dim() >= 2  # (the runs' products broadcast from the right)
            # float and double only (red team): aten's math kernel computes half and bfloat16 in
            # float and rounds the result; these products in half overflowed to NaN (scores of
            # 8e4) and in either were 14 of its units off
            and query.dtype == key.dtype == value.dtype and query.dtype in (torch.float32, torch.float64)
            and attn_mask is None and dropout_p == 0.0 and not is_causal and not enable_gqa and key.size(-2) > 0
            and (root := _scale_root(scale, query.size(-1))) is not None):
        out: torch.Tensor = _SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        return out
    level = _functorch.maybe_get_level(query)
    q, k, v = (_functorch.get_unwrapped(t).movedim(_functorch.maybe_get_bdim(t), 0) for t in parts)
    scores = torch.matmul(q * root, k.transpose(-2, -1) * root)
    return _functorch._add_batch_dim(torch.matmul(_safe_softmax(scores), v), 0, level)


# aten op -> its faster form, for the graph's interpreter (bench.graph.build_graph)
FASTER: dict[Any, Any] = {
    torch.ops.aten.sym_size.int: sym_size,
    torch.ops.aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
    torch.ops.aten.max_pool2d.default: max_pool2d,
    _CONV: conv2d,
    _CONV1D: conv1d,
    _GRU: gru,
    _LSTM: lstm,
    _PAD: pad,
    torch.ops.aten.view_as_complex.default: view_as_complex,
    torch.ops.aten.view_as.default: view_as,
    _SDPA: scaled_dot_product_attention,
}
