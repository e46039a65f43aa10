"""The vLLM engine's arguments: `--engine-arg` parsing, the speculation policies a generate
call can run inside vLLM, and what the engine asks of vLLM for a GPU run, checked before any
engine starts: the drafter methods get synchronous scheduling (a user's async_scheduling=True and the V2 model
runner are one-line errors for the methods vLLM refuses them with), per-request metrics only
where the installed vLLM has that argument, dtype auto is float32 on CPU and vLLM's auto
elsewhere, SAM is refused with the reason on a vLLM without custom_class (before 0.22), and
requests that can come within k tokens of max_model_len are found. The pure parts run in every
venv; those that build the engine's arguments need vLLM (its venv)."""

from __future__ import annotations

import pytest

from samspec_bench.bench.engines.base import Request, SamplingParams
from samspec_bench.bench.engines.vllm import engine_args as ea
from samspec_bench.bench.engines.vllm import platform
from samspec_bench.bench.engines.vllm.adapter import _policy_inside_vllm, parse_engine_args
from samspec_bench.bench.engines.vllm.arm import near_length_limit
from samspec_bench.bench.policies import SpecPolicy, make_policy
from samspec_bench.errors import UserError


def test_parse_engine_args(tmp_path):
    f = tmp_path / "a.json"
    f.write_text('{"tensor_parallel_size": 2, "max_num_seqs": 8}')
    got = parse_engine_args(["max-num-seqs=64", "dtype=bfloat16", "enable_prefix_caching=false"], str(f))
    assert got == {"tensor_parallel_size": 2, "max_num_seqs": 64, "dtype": "bfloat16", "enable_prefix_caching": False}
    with pytest.raises(UserError, match="key=value"):
        parse_engine_args(["max_num_seqs"])
    f.write_text("[1]")
    with pytest.raises(UserError, match="JSON object"):
        parse_engine_args([], str(f))


def test_vllm_engine_policies():
    """Which speculation policies VllmEngine.generate runs inside vLLM (no vLLM needed)."""
    assert _policy_inside_vllm(make_policy("threshold", 4), "sam") == ("sam", 4)
    assert _policy_inside_vllm(make_policy("always"), "sam") == ("sam", None)
    assert _policy_inside_vllm(SpecPolicy(), "sam") == ("sam", None)
    assert _policy_inside_vllm(make_policy("off"), "sam") == (None, None)
    assert _policy_inside_vllm(make_policy("threshold", 4), None) == (None, None)
    with pytest.raises(UserError, match="threshold"):
        _policy_inside_vllm(make_policy("threshold", 4), "ngram")
    with pytest.raises(UserError, match="spec_policy"):
        _policy_inside_vllm(lambda state: state.num_running < 3, "sam")


@pytest.mark.parametrize("method", ["sam", "ngram", "suffix"])
@pytest.mark.parametrize("value", [True, "true", 1])
def test_async_scheduling_refused_for_drafters(method, value):
    with pytest.raises(UserError, match="async_scheduling") as exc:
        ea.check_scheduling({"async_scheduling": value}, method)
    assert "\n" not in str(exc.value) and method in str(exc.value)


def test_async_scheduling_allowed_without_drafter_or_off():
    ea.check_scheduling({"async_scheduling": True}, None)   # a plain engine may run async
    for value in (False, None, "false", 0):
        ea.check_scheduling({"async_scheduling": value}, "sam")
    ea.check_scheduling({}, "sam")


@pytest.mark.parametrize("method,refused", [("sam", True), ("suffix", True), ("ngram", False)])
def test_v2_model_runner(monkeypatch, method, refused):
    monkeypatch.setenv(ea.V2_RUNNER_ENV, "1")
    if refused:
        with pytest.raises(UserError, match=f"{ea.V2_RUNNER_ENV}=1.*{method}"):
            ea.check_scheduling({}, method)
    else:
        ea.check_scheduling({}, method)
    monkeypatch.setenv(ea.V2_RUNNER_ENV, "0")
    ea.check_scheduling({}, method)


@pytest.mark.parametrize("cpu,given,want", [(True, "auto", "float32"), (True, None, "float32"),
                                            (False, "auto", "auto"), (False, None, "auto"),
                                            (False, "float32", "float32"), (True, "bfloat16", "bfloat16")])
def test_engine_dtype(monkeypatch, cpu, given, want):
    monkeypatch.setattr(ea, "on_cpu", lambda: cpu)
    assert ea.engine_dtype(given) == want


def test_sam_refused_without_custom_class(monkeypatch):
    monkeypatch.setattr(platform.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(platform, "versions", lambda: {"vllm_module": "0.12.0"})
    reason = platform.custom_class_missing()
    assert reason.startswith("vLLM 0.12.0 has no custom_class") and "0.22" in reason and "ngram" in reason
    assert "\n" not in reason
    monkeypatch.setattr(platform.importlib.util, "find_spec", lambda name: object())
    assert platform.custom_class_missing() is None


def test_requests_near_max_model_len():
    """The runner drafts only while the longest sequence plus k fits: prompt + max_tokens + k + 1
    <= max_model_len keeps a request clear of it."""
    reqs = [Request("fits", [1] * 10, SamplingParams(max_tokens=86)),     # 10 + 86 + 3 + 1 = 100
            Request("near", [1] * 10, SamplingParams(max_tokens=87)),
            Request("long", [1] * 90, SamplingParams(max_tokens=50))]
    assert [r.req_id for r in near_length_limit(reqs, 3, 100)] == ["near", "long"]
    assert near_length_limit(reqs[:1], 3, 100) == []


@pytest.fixture
def lazy_engine():
    from vllm_tier import require_vllm

    require_vllm()
    from samspec_bench.bench.engines.vllm.adapter import VllmEngine

    return VllmEngine

def test_engine_args_for_a_drafter(lazy_engine, monkeypatch):
    """The arguments the engine gives vLLM (nothing started): sync scheduling and detailed
    per-request metrics for a drafter where the installed vLLM has those arguments; not
    for the plain engine; the dtype resolved; async scheduling and a vLLM without custom_class
    refused for SAM."""
    eng = lazy_engine(lazy=True)
    args = eng.engine_args("sam", 3)
    assert args["async_scheduling"] is False and args["per_request_spec_decode_metrics"] == "detailed"
    assert args["speculative_config"]["method"] == "custom_class"
    assert args["dtype"] == ("float32" if platform.on_cpu() else "auto")
    plain = eng.engine_args(None, 0)
    assert "async_scheduling" not in plain and "speculative_config" not in plain
    real = platform.engine_arg_exists
    monkeypatch.setattr("samspec_bench.bench.engines.vllm.adapter.engine_arg_exists",
                        lambda name: name != "per_request_spec_decode_metrics" and real(name))
    assert "per_request_spec_decode_metrics" not in eng.engine_args("ngram", 3)   # vLLM 0.22 / 0.23
    with pytest.raises(UserError, match="async_scheduling=True"):
        lazy_engine(lazy=True, engine_args={"async_scheduling": True}).engine_args("sam", 3)
    monkeypatch.setattr("samspec_bench.bench.engines.vllm.adapter.custom_class_missing", lambda: "vLLM 0.12.0 has no")
    with pytest.raises(UserError, match="vLLM 0.12.0"):
        eng.engine_args("sam", 3)
    assert eng.engine_args("ngram", 3)["speculative_config"]["method"] == "ngram"


# --- a user's speculative_config and vLLM's own option names ------------------------------------------

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
ENGINE_FIELDS = frozenset({"max_num_seqs", "max_model_len", "enforce_eager", "enable_prefix_caching", "dtype",
                           "speculative_config", "tensor_parallel_size"})
SPEC_FIELDS = frozenset({"method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"})


def test_speculative_config_is_parsed_as_a_json_object():
    text = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'
    assert parse_engine_args([f"speculative_config={text}"]) == {"speculative_config": NGRAM}
    assert parse_engine_args(["max_num_seqs=8"], speculative_config=text) == {"max_num_seqs": 8,
                                                                               "speculative_config": NGRAM}
    with pytest.raises(UserError, match="both given"):
        parse_engine_args([f"speculative_config={text}"], speculative_config=text)
    for bad, says in (("{method: ngram}", "not JSON"), ("[1, 2]", "JSON object"), ("ngram", "not JSON")):
        with pytest.raises(UserError, match=says) as e:
            parse_engine_args([], speculative_config=bad)
        assert "\n" not in str(e.value)


def test_wrong_names_get_the_nearest_real_one():
    with pytest.raises(UserError, match=r"'max_num_seq' .*did you mean max_num_seqs\?"):
        ea.check_engine_args({"max_num_seq": 8}, ENGINE_FIELDS, SPEC_FIELDS)
    with pytest.raises(UserError, match=r"speculative_config key 'prompt_lookup_maxx' .*did you mean prompt_lookup_max"):
        ea.check_engine_args({"speculative_config": {**NGRAM, "prompt_lookup_maxx": 3}}, ENGINE_FIELDS, SPEC_FIELDS)
    ea.check_engine_args({"speculative_config": NGRAM, "max_num_seqs": 8}, ENGINE_FIELDS, SPEC_FIELDS)


@pytest.mark.parametrize("cfg, method", [(NGRAM, "ngram"), ({"model": "[ngram]"}, "ngram"),
                                         ({"method": "suffix"}, "suffix"),
                                         ({"method": "custom_class", "model": ea.CLASS_PATH}, "sam"),
                                         ({"model": "samspec_bench.bench.engines.vllm.drafter.SamProposer"}, "sam")])
def test_user_method(cfg, method):
    assert ea.user_method(cfg) == method


@pytest.mark.parametrize("cfg, says", [({"method": "eagle3", "model": "x"}, "eagle3"),
                                       ({"method": "custom_class", "model": "my.Proposer"}, "my.Proposer")])
def test_methods_not_measured_here_are_named(cfg, says):
    with pytest.raises(UserError, match=says) as e:
        ea.user_method(cfg)
    assert "\n" not in str(e.value)


def test_the_users_config_is_run_as_given():
    # vLLM's own defaults for what the user left out (no prompt_lookup_min of ours), k filled in where absent
    assert ea.speculative_config("ngram", 4, None, NGRAM) == NGRAM
    no_k = {"method": "ngram", "prompt_lookup_max": 4}
    assert ea.speculative_config("ngram", 3, None, no_k) == {**no_k, "num_speculative_tokens": 3}
    with pytest.raises(UserError, match="num_speculative_tokens=4 but this run drafts k=3"):
        ea.speculative_config("ngram", 3, None, NGRAM)
    # another method's engine keeps its own configuration; an arm's defining option still wins
    assert ea.speculative_config("sam", 4, None, NGRAM)["method"] == "custom_class"
    suffix = ea.speculative_config("suffix", 3, {"suffix_decoding_max_cached_requests": 0},
                                   {"method": "suffix", "suffix_decoding_max_cached_requests": 100})
    assert suffix["suffix_decoding_max_cached_requests"] == 0


def test_vllms_own_options_become_engine_arguments():
    got = ea.cli_engine_args(["--max-model-len", "2048", "--enforce-eager", "--no-enable-prefix-caching",
                              "--tensor-parallel-size=2", "--dtype", "bfloat16"], command="compare",
                             known=ENGINE_FIELDS)
    assert got == {"max_model_len": 2048, "enforce_eager": True, "enable_prefix_caching": False,
                   "tensor_parallel_size": 2, "dtype": "bfloat16"}
    with pytest.raises(UserError, match=r"--request-rate: no arrival rate"):
        ea.cli_engine_args(["--request-rate", "4"], command="compare", refused={"--request-rate": "no arrival rate"},
                           known=ENGINE_FIELDS)
    with pytest.raises(UserError, match=r"--num-prompt: not an option .*did you mean --num-prompts\?"):
        ea.cli_engine_args(["--num-prompt", "4"], command="compare", own=("--num-prompts",), known=ENGINE_FIELDS)
    with pytest.raises(UserError, match="long names"):
        ea.cli_engine_args(["-tp", "2"], command="compare", known=ENGINE_FIELDS)


def test_vllm_user_speculative_config_checked_against_the_installed_vllm(lazy_engine):
    """The installed vLLM's fields decide (a planted wrong key gets the real one); the ngram
    engine is given the user's config exactly, the SAM engine its own."""
    with pytest.raises(UserError, match=r"'num_speculative_token' .*did you mean num_speculative_tokens\?"):
        lazy_engine(lazy=True, engine_args={"speculative_config": {"method": "ngram", "num_speculative_token": 4}})
    with pytest.raises(UserError, match=r"'max_num_seq' .*did you mean max_num_seqs\?"):
        lazy_engine(lazy=True, engine_args={"max_num_seq": 4})
    eng = lazy_engine(lazy=True, engine_args={"speculative_config": dict(NGRAM), "max_num_seqs": 8})
    args = eng.engine_args("ngram", 4)
    assert args["speculative_config"] == NGRAM and args["max_num_seqs"] == 8
    assert eng.engine_args("sam", 4)["speculative_config"]["method"] == "custom_class"
