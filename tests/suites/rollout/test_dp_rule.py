"""--dp over a count that does not divide: what verl does (refuses the batch, or cuts a group's
rows over two instances; it pads only validation batches) and what the simulation did, said."""

from __future__ import annotations

from samspec_bench.suites.rollout.dp_rule import torch_chunks, uneven_dp


def test_tensordicts_chunk_sizes_round_up_and_can_run_out():
    assert torch_chunks(15, 4) == [4, 4, 4, 3]
    assert torch_chunks(10, 4) == [3, 3, 3, 1]
    assert torch_chunks(6, 4) == [2, 2, 2]       # three chunks for four instances
    assert torch_chunks(8, 4) == [2, 2, 2, 2]


def test_counts_that_divide_say_nothing():
    none = {"uneven": None, "verl": None, "verl_requests_per_instance": None}
    assert uneven_dp(8, 4, 4, "group", [8, 8, 8, 8]) == none
    assert uneven_dp(6, 4, 2, "rebalance", [12, 12]) == none
    assert uneven_dp(5, 3, 1, "group", [15]) == none
    assert uneven_dp(6, 4, 4, "agent-loop", [6, 6, 6, 6]) == none   # 24 rows over 4 instances and 8 workers


def test_rows_that_do_not_divide_are_refused_by_verl_not_padded():
    """15 rows over --dp 4: verl's config check and DataProto.chunk refuse them; the line does not
    claim the training rollout is padded (pad_dataproto_to_divisor pads validation batches only)."""
    d = uneven_dp(5, 3, 4, "group", [6, 3, 3, 3])
    assert d["verl"] == "refused" and d["verl_requests_per_instance"] is None
    text = d["uneven"]
    assert text.startswith("15 rows (5 prompts x 3) do not divide by --dp 4: verl refuses them in its config check")
    assert "DataProto.chunk into 4 instances (it asserts equal chunks; with VERL_AUTO_PADDING it cuts 4, 4, 4, 3 " \
           "rows, nothing padded)" in text
    assert "pads only validation batches (pad_dataproto_to_divisor" in text
    assert "copy of the last row" not in text and "copies of the last row" not in text
    assert text.endswith("splits whole groups as evenly as it can: 3 to 6 requests per instance")
    six = uneven_dp(3, 2, 4, "rebalance", [2, 2, 1, 1])["uneven"]   # 6 rows: three chunks for four instances
    assert "leaves 3 chunks for 4 and fails" in six and "splits the rows as evenly" in six


def test_the_agent_loop_is_refused_where_its_workers_do_not_divide_the_rows():
    d = uneven_dp(5, 3, 5, "agent-loop:4", [3, 3, 3, 3, 3])   # 15 rows: --dp 5 divides, 4 workers do not
    assert d["verl"] == "refused" and "do not divide by the 4 agent-loop workers" in d["uneven"]
    assert "config check" not in d["uneven"] and "DataProto.chunk into 4 agent-loop workers" in d["uneven"]


def test_prompts_that_do_not_divide_split_groups_in_verl_and_not_here():
    """6 prompts x 8 over --dp 4: verl's chunks of 12 rows cut groups 1 and 4 in two."""
    d = uneven_dp(6, 8, 4, "group", [16, 16, 8, 8])
    assert d["verl"] == "groups split" and d["verl_requests_per_instance"] == [12, 12, 12, 12]
    assert "cuts the 48 rows into 4 contiguous chunks of 12, so 2 group(s) run on two instances" in d["uneven"]
    assert d["uneven"].endswith("splits whole groups as evenly as it can: 8 to 16 requests per instance")
