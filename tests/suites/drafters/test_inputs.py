"""The context sweep's own stream: each trace file's share as the files allow."""

from __future__ import annotations

import numpy as np

from samspec_bench.suites.drafters.inputs import fill_shares, sweep_stream


def test_a_short_file_gives_all_it_has_and_the_others_share_the_rest():
    assert fill_shares([10, 5000], 1000) == [10, 990]
    assert fill_shares([100, 100], 50) == [25, 25]
    # 0 and 3 whole; 47 left for two files of 100: 23 and 24 (the remainder to the later one)
    assert fill_shares([0, 3, 100, 100], 50) == [0, 3, 23, 24]
    assert fill_shares([5000, 10], 1000) == [990, 10]   # file order does not matter


def test_files_holding_less_than_the_total_give_everything():
    assert fill_shares([5, 7], 100) == [5, 7]
    assert fill_shares([], 100) == []


def test_the_sweep_stream_takes_each_files_share_from_its_start_in_file_order():
    streams = [("a.jsonl", np.arange(3)), ("b.jsonl", np.arange(10, 20)), ("c.jsonl", np.zeros(0, np.int64))]
    stream, files = sweep_stream(streams, 8)
    assert stream.tolist() == [0, 1, 2, 10, 11, 12, 13, 14]
    assert files == [{"file": "a.jsonl", "tokens": 3}, {"file": "b.jsonl", "tokens": 5},
                     {"file": "c.jsonl", "tokens": 0}]
