"""Draft trees in the reference engine (`generate(..., tree_paths=W, tree_at=R)`): a request's
step verifies the W-path tree of sam/draft_tree.py in one forward pass and keeps the longest
path the target's own samples follow.

- The chunk: the request's last known token (the root), then the tree's nodes, a parent
  before its children (`draft_tree.flatten`). Every node takes a cache slot in chunk order;
  its rotary position is the root's plus its depth, and it attends to the cached context and
  its ancestors only (`PagedAttentionMetadata.tree_visible`), so its logits are those of a
  plain forward over the context and its own path.
- The walk (`walk`): at the root the target samples a token as without speculation (the
  engine's sampler: temperature, top-k, top-p, the request's generator); where a child holds
  that token the walk moves to it and samples again from its row, else it stops. Every
  emitted token is a sample of the target given what precedes it, so the output distribution
  is the target's (for greedy decoding the same tokens). The chain verifier draws differently
  (rejection sampling against the one draft), so sampled outputs agree in distribution, not
  token by token.
- The cache (`keep_path`): the accepted nodes' keys and values move to the positions right
  after the root, the rest is cut off, as if the path alone had been verified.

Tested against the engine without trees, greedy and seeded-sampled outputs identical where the
true continuation is a later path (tests/bench/engines/test_reference_trees.py; the cache move in
tests/bench/engines/test_kv_cache.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Hashable, Sequence

import torch

from samspec_bench.errors import UserError
from samspec_bench.sam.draft_tree import depths, flatten, propose_paths


def tree_option(paths: int, at: int, drafter: Any, windows: Sequence[int | None]) -> tuple[int, int]:
    """(paths, at most running) of a generate call's draft trees, checked; (0, 0): none."""
    if not paths:
        return 0, 0
    if paths < 1 or at < 1 or drafter is None:
        raise UserError(f"tree_paths={paths}, tree_at={at}: trees need a drafter, >= 1 path and >= 1 request")
    if any(w is not None for w in windows):
        raise UserError("draft trees with sliding-window attention: not supported (the window counts cache slots, "
                        "a tree's nodes sit at other positions); drop tree_paths")
    return int(paths), int(at)


def visible(parents: Sequence[int]) -> torch.Tensor:
    """[n+1, n+1] bool over the chunk (root at 0, node i at i+1): True where token a sees b
    (b is a itself or one of its ancestors)."""
    n = len(parents)
    vis = torch.zeros((n + 1, n + 1), dtype=torch.bool)
    vis[:, 0] = True
    for i, p in enumerate(parents):
        vis[i + 1] = vis[p + 1] if p >= 0 else vis[0]
        vis[i + 1, i + 1] = True
    vis[0, 1:] = False
    return vis


def chunk_positions(start: int, parents: Sequence[int]) -> list[int]:
    """Rotary positions of the chunk: the root at `start`, each node at start + its depth."""
    return [start] + [start + d for d in depths(parents)]


def propose_tree(drafter: Any, req_id: Hashable, k: int, width: int, max_nodes: int) -> tuple[list[int], list[int]]:
    """(tokens, parents) of the request's tree of at most `width` paths of at most k tokens,
    paths dropped from the last while it holds more than `max_nodes` nodes (the step's token
    budget). The drafter's own draft comes first, so its state moves as without a tree."""
    if not hasattr(drafter, "evidence_sources"):
        raise UserError(f"tree drafts (paths={width}): the drafter {type(drafter).__name__} offers no candidates "
                        "besides its own draft; use the sam drafter")
    _, paths = propose_paths(drafter, req_id, k, width)
    tokens, parents = flatten(paths)
    while paths and len(tokens) > max_nodes:
        paths = paths[:-1] if len(paths) > 1 else [paths[0][:max_nodes]]
        tokens, parents = flatten(paths)
    return tokens, parents


def walk(entries: list[tuple[Any, torch.Tensor]], sample_rows) -> list[tuple[list[int], list[int]]]:
    """entries: (Scheduled with `tree_parents`, its chunk's logits [n+1, V]); sample_rows
    [(Scheduled, row [1, V])] -> one sampled token each (the engine's sampler without drafts).
    Returns per entry (emitted tokens, accepted node indices in path order)."""
    out: list[tuple[list[int], list[int]]] = [([], []) for _ in entries]
    children = []
    for sc, _ in entries:
        kids: dict[tuple[int, int], int] = {}
        for i, (t, p) in enumerate(zip(sc.drafts, sc.tree_parents)):
            kids[(p, int(t))] = i
        children.append(kids)
    at = {e: -1 for e in range(len(entries))}   # the node each live walk stands on (-1: the root)
    while at:
        live = list(at)
        rows = [(replace(entries[e][0], drafts=[]), entries[e][1][at[e] + 1: at[e] + 2]) for e in live]
        for e, tok in zip(live, sample_rows(rows)):
            out[e][0].append(int(tok))
            nxt = children[e].get((at[e], int(tok)))
            if nxt is None:
                del at[e]
            else:
                out[e][1].append(nxt)
                at[e] = nxt
    return out


def settle(entries: list[tuple[Any, torch.Tensor]], sample_tokens) -> list[tuple]:
    """The walk's outcome as the engine settles every request: (Scheduled, tokens, accepted
    drafts, the logits rows that predicted the tokens, accepted nodes). sample_tokens: the
    engine's sampler over [(Scheduled without drafts, row [1, V])] -> [[token]] per row."""
    walked = walk(entries, lambda rows: [t[0] for t in sample_tokens(rows)])
    return [(sc, toks, len(nodes), lg[[0] + [n + 1 for n in nodes]], nodes)
            for (sc, lg), (toks, nodes) in zip(entries, walked)]


def keep_path(cache: Any, seq_id: Hashable, start: int, nodes: Sequence[int]) -> None:
    """Move the accepted nodes' keys and values (chunk slots start + 1 + node) to positions
    start + 1, start + 2, ... (`PagedKVCache.move_positions`); the caller then truncates."""
    cache.move_positions(seq_id, [(start + 1 + node, start + 1 + m) for m, node in enumerate(nodes) if node != m])
