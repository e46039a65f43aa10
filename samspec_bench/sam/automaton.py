"""The suffix automata drafters are built from, over the compiled core.

- `SuffixAutomaton`: one growing text (a request's prompt and what it generated so far).
- `CorpusAutomaton`: a static corpus of many documents; a `CorpusMatcher` walks a request's
  context through it. Matches never cross documents.
- `GroupAutomaton`: the responses of one prompt (a GRPO group) growing at the same time;
  each `GroupMember` drafts from its own text and from what its siblings generated so far.

All drafts follow SAM-Decoding's min_endpos policy: the earliest occurrence of the longest
matching suffix that has a continuation. Automata made with evidence=True (8 more bytes
per state) also answer `evidence(k, choice=EARLIEST)` (SuffixAutomaton, GroupMember,
CorpusMatcher), for the draft-length policy (sam/draft_length.py): (match length, draft,
counts) where counts[0] is how often the match occurs and counts[i] how often it occurs
followed by draft[:i]; the draft continues the earliest occurrence (EARLIEST, min_endpos's
draft), the latest earlier one (RECENT) or the most frequent token at each step (FREQUENT).
"""

from __future__ import annotations

from typing import Iterable

from samspec_bench.sam._samcore import SamCore, SingleCore

EARLIEST, FREQUENT, RECENT = 0, 1, 2   # which continuation evidence() drafts (as the C core numbers them)
CHOICES = {"earliest": EARLIEST, "frequent": FREQUENT, "recent": RECENT}


class SuffixAutomaton(SingleCore):
    """Indexes every token appended: `SuffixAutomaton(token_ids=None, *, reserve=0, evidence=False)`.

    `extend(token_ids)`: any iterable of non-negative ints or a 1-D integer numpy array.
    `match_length`: the largest l such that the last l tokens also occur ending at an
    earlier position (0 if none).
    `draft(k)`: with e the earliest end position of such an occurrence, text[e+1 : e+1+k]
    (clipped at the end of the text); [] if match_length == 0.
    The constructor is the compiled one (one per request: it stays cheap).
    """

    __slots__ = ()

    def __len__(self) -> int:
        return self.num_tokens

    def evidence(self, k: int, choice: int = EARLIEST) -> tuple[int, list[int], list[int]]:
        """(match length, draft, occurrence counts): see the module docstring."""
        return SingleCore.evidence(self, k, 0, choice)

    def evidence_chain(self, k: int, choice: int = EARLIEST, depth: int = 1) -> list[tuple[int, list[int], list[int]]]:
        """evidence() for the match and up to depth-1 shorter matches up its suffix links."""
        return SingleCore.evidence_chain(self, k, 0, choice, depth)

    def __repr__(self) -> str:
        return f"SuffixAutomaton(tokens={self.num_tokens}, states={self.num_states})"


class CorpusAutomaton:
    """A static automaton over many documents (earlier rollouts, a reference corpus)."""

    def __init__(self, documents: Iterable[Iterable[int]] = (), *, reserve: int = 0, evidence: bool = True):
        self._core = SamCore(interleaved=False, reserve=reserve, evidence=evidence)
        self._separators = 0   # the core's separators between documents (none before the first text)
        for doc in documents:
            self.add_document(doc)

    def add_document(self, token_ids: Iterable[int]) -> None:
        """Index one document (an empty one, say an empty response, holds nothing to match). Add
        documents before matching: a matcher walked before the corpus grew keeps a valid state,
        but one computed for the older corpus."""
        ids = token_ids if hasattr(token_ids, "__len__") else list(token_ids)
        before = self._core.num_tokens
        doc = self._core.new_doc()
        self._separators += self._core.num_tokens - before
        if len(ids):
            self._core.extend(ids, doc)

    def matcher(self) -> "CorpusMatcher":
        return CorpusMatcher(self._core)

    @property
    def num_documents(self) -> int:
        return self._core.num_docs

    @property
    def num_tokens(self) -> int:
        return self._core.num_tokens - self._separators

    @property
    def memory_bytes(self) -> int:
        return self._core.memory_bytes


class CorpusMatcher:
    """The longest suffix of a request's context that occurs in the corpus."""

    __slots__ = ("_core", "_state", "_length")

    def __init__(self, core: SamCore):
        self._core = core
        self._state = 0
        self._length = 0

    def extend(self, token_ids: Iterable[int]) -> None:
        self._state, self._length = self._core.advance(self._state, self._length, token_ids)

    def lookup(self, k: int) -> tuple[int, list[int]]:
        """(match length, draft of up to k tokens) in one call."""
        return self._core.lookup(self._state, self._length, k)

    @property
    def match_length(self) -> int:
        return self._core.lookup(self._state, self._length, 0)[0]

    def draft(self, k: int) -> list[int]:
        return self._core.lookup(self._state, self._length, k)[1]

    def evidence(self, k: int, choice: int = EARLIEST) -> tuple[int, list[int], list[int]]:
        """(match length, draft, occurrence counts in the corpus): see the module docstring."""
        return self._core.lookup_evidence(self._state, self._length, k, choice)

    def evidence_chain(self, k: int, choice: int = EARLIEST, depth: int = 1) -> list[tuple[int, list[int], list[int]]]:
        return self._core.lookup_evidence_chain(self._state, self._length, k, choice, depth)


class GroupAutomaton:
    """One automaton shared by the responses to one prompt. Members may advance in any
    interleaving (concurrently, step by step) or one after another.

    Policy detail: when the earliest occurrence of a member's longest match is another
    member's current last token (nothing follows it yet), the member falls back to a
    shorter match rather than to a later occurrence of the same length; on the 100x8
    GRPO trace this changed 6 of 172,919 replay steps."""

    def __init__(self, prompt_ids: Iterable[int] | None = None, *, evidence: bool = False):
        self._core = SamCore(interleaved=True, evidence=evidence)
        self._prompt = list(prompt_ids) if prompt_ids is not None else []

    def add_member(self, prompt_ids: Iterable[int] | None = None) -> "GroupMember":
        """A new response. Its text starts with `prompt_ids` when given (members of one group
        normally share the group's prompt), else with the group's prompt."""
        doc = self._core.new_doc()
        prompt = list(prompt_ids) if prompt_ids is not None else self._prompt
        if prompt:
            self._core.extend(prompt, doc)
        return GroupMember(self._core, doc)

    @property
    def num_members(self) -> int:
        return self._core.num_docs

    @property
    def num_tokens(self) -> int:
        return self._core.num_tokens

    @property
    def memory_bytes(self) -> int:
        return self._core.memory_bytes


class GroupMember:
    """A response in a group: its text is the prompt followed by what it generated."""

    __slots__ = ("_core", "doc")

    def __init__(self, core: SamCore, doc: int):
        self._core = core
        self.doc = doc

    @property
    def core(self) -> SamCore:
        """The group's automaton (document `doc` is this member's text)."""
        return self._core

    def extend(self, token_ids: Iterable[int]) -> None:
        self._core.extend(token_ids, self.doc)

    @property
    def match_length(self) -> int:
        return self._core.match(self.doc)[0]

    def match(self) -> tuple[int, int]:
        """(match length, global end position of the earliest usable occurrence or -1)."""
        return self._core.match(self.doc)

    def draft(self, k: int) -> list[int]:
        return self._core.draft(k, self.doc)

    def match_draft(self, k: int) -> tuple[int, list[int]]:
        """(match length, draft of up to k tokens) in one call."""
        return self._core.match_draft(k, self.doc)

    def evidence(self, k: int, choice: int = EARLIEST) -> tuple[int, list[int], list[int]]:
        """(match length, draft, occurrence counts): see the module docstring."""
        return self._core.evidence(k, self.doc, choice)

    def evidence_chain(self, k: int, choice: int = EARLIEST, depth: int = 1) -> list[tuple[int, list[int], list[int]]]:
        return self._core.evidence_chain(k, self.doc, choice, depth)
