"""What an audited sampler returned, checked before anything is tested on it: a [B,
max_spec_len + 1] tensor of integer token ids, each -1 (an empty slot) or in the vocabulary.
Anything else breaks the contract, so the audit stops with an ERROR naming where (case, call)
and what was wrong, on one line: a wrong shape, a non-finite or non-integer value, an id
outside the vocabulary. (Converting NaN or 3.5 to int64 would otherwise pass as some token
and read as a statistical LOSSY finding, or as nothing at all.)"""

from __future__ import annotations

from typing import Any

import torch


class SamplerOutputError(ValueError):
    """The sampler returned something that is not the contract's token-id tensor."""


def _first(mask: torch.Tensor) -> tuple[int, int]:
    r, c = (int(i) for i in mask.nonzero()[0])
    return r, c


def checked_tokens(out: Any, rows: int, width: int, vocab: int, where: str) -> torch.Tensor:
    """`out` as a [rows, width] int64 tensor on the CPU; SamplerOutputError (one line starting
    with `where`) when it is not a tensor of valid token ids of that shape."""
    out = getattr(out, "token_ids", out)   # a SpecSampleOutput-like result
    try:
        t = torch.as_tensor(out).detach().to("cpu")
    except Exception as e:  # noqa: BLE001 - whatever the sampler returned, it is not token ids
        raise SamplerOutputError(f"{where}: returned a {type(out).__name__}, not a tensor of token ids "
                                 f"({type(e).__name__})") from None
    if tuple(t.shape) != (rows, width):
        raise SamplerOutputError(f"{where}: returned shape {tuple(t.shape)}, expected ({rows}, {width}) "
                                 "= [B, max_spec_len + 1]")
    if t.dtype == torch.bool or t.is_complex():
        raise SamplerOutputError(f"{where}: returned {t.dtype} values, not integer token ids")
    if t.is_floating_point():
        bad = ~torch.isfinite(t)
        if bad.any():
            r, c = _first(bad)
            raise SamplerOutputError(f"{where}: returned a non-finite value ({float(t[r, c])}) at row {r}, "
                                     f"position {c}; token ids are integers")
        frac = t != t.round()
        if frac.any():
            r, c = _first(frac)
            raise SamplerOutputError(f"{where}: returned {float(t[r, c])} at row {r}, position {c}; "
                                     "token ids are integers")
    bad = (t < -1) | (t >= vocab)   # before the cast: a float 1e30 would wrap around in int64
    if bad.any():
        r, c = _first(bad)
        raise SamplerOutputError(f"{where}: token id {t[r, c].item():g} at row {r}, position {c} is outside the "
                                 f"vocabulary [0, {vocab}) (-1 marks an empty slot)")
    return t.to(torch.int64)
