"""Multi-path (tree) drafts: the drafter's own draft and other candidate continuations of the
same context, verified together in one forward pass with tree attention.

Where few requests run (the long tail of an RL rollout) a step is bound by reading the
weights, so verifying tens more tokens costs little; a tree then turns the drafter's
alternatives into accepted tokens where its single best guess is wrong. Seer drafts such
trees from a GRPO group's responses; Arctic's SuffixDecoding speculates trees over its suffix
trees (arctic-inference `use_tree_spec`), while vLLM's `suffix` method verifies one path.

The candidates (`propose_paths`): first the drafter's own `propose` (so its state, the
evidence policy's judging and a draft budget, moves as without a tree), then, from every
source that keeps occurrence counts (own or group automaton, history, corpus:
`SamDrafter.evidence_sources`), the continuation of the longest match and of up to
`DEPTH - 1` shorter matches, each drafted three ways (earliest occurrence, most frequent
token, latest occurrence). They are ranked by their expected accepted tokens, the sum over j
of counts[j] / counts[0] (how often the match was followed by the draft's first j tokens),
and kept while they add tokens the tree does not hold yet, up to `width` paths.

Verification (`tree_accepted`): the target's tokens are sampled as without speculation and a
step keeps the longest path they follow, so the output is the target's own samples: exact for
greedy decoding and for sampling with deterministic drafts. Its cost is the tree's node count
(`tree_size`), the tokens verified.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from samspec_bench.sam.automaton import EARLIEST, FREQUENT, RECENT

DEPTH = 3            # the longest match and two shorter ones up its suffix links
CHOICES = (EARLIEST, FREQUENT, RECENT)


def expected_tokens(counts: Sequence[int], continued: Sequence[int] | None, at_end: bool) -> float:
    """A candidate's expected accepted tokens from its occurrence counts: sum over j of
    counts[j] / (occurrences of the match that continue). A dynamic source's count includes
    the match's own current occurrence, which has no continuation yet."""
    seen = continued[0] if continued else counts[0] - (1 if at_end else 0)
    if seen <= 0:
        return 0.0
    total = sum(counts[1:])
    if len(counts) > 1 and counts[1] > seen:   # counts fall along the draft: only the first may exceed
        total -= sum(c - seen for c in counts[1:] if c > seen)
    return total / seen


def candidates(sources: Sequence[tuple[Any, bool]], k: int) -> list[tuple[float, int, list[int]]]:
    """(expected tokens, match length, draft) of every candidate continuation, best first."""
    out = []
    for src, at_end in sources:
        for choice in CHOICES:
            for cand in src.evidence_chain(k, choice, DEPTH):
                length, draft, counts = cand[0], cand[1], cand[2]
                if length > 0 and draft:
                    cont = cand[3] if len(cand) > 3 else None
                    out.append((expected_tokens(counts, cont, at_end), length, list(draft)))
    out.sort(key=lambda c: (-c[0], -c[1]))
    seen: set[tuple[int, ...]] = set()   # the same draft from several sources or choices: its best once
    return [c for c in out if not (tuple(c[2]) in seen or seen.add(tuple(c[2])))]


def add_path(paths: list[list[int]], draft: Sequence[int]) -> bool:
    """Add `draft` to the tree's paths unless a path already holds it (as a prefix); a path it
    extends is replaced. True if the tree gained tokens."""
    d = list(draft)
    if not d or any(p[:len(d)] == d for p in paths):
        return False
    paths[:] = [p for p in paths if d[:len(p)] != p]
    paths.append(d)
    return True


def propose_paths(drafter, req_id: Hashable, k: int, width: int, peek: bool = False
                  ) -> tuple[list[int], list[list[int]]]:
    """(the drafter's own draft, the tree's paths): up to `width` paths of at most k tokens,
    the own draft's first (none where it drafts nothing: the tree then holds the alternatives
    alone), then the best candidates that add tokens (a path a later one extends is replaced
    by it, so the own draft may end up inside a longer path). `peek`: the own draft without
    side effects (Drafter.peek)."""
    if width < 1:
        raise ValueError(f"width = {width}: a tree has at least one path")
    own = list(drafter.peek(req_id, k) if peek else drafter.propose(req_id, k))
    paths: list[list[int]] = []
    add_path(paths, own)
    for _, _, draft in candidates(drafter.evidence_sources(req_id), k):
        if len(paths) >= width:
            break
        add_path(paths, draft[:k])
    return own, paths


def tree_size(paths: Sequence[Sequence[int]]) -> int:
    """Tokens the tree verifies: its nodes, the distinct non-empty prefixes of its paths. In
    lexicographic order each path adds the tokens past its common prefix with the one before."""
    nodes, prev = 0, ()
    for p in sorted(tuple(p) for p in paths):
        shared, end = 0, min(len(p), len(prev))
        while shared < end and p[shared] == prev[shared]:
            shared += 1
        nodes += len(p) - shared
        prev = p
    return nodes


def tree_accepted(paths: Sequence[Sequence[int]], tokens: Sequence[int]) -> int:
    """The longest prefix of `tokens` (the target's next tokens) that some path holds."""
    best = 0
    for p in paths:
        a, end = 0, min(len(p), len(tokens))
        while a < end and p[a] == tokens[a]:
            a += 1
        best = max(best, a)
    return best


def flatten(paths: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """The tree as an engine verifies it: (tokens, parents) of its nodes, path by path, a
    parent before its children; parents index this list, -1 for a child of the root (the
    request's last known token, verified at chunk position 0). One node per distinct prefix,
    so len(tokens) == tree_size(paths)."""
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}   # (parent, token) -> node
    for p in paths:
        parent = -1
        for t in p:
            node = children.get((parent, int(t)))
            if node is None:
                node = children[(parent, int(t))] = len(tokens)
                tokens.append(int(t))
                parents.append(parent)
            parent = node
    return tokens, parents


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's depth (a child of the root: 1), parents before children."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out
