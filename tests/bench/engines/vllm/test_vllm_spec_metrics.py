"""vLLM's own spec-decode metrics in the formats the installed vLLM writes them, read back by
`engines/vllm/spec_metrics.py`: a "SpecDecoding metrics:" line from vLLM's SpecDecodingLogging
over hand-made draft outcomes; and a user's speculative_config as vLLM's SpeculativeConfig takes
it (no engine started). The Prometheus scrapes of a real run: test_vllm_engine.py (its shared
engine). Run in the vLLM venv; skipped where vLLM does not import."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm

from vllm_tier import require_vllm  # noqa: E402

require_vllm()

from samspec_bench.bench.engines.vllm import spec_metrics as sm  # noqa: E402


def test_vllm_log_line_read_back(tmp_path):
    from vllm.v1.spec_decode.metrics import SpecDecodingLogging, SpecDecodingStats

    stats = SpecDecodingStats.new(3)
    for drafted, accepted in ((3, 2), (3, 0), (2, 1)):
        stats.observe_draft(drafted, accepted)
    logging = SpecDecodingLogging()
    logging.observe(stats)
    lines = []
    logging.log(log_fn=lambda fmt, *args: lines.append(fmt % args))
    f = tmp_path / "server.log"
    f.write_text("INFO 01-01 00:00:00 [metrics.py:1] " + lines[0] + "\n")
    r = sm.read_files([str(f)])
    (iv,) = r.intervals
    got = iv.figures()
    # 3 drafts, 8 draft tokens, 3 accepted: 37.5 %, 1 + 3/3 = 2.0; position 0 accepted in 2 drafts,
    # position 1 in 1, position 2 in none
    assert (got["spec_decode_num_drafts"], got["spec_decode_draft_tokens"], got["spec_decode_accepted_tokens"]) == (3, 8, 3)
    assert got["spec_decode_acceptance_rate"] == pytest.approx(37.5)
    assert got["spec_decode_acceptance_length"] == pytest.approx(2.0)
    assert got["spec_decode_per_position_acceptance_rates"] == pytest.approx([2 / 3, 1 / 3, 0.0], abs=1e-3)
    assert r.lines["not_understood"] == 0 and r.inconsistent == [] and "fields_not_read" not in iv.printed


def test_vllm_takes_the_users_speculative_config_as_given():
    """What the ngram engine hands vLLM is the user's config: vLLM's own SpeculativeConfig then
    applies its rule (prompt_lookup_min = max when only max is given), not the project's default 2."""
    from vllm.config import SpeculativeConfig

    from samspec_bench.bench.engines.vllm.adapter import VllmEngine

    user = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    eng = VllmEngine(lazy=True, engine_args={"speculative_config": dict(user)})
    given = eng.engine_args("ngram", 3)["speculative_config"]
    assert given == user
    built = SpeculativeConfig(**given)
    assert (built.method, built.prompt_lookup_max, built.prompt_lookup_min) == ("ngram", 4, 4)
