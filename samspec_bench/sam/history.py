"""The `history` draft source: what earlier RL steps answered to the same prompt.

In RL training a prompt comes back in later steps (the next epoch, or resampled), and the
responses it got before are the closest text to what the policy writes now (Arctic
Inference's global suffix cache and the DAS paper draft from them). A `HistoryStore` keeps,
per prompt (keyed by a hash of its token ids), the most recent finished responses of earlier
steps, bounded two ways:

- `window`: at most this many responses per prompt (the oldest go first);
- `budget_bytes`: at most this many bytes of stored tokens in all (4 bytes a token, the
  prompt counted once per entry); over it, whole prompts are dropped, least recently
  added first (a single prompt over the budget loses its oldest responses, then itself).

Responses are added when a step is over (`add`), never while it runs: the responses of the
current step are the `group` source, not history. A prompt not held finds the entry of the
longest held prompt that begins it (`prefix_hits`): a later turn of a multi-turn rollout is a
request whose prompt is the conversation so far, and its history is what earlier steps answered
to the conversation's first prompt. A drafter asks `automaton(prompt_ids)` for
a corpus automaton over the prompt's entry (one document per earlier response: the prompt,
then the response, so that a request's prompt already matches and the first response tokens
can be drafted); automata are built on demand and a few are kept (`cache_size`), outside the
budget (`lookups`, `hits`, `prefix_hits` and `peak_automaton_bytes` count what this process
looked up).
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict, deque
from typing import Any, Iterable

import numpy as np

from samspec_bench.sam.automaton import CorpusAutomaton
from samspec_bench.sam.python_automaton import token_array

TOKEN_BYTES = 4  # int32


def prompt_key(prompt_ids: Iterable[int]) -> bytes:
    """The identity of a prompt: a hash of its token ids (int32)."""
    arr = np.ascontiguousarray(np.asarray(prompt_ids if hasattr(prompt_ids, "__len__") else list(prompt_ids),
                                          dtype=np.int32))
    return hashlib.blake2b(arr.tobytes(), digest_size=16).digest()


class _Entry:
    __slots__ = ("prompt", "responses", "nbytes")

    def __init__(self, prompt: np.ndarray, window: int):
        self.prompt = prompt
        self.responses: deque[np.ndarray] = deque(maxlen=window)
        self.nbytes = prompt.nbytes


class HistoryStore:
    """Earlier steps' responses per prompt, bounded by `window` responses per prompt and
    `budget_bytes` of stored tokens overall."""

    def __init__(self, window: int = 16, budget_bytes: int = 512 << 20, cache_size: int = 8):
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"history window = {window!r}: must be an integer >= 1 (responses kept per prompt)")
        if isinstance(budget_bytes, bool) or not (isinstance(budget_bytes, (int, np.integer)) or
                                                  (isinstance(budget_bytes, float) and budget_bytes.is_integer())) \
                or not budget_bytes > 0:
            raise ValueError(f"history budget = {budget_bytes!r} bytes: must be a whole number of bytes > 0")
        if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size < 0:
            raise ValueError(f"history cache_size = {cache_size!r}: must be an integer >= 0 (automata kept)")
        self.window = int(window)
        self.budget_bytes = int(budget_bytes)
        self.cache_size = int(cache_size)
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()  # least recently added first
        self._cache: OrderedDict[bytes, CorpusAutomaton] = OrderedDict()
        self._lengths: Counter[int] = Counter()   # prompt lengths held (for the prefix lookup)
        self.nbytes = 0
        self.peak_bytes = 0
        self.added = 0
        self.evicted_window = 0     # responses pushed out of a prompt's window
        self.evicted_budget = 0     # responses dropped with their prompt to stay within the budget
        self.evicted_prompts = 0
        self.lookups = 0
        self.hits = 0               # lookups that found at least one earlier response
        self.prefix_hits = 0        # of them, found under a held prompt that begins the asked one
        self.peak_automaton_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __getstate__(self) -> dict:
        """Picklable (a trainer's checkpoint): the automata cache is left out, rebuilt on demand."""
        return {**self.__dict__, "_cache": OrderedDict()}

    @property
    def responses_held(self) -> int:
        return sum(len(e.responses) for e in self._entries.values())

    def add(self, prompt_ids, response_ids) -> None:
        """A finished response of an earlier step to the prompt `prompt_ids`."""
        resp = token_array(response_ids, "history response")
        if resp.size == 0:
            return
        prompt = token_array(prompt_ids, "history prompt")
        key = prompt_key(prompt)
        entry = self._entries.pop(key, None)
        if entry is None:
            entry = _Entry(prompt.copy(), self.window)
            self.nbytes += entry.nbytes
            self._lengths[prompt.size] += 1
        if len(entry.responses) == self.window:
            old = entry.responses[0]
            entry.nbytes -= old.nbytes
            self.nbytes -= old.nbytes
            self.evicted_window += 1
        entry.responses.append(resp.copy())
        entry.nbytes += resp.nbytes
        self.nbytes += resp.nbytes
        self._entries[key] = entry          # most recently added last
        self._cache.pop(key, None)
        self.added += 1
        while self.nbytes > self.budget_bytes and self._entries:
            if len(self._entries) > 1 or len(entry.responses) <= 1:   # drop the least recently added prompt
                old_key, old = self._entries.popitem(last=False)
                self.nbytes -= old.nbytes
                self._forget_length(old.prompt.size)
                self.evicted_budget += len(old.responses)
                self.evicted_prompts += 1
                self._cache.pop(old_key, None)
            else:                                                     # one prompt over the budget: its oldest
                old = entry.responses.popleft()
                entry.nbytes -= old.nbytes
                self.nbytes -= old.nbytes
                self.evicted_budget += 1
                self._cache.pop(key, None)
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def _forget_length(self, n: int) -> None:
        self._lengths[n] -= 1
        if self._lengths[n] <= 0:
            del self._lengths[n]

    def _resolve(self, prompt_ids) -> tuple[bytes | None, bool]:
        """The key of the entry for this prompt: its own, else the longest held prompt that
        begins it (module docstring), and whether it was such a prefix; (None, False) when
        neither is held."""
        prompt = token_array(prompt_ids, "history lookup's prompt")
        key = prompt_key(prompt)
        if key in self._entries:
            return key, False
        for n in sorted((n for n in self._lengths if 0 < n < prompt.size), reverse=True):   # an empty prompt begins all
            key = prompt_key(prompt[:n])
            if key in self._entries:
                return key, True
        return None, False

    def responses(self, prompt_ids) -> list[np.ndarray]:
        """The responses held for this prompt (or the longest held prompt that begins it), oldest first."""
        key, _ = self._resolve(prompt_ids)
        return list(self._entries[key].responses) if key is not None else []

    def mean_response_lengths(self) -> list[float]:
        """Per prompt held, the mean length of its responses (a length predictor's input)."""
        return [sum(r.size for r in e.responses) / len(e.responses) for e in self._entries.values() if e.responses]

    def automaton(self, prompt_ids) -> CorpusAutomaton | None:
        """A corpus automaton over this prompt's earlier responses (each document: the prompt,
        then one response), or those of the longest held prompt that begins it; None when there
        are none."""
        self.lookups += 1
        key, prefix = self._resolve(prompt_ids)
        entry = self._entries.get(key) if key is not None else None
        if entry is None or not entry.responses:
            return None
        self.hits += 1
        self.prefix_hits += prefix
        auto = self._cache.get(key)
        if auto is None:
            total = sum(r.size for r in entry.responses) + len(entry.responses) * (entry.prompt.size + 1)
            auto = CorpusAutomaton(reserve=total)
            for r in entry.responses:
                auto.add_document(np.concatenate([entry.prompt, r]) if entry.prompt.size else r)
            self._cache[key] = auto
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            self.peak_automaton_bytes = max(self.peak_automaton_bytes,
                                            sum(a.memory_bytes for a in self._cache.values()))
        else:
            self._cache.move_to_end(key)
        return auto

    def describe(self) -> dict[str, Any]:
        return {"window_responses_per_prompt": self.window, "budget_bytes": self.budget_bytes,
                "prompts_held": len(self._entries), "responses_held": self.responses_held,
                "stored_bytes": self.nbytes, "peak_stored_bytes": self.peak_bytes, "responses_added": self.added,
                "evicted_by_window": self.evicted_window, "evicted_by_budget": self.evicted_budget,
                "prompts_evicted": self.evicted_prompts,
                "largest_entry_bytes": max((e.nbytes for e in self._entries.values()), default=0),
                "bytes_counted": "stored token ids (int32, the prompt once per entry); the automata built from them "
                                 "on demand (at most cache_size kept) are outside the budget"}
