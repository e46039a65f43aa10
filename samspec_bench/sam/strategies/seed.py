"""`seed`: the seed project's SAM (SAM-Decoding, arXiv 2411.10666, as the seed ran it in verl):
the continuation of the earliest occurrence (min_endpos) of the longest suffix match in the
request's own prompt and output, always k = 3 tokens, only while at most 8 requests run.

Differs: nothing in the drafts; the switch is decided on the running count before a step."""

from samspec_bench.sam.strategies.base import Strategy

STRATEGY = Strategy(name="seed", drafter="sam-fixed", sources="own", k=3, switch="threshold:8",
                    follows="SAM-Decoding (arXiv 2411.10666) min_endpos, fixed k=3; the seed's switch at <= 8 running",
                    differs="none in the drafts")
