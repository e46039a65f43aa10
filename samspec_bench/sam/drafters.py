"""Model-free drafters behind one small interface, usable per request in a batch.

A drafter holds per-request state keyed by a request id:

    d.start(req_id, prompt_ids, group=None)   # a request joins (group: its GRPO group key)
    d.extend(req_id, token_ids)               # tokens the target emitted for it
    d.propose(req_id, k) -> list[int]         # up to k draft tokens (may be empty)
    d.stop(req_id)                            # it finished: free its state

Drafters: `SamDrafter` (the suffix automaton: own context, GRPO group sharing, earlier RL
steps' responses to the same prompt (`history`, see sam/history.py), static corpus,
SAM-Decoding's selection, a draft-length policy: sam/draft_length.py), `NgramDrafter` (vLLM's prompt-lookup
semantics, the baseline), `ArcticSuffixDrafter` (Arctic Inference's suffix tree, when
`arctic-inference` is installed) and `ReferenceSamDrafter` (pure Python, for comparison).
`make_drafter(name, **options)` builds one by name; `sam-fixed` is SAM with the fixed
(min_endpos, always up to k) baseline length, `sam` uses the evidence policy by default.
"""

from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from samspec_bench.sam._samcore import SamBatch, ngram_propose
from samspec_bench.sam.automaton import CorpusAutomaton, GroupAutomaton, SuffixAutomaton
from samspec_bench.sam.draft_budget import pooled_budget, pooled_ceiling, shared_budget
from samspec_bench.sam.draft_length import (FIXED_LENGTH, AdaptiveLength, EvidenceLength, LengthPolicy,
                                            TokenAcceptance, parse_length)
from samspec_bench.sam.drafter_base import check_k  # noqa: F401 - public here too
from samspec_bench.sam.drafter_base import Drafter, rebuild_options
from samspec_bench.sam.history import HistoryStore
from samspec_bench.sam.python_automaton import check_count, token_array
from samspec_bench.sam.python_drafters import ObjectSamDrafter, ReferenceSamDrafter  # noqa: F401 - public here too

try:   # an extension built before the compiled evidence path (or its corrections): the policy runs in Python
    from samspec_bench.sam._samcore import AcceptanceStats, EvidenceBatch
except ImportError:
    AcceptanceStats = EvidenceBatch = None
if AcceptanceStats is not None and not hasattr(AcceptanceStats, "relax_pooled"):
    AcceptanceStats = EvidenceBatch = None   # built before the pooled shape prior's fading: rebuild it (README)
if EvidenceBatch is not None and not hasattr(EvidenceBatch, "settle"):
    EvidenceBatch = None   # built before peek / settle (rollout profiles): the policy runs in Python


class SamDrafter(Drafter):
    """Suffix-automaton drafting.

    Sources: the request's own prompt and prefix (always), the GRPO group's responses so
    far (`group_sharing`: one automaton per group holding the prompt and every sibling's
    tokens; it replaces the own automaton, which it contains), earlier RL steps' responses
    to the same prompt (`history`: a HistoryStore, looked up when a request starts), and a
    static `corpus`. Selection between the dynamic match (own or group) and the static ones
    (history, then corpus) follows SAM-Decoding: a static draft is used when its match is
    longer than the one chosen so far by more than `l_bias`; no draft when the chosen match
    is shorter than `l_threshold`.

    `length`: how many of the k tokens to propose (sam/draft_length.py): a spec string
    ("fixed": always up to k, SAM-Decoding's baseline; "evidence" (the default) or
    "evidence:cost=0.2,...": by the match length, the continuation's occurrence counts and
    the request's recent acceptance), an EvidenceLength, or an AdaptiveLength. Given none,
    an engine that times its own steps applies its default instead (`length_given` False;
    inside vLLM "evidence:cost=auto", the cost fitted from the step times).
    `counts=True`: the automata keep occurrence counts whatever the length policy (multi-path
    drafts, sam/draft_tree.py, rank their candidates by them; `evidence_sources`).
    `compiled=False`: the evidence policy's choice runs in Python (its specification), for
    comparison; by default it runs in C where it can (`policy_path` says which).
    `token_stats`: the drafter-wide acceptance record of the evidence policy's corrections
    (`tokens=`, `shape=`, `pairs=`): a `_samcore.AcceptanceStats` on the compiled path, a
    `TokenAcceptance` (sam/draft_length.py, its specification) on the Python one; the same
    methods, tables and len(). By default each drafter keeps its own; pass one drafter's
    `token_stats` to others to let the statistics (never draft content) outlive a drafter, as
    one proposer serving every request of an engine would. A `TokenAcceptance` passed to a
    drafter whose policy could run in C keeps it in Python (its record is a Python one).
    Pickling keeps the constructor's options (and a Python record): a TypeError says why with
    live requests, or a compiled record that has learnt (neither is pickled).
    """

    name = "sam"

    def __init__(self, *, group_sharing: bool = False, corpus: CorpusAutomaton | None = None,
                 l_threshold: int = 1, l_bias: int = 0, length: "str | LengthPolicy | None" = None,
                 history: HistoryStore | None = None, compiled: bool = True,
                 token_stats: "TokenAcceptance | AcceptanceStats | None" = None, counts: bool = False):
        l_threshold = check_count(l_threshold, "l_threshold", 1)
        self._options = dict(group_sharing=group_sharing, corpus=corpus, l_threshold=l_threshold, l_bias=l_bias,
                             length=length, history=history, compiled=compiled, counts=counts)   # for pickling
        self.group_sharing = group_sharing
        self.corpus = corpus
        self.l_threshold = l_threshold
        self.l_bias = l_bias
        self.length_given = length is not None   # an engine may apply its own default otherwise
        self.length = length = parse_length(length)
        self.history = history
        self._fixed_length = length.fixed
        self._evidence = isinstance(length, EvidenceLength)
        # occurrence counts in the automata: the evidence policy reads them, and multi-path drafts
        # (sam/draft_tree.py) rank their candidates by them whatever the length policy
        self._counts = self._evidence or counts
        self._ev: dict[Hashable, Any] = {}       # request -> its RequestEvidence (evidence policy)
        self._per_token = self._evidence and (length.tokens > 0 or length.pairs > 0 or length.shape > 0)
        # Per request: the dynamic source (its own SuffixAutomaton, or its GroupMember), and
        # only where configured its corpus matcher and group key.
        self._reqs: dict[Hashable, SuffixAutomaton | Any] = {}
        self._matchers: dict[Hashable, Any] = {}
        self._group_of: dict[Hashable, Hashable] = {}
        self._groups: dict[Hashable, list] = {}  # group -> [GroupAutomaton, live members]
        self._hist: dict[Hashable, Any] = {}     # request -> its matcher over the prompt's history
        if not group_sharing and corpus is None and history is None and l_threshold == 1 and self._fixed_length \
                and not counts:
            # The plain configuration runs its per-request calls in C (the same automata,
            # drafts and errors): a decode loop makes two calls per request per step.
            batch = SamBatch()
            self._reqs = batch.requests
            self.start, self.extend, self.propose, self.stop = batch.start, batch.extend, batch.propose, batch.stop
        # The evidence policy over the dynamic source (own or group) runs its per-draft choice
        # and its judging of the previous draft in C: one call each, the drafts choose() picks
        # in Python (the specification), the corrections' record an AcceptanceStats. Static
        # sources, a policy the C code does not implement (EvidenceLength.c_params: pairs > 0
        # included), or a Python record (TokenAcceptance) passed in, stay in Python.
        self._c_batch = None
        params = length.c_params() if self._evidence and compiled and EvidenceBatch is not None else None
        if params is not None and corpus is None and history is None and not isinstance(token_stats, TokenAcceptance):
            self._token_stats = token_stats if token_stats is not None else AcceptanceStats()
            batch = self._c_batch = EvidenceBatch(**params, l_threshold=l_threshold, stats=self._token_stats)
            self._ev = batch.requests
            self.extend = batch.extend
            handed = callable(length.cost) or length.budget is not None   # the cost read per draft here
            self.propose = self._propose_profiled if handed else batch.propose
        else:
            if self._evidence and length.pairs > 0 and AcceptanceStats is not None \
                    and isinstance(token_stats, AcceptanceStats):
                raise ValueError(f"token_stats: the compiled record keeps no pairs, which {length.spec()} "
                                 "corrects by: pass a TokenAcceptance (sam/draft_length.py)")
            self._token_stats = token_stats if token_stats is not None else TokenAcceptance()
        self._budget = self._shared_budget()

    def __getstate__(self):
        return rebuild_options(self, self._options, self._token_stats)

    def __setstate__(self, options):
        self.__init__(**options)

    def _shared_budget(self):
        """The evidence policy's draft budget, shared by the drafters sharing the record (or None)."""
        pol = self.length
        if not self._evidence or pol.budget is None:
            return None
        params = (pol.budget, pol.burst, pol.rate, pol.threshold(1), pol.windup, pol.spenddown, pol.bucket == 1)
        if pol.pool is not None and pol.ceiling is None:
            return pooled_budget(pol.pool, *params)
        state = shared_budget(self._token_stats, *params)
        if pol.ceiling is not None:   # a budget per record under one run-wide cap
            state.ceiling = pooled_ceiling(pol.pool, pol.ceiling)
        return state

    @property
    def token_stats(self):
        """The drafter-wide acceptance record of the corrections (share it by passing it on)."""
        return self._token_stats

    @token_stats.setter
    def token_stats(self, stats) -> None:
        if self._c_batch is not None:
            self._c_batch.stats = stats   # an AcceptanceStats (TypeError otherwise)
        self._token_stats = stats
        self._budget = self._shared_budget()

    @property
    def policy_path(self) -> str:
        """Where the draft-length policy runs per draft: 'c' (compiled) or 'python'."""
        return "c" if self._c_batch is not None or self._fixed_length else "python"

    def _propose_profiled(self, req_id, k):
        """A profile cost is a Python callable, a budget's cost its multiplier: read here, chosen in C."""
        if self._budget is not None:
            return self._budget.spend(check_count(k, "k"), lambda most, cost: self._c_batch.propose(req_id, most, cost))
        return self._c_batch.propose(req_id, k, self.length.threshold(k))

    def start(self, req_id, prompt_ids, group=None):
        if req_id in self._reqs:
            raise ValueError(f"request {req_id!r} already started")
        prompt = prompt_ids if hasattr(prompt_ids, "__len__") else list(prompt_ids)
        if self.group_sharing:
            key = group if group is not None else ("__solo__", req_id)
            entry = self._groups.get(key) or [GroupAutomaton(evidence=self._counts), 0]
            member = entry[0].add_member(prompt)  # each member indexes its own prompt (a bad one: nothing counted)
            self._groups[key] = entry
            entry[1] += 1
            self._group_of[req_id] = key
            self._reqs[req_id] = member
        else:
            self._reqs[req_id] = SuffixAutomaton(prompt, evidence=self._counts) if len(prompt) \
                else SuffixAutomaton(evidence=self._counts)
        if self._c_batch is not None:
            src = self._reqs[req_id]
            if isinstance(src, SuffixAutomaton):
                self._c_batch.add(req_id, src, 0)
            else:
                self._c_batch.add(req_id, src.core, src.doc)
        elif self._evidence:
            self._ev[req_id] = self.length.new_request()
        if self.corpus is not None:
            matcher = self._matchers[req_id] = self.corpus.matcher()
            if len(prompt):
                matcher.extend(prompt)
        if self.history is not None:
            auto = self.history.automaton(prompt)
            if auto is not None:
                matcher = self._hist[req_id] = auto.matcher()
                if len(prompt):
                    matcher.extend(prompt)

    def reset_statistics(self) -> None:
        """Start a new drafter-wide acceptance record (a replay that reuses the drafter for
        independent responses keeps none across them)."""
        self.token_stats = type(self._token_stats)()

    def extend(self, req_id, token_ids):
        if self._evidence and not hasattr(token_ids, "__len__"):
            token_ids = list(token_ids)   # a generator is read twice: appended, then judged
        self._reqs[req_id].extend(token_ids)
        if self._evidence:
            self._judge(req_id, token_ids)
        if self.corpus is not None:
            self._matchers[req_id].extend(token_ids)
        hist = self._hist.get(req_id)
        if hist is not None:
            hist.extend(token_ids)

    def evidence_sources(self, req_id) -> list[tuple[Any, bool]]:
        """The request's sources that answer `evidence_chain` (automata with counts), each with
        whether its match's own current occurrence is among its counts (the dynamic one)."""
        if not self._counts:
            raise ValueError("evidence_sources: this drafter's automata keep no counts (pass counts=True)")
        out = [(self._reqs[req_id], True)]
        return out + [(m, False) for m in (self._hist.get(req_id), self._matchers.get(req_id)) if m is not None]

    def match_lengths(self, req_id) -> tuple[int, int]:
        """(dynamic match length, static match length); static is 0 without a corpus."""
        dyn = self._reqs[req_id].match_length
        stat = self._matchers[req_id].match_length if self.corpus is not None else 0
        return dyn, stat

    def _judge(self, req_id, token_ids) -> None:
        """The tokens emitted after a draft show how much of it was accepted: the target's
        own token after the accepted prefix differs from the draft's there."""
        state = self._ev[req_id]
        draft = state.pending
        if draft is None:
            return
        toks = token_ids.tolist() if hasattr(token_ids, "tolist") else list(token_ids)
        a, n = 0, min(len(draft), len(toks))
        while a < n and toks[a] == draft[a]:
            a += 1
        self.length.observe(state, state.pending_pred, a)
        if self._per_token:
            self.token_stats.update(draft, state.pending_q, a, self.length.pairs > 0)
        state.pending = None

    def _propose_evidence(self, req_id, k, cost=None, relax: bool = True):
        policy = self.length
        choice, depth = policy.choice_code, policy.depth
        cands = self._reqs[req_id].evidence_chain(k, choice, depth)
        dyn_len, at_end = (cands[0][0] if cands else 0), True
        # a static source (history, then corpus) replaces the dynamic one when its match is longer
        for static in (self._hist.get(req_id), self._matchers.get(req_id)):
            if static is not None:
                c = static.evidence_chain(k, choice, depth)
                if c and c[0][0] > dyn_len + self.l_bias:
                    cands, dyn_len, at_end = c, c[0][0], False
        if dyn_len < self.l_threshold or (k == 0 and not isinstance(k, bool)):   # k = 0: no draft (as the C path)
            return []
        state = self._ev[req_id]
        draft, expected = policy.choose(state, check_k(k), cands, at_end, self.token_stats, cost, relax)
        if draft:
            state.pending, state.pending_pred = draft, expected
        return draft

    def peek(self, req_id, k):
        if not self._evidence:
            return self.propose(req_id, k)
        if self._c_batch is not None:
            if self._budget is not None:
                return self._budget.peek(check_count(k, "k"), lambda most, cost: self._c_batch.peek(req_id, most, cost))
            return self._c_batch.peek(req_id, k, self.length.threshold(k) if callable(self.length.cost) else None)
        state = self._ev[req_id]
        kept = state.pending, state.pending_pred, state.pending_q
        try:
            if self._budget is not None:
                return self._budget.peek(check_count(k, "k"),
                                         lambda most, cost: self._propose_evidence(req_id, most, cost, False))
            return self._propose_evidence(req_id, k, relax=False)
        finally:
            state.pending, state.pending_pred, state.pending_q = kept

    def settle(self, req_id, emitted):
        if self._c_batch is not None:
            self._c_batch.settle(req_id, list(emitted))
        elif self._evidence:
            self._judge(req_id, list(emitted))

    def propose(self, req_id, k):
        if self._budget is not None:
            return self._budget.spend(check_count(k, "k"),
                                      lambda most, cost: self._propose_evidence(req_id, most, cost))
        if self._evidence:
            return self._propose_evidence(req_id, k)
        dyn_len, draft = self._reqs[req_id].match_draft(k)
        hist = self._hist.get(req_id)
        if hist is not None:
            hist_len, hist_draft = hist.lookup(k)
            if hist_len > dyn_len + self.l_bias:
                dyn_len, draft = hist_len, hist_draft
        if self.corpus is not None:
            stat_len, stat_draft = self._matchers[req_id].lookup(k)
            if stat_len > dyn_len + self.l_bias:
                dyn_len, draft = stat_len, stat_draft
        if dyn_len < self.l_threshold:
            return []
        if self._fixed_length:
            return draft
        return draft[: self.length(dyn_len, k)]

    def stop(self, req_id):
        del self._reqs[req_id]
        self._matchers.pop(req_id, None)
        self._hist.pop(req_id, None)
        self._ev.pop(req_id, None)
        key = self._group_of.pop(req_id, None)
        if key is not None:
            entry = self._groups[key]
            entry[1] -= 1
            if entry[1] == 0:  # the last live member frees the group's automaton
                del self._groups[key]

    def memory_bytes(self):
        own = 0 if self.group_sharing else sum(a.memory_bytes for a in self._reqs.values())
        return own + sum(g.memory_bytes for g, _ in self._groups.values())

    def describe(self):
        return {"name": self.name, "group_sharing": self.group_sharing,
                "corpus_tokens": self.corpus.num_tokens if self.corpus is not None else 0,
                "history": None if self.history is None else {"window": self.history.window,
                                                              "budget_bytes": self.history.budget_bytes},
                "l_threshold": self.l_threshold, "l_bias": self.l_bias,
                "length": self.length.describe(), "policy_path": self.policy_path,
                **({"budget": self._budget.describe()} if self._budget is not None else {})}


class NgramDrafter(Drafter):
    """vLLM's n-gram (prompt lookup) semantics: the longest n in [min_n, max_n] such that
    the last n tokens occur earlier, its earliest occurrence, the k tokens after it. Rescans
    the whole context every step (O(L)), as vLLM does."""

    name = "ngram"

    def __init__(self, min_n: int = 2, max_n: int = 5):
        min_n, max_n = check_count(min_n, "min_n", 1), check_count(max_n, "max_n", 1)
        if min_n > max_n:
            raise ValueError(f"ngram sizes min_n={min_n}, max_n={max_n}: need 1 <= min_n <= max_n")
        self.min_n, self.max_n = min_n, max_n
        self._reqs: dict[Hashable, list] = {}  # req -> [int32 buffer, length]

    def start(self, req_id, prompt_ids, group=None):
        if req_id in self._reqs:
            raise ValueError(f"request {req_id!r} already started")
        prompt = token_array(prompt_ids, f"request {req_id!r}'s prompt")
        buf = np.empty(max(64, 2 * prompt.size), dtype=np.int32)
        buf[: prompt.size] = prompt
        self._reqs[req_id] = [buf, int(prompt.size)]

    def extend(self, req_id, token_ids):
        entry = self._reqs[req_id]
        toks = token_array(token_ids, f"request {req_id!r}")
        if toks.size == 0:
            raise ValueError("no token ids given (empty input)")
        buf, n = entry
        if n + toks.size > buf.size:
            new = np.empty(max(2 * buf.size, n + toks.size), dtype=np.int32)
            new[:n] = buf[:n]
            entry[0] = buf = new
        buf[n: n + toks.size] = toks
        entry[1] = n + toks.size

    def propose(self, req_id, k):
        buf, n = self._reqs[req_id]
        return ngram_propose(buf[:n], self.min_n, self.max_n, k)

    def stop(self, req_id):
        del self._reqs[req_id]

    def memory_bytes(self):
        return sum(buf.nbytes for buf, _ in self._reqs.values())

    def describe(self):
        return {"name": self.name, "min_n": self.min_n, "max_n": self.max_n}


def arctic_available() -> bool:
    try:
        import arctic_inference.suffix_decoding  # noqa: F401
    except Exception:
        return False
    return True


class ArcticSuffixDrafter(Drafter):
    """Arctic Inference's suffix-tree drafter (`pip install arctic-inference`, see README).

    `share_finished=False` (default) drafts from each request's own prompt and prefix only:
    a finished response is evicted from the global tree. With True, finished responses stay
    cached and every later request drafts from them too (Arctic's default behaviour)."""

    name = "suffix"

    def __init__(self, max_tree_depth: int = 64, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                 share_finished: bool = False):
        try:
            from arctic_inference.suffix_decoding import SuffixDecodingCache
        except Exception as e:  # noqa: BLE001 - any import failure means "not installed"
            raise ValueError("the 'suffix' drafter needs arctic-inference: see the README's "
                             f"optional install (import failed: {e})") from None
        self._cache = SuffixDecodingCache(max_tree_depth=max_tree_depth, max_cached_requests=-1)
        self.max_tree_depth = max_tree_depth
        self.max_spec_factor = max_spec_factor
        self.max_spec_offset = max_spec_offset
        self.min_token_prob = min_token_prob
        self.share_finished = share_finished
        self._reqs: dict[Hashable, list] = {}  # req -> [arctic id, context tail (list)]
        self._next_id = 0

    def start(self, req_id, prompt_ids, group=None):
        rid = f"r{self._next_id}"
        self._next_id += 1
        prompt = [int(t) for t in np.asarray(prompt_ids).tolist()]
        self._cache.start_request(rid, prompt)
        self._reqs[req_id] = [rid, prompt[-self.max_tree_depth:]]

    def extend(self, req_id, token_ids):
        entry = self._reqs[req_id]
        toks = [int(t) for t in np.asarray(token_ids).tolist()]
        if not toks:
            raise ValueError("no token ids given (empty input)")
        self._cache.add_active_response(entry[0], toks)
        tail = entry[1] + toks
        entry[1] = tail[-self.max_tree_depth:]

    def propose(self, req_id, k):
        rid, ctx = self._reqs[req_id]
        if not ctx:
            return []
        draft = self._cache.speculate(rid, ctx, max_spec_tokens=k, max_spec_factor=self.max_spec_factor,
                                      max_spec_offset=self.max_spec_offset,
                                      min_token_prob=self.min_token_prob, use_tree_spec=False)
        return list(draft.token_ids)[:k]

    def stop(self, req_id):
        rid, _ = self._reqs.pop(req_id)
        self._cache.stop_request(rid)
        if not self.share_finished:
            self._cache.evict_cached_response(rid)

    def describe(self):
        return {"name": self.name, "max_tree_depth": self.max_tree_depth,
                "max_spec_factor": self.max_spec_factor, "max_spec_offset": self.max_spec_offset,
                "min_token_prob": self.min_token_prob, "share_finished": self.share_finished}


class FixedSamDrafter(SamDrafter):
    """SAM with SAM-Decoding's baseline length: min_endpos, always up to k tokens."""

    name = "sam-fixed"

    def __init__(self, **options):
        options.setdefault("length", "fixed")
        super().__init__(**options)


DRAFTERS = {"sam": SamDrafter, "sam-fixed": FixedSamDrafter, "ngram": NgramDrafter, "suffix": ArcticSuffixDrafter,
            "sam-python": ReferenceSamDrafter, "sam-public": ObjectSamDrafter}


def available_drafters() -> list[str]:
    return [n for n in DRAFTERS if n != "suffix" or arctic_available()]


def make_drafter(name: str, **options) -> Drafter:
    """Build a drafter by name ('sam', 'sam-fixed', 'ngram', 'suffix', 'sam-python', 'sam-public').
    SAM's `length` option takes a spec string: make_drafter("sam", length="fixed")."""
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}: choose from {', '.join(DRAFTERS)}")
    return DRAFTERS[name](**options)
