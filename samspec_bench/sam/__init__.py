"""The SAM drafting library: suffix automata and drafters. No model, no torch.

    from samspec_bench.sam import SuffixAutomaton
    sa = SuffixAutomaton()
    sa.extend(token_ids)
    sa.match_length, sa.draft(k)

The rejection sampler (torch) is not part of it: `samspec_bench.bench.rejection`.
"""

from samspec_bench.sam.automaton import (CorpusAutomaton, CorpusMatcher, GroupAutomaton, GroupMember,
                                         SuffixAutomaton)
from samspec_bench.sam.draft_length import AdaptiveLength, EvidenceLength, parse_length
from samspec_bench.sam.drafters import (ArcticSuffixDrafter, Drafter, FixedSamDrafter, NgramDrafter,
                                        ReferenceSamDrafter, SamDrafter, available_drafters, make_drafter)
from samspec_bench.sam.python_automaton import ReferenceSam

__all__ = [
    "SuffixAutomaton", "CorpusAutomaton", "CorpusMatcher", "GroupAutomaton", "GroupMember",
    "Drafter", "SamDrafter", "FixedSamDrafter", "EvidenceLength", "parse_length", "NgramDrafter", "ArcticSuffixDrafter", "ReferenceSamDrafter",
    "AdaptiveLength", "available_drafters", "make_drafter", "ReferenceSam",
]
