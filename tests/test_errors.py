"""Comma-list options drop nothing: an empty item ('own,,group', a leading or trailing comma,
blank text) or a value given twice ('3,3'; '3,03' as integers) is one line naming the option,
the text and the fix, exit 2 (errors.comma_list, used by every suite's list options)."""

from __future__ import annotations

import inspect
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import samspec_bench
from samspec_bench.cli import main
from samspec_bench.errors import UserError, comma_list, int_list
from samspec_bench.suites.accept import build_config as accept_config, parse_ks, parse_list
from samspec_bench.suites.accept.command import command as accept_command
from samspec_bench.suites.curves import build_config as curves_config
from samspec_bench.suites.curves.command import command as curves_command
from samspec_bench.suites.curves.config import parse_gpus
from samspec_bench.suites.op_equivalence.command import command as opeq_command
from samspec_bench.suites.op_equivalence.config import build_config as opeq_config
from samspec_bench.suites.rollout.config import RolloutConfig, source_list, strategy_list
from samspec_bench.suites.rollout.profile import parse_prompt_pads
from samspec_bench.suites.sampler.command import command as sampler_command
from samspec_bench.suites.sampler.config import build_config as sampler_config, parse_vocab


def _refused(fn, *needles) -> str:
    with pytest.raises(UserError) as exc:
        fn()
    msg = str(exc.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    return msg


def _params(command, build, argv, **over) -> dict:
    """A command's click values for `argv` (its defaults otherwise), as `build` takes them."""
    ctx = command.make_context(command.name, list(argv))
    keys = inspect.signature(build).parameters
    return {**{k: v for k, v in ctx.params.items() if k in keys}, **over}


# --- the shared helper ----------------------------------------------------------------------------

def test_comma_list_keeps_order_and_strips():
    assert comma_list(" own , group+history,corpus ", "--sources", "own,group") == ["own", "group+history", "corpus"]
    assert comma_list("3", "-k", "3,8") == ["3"]


@pytest.mark.parametrize("text", ["own,,group", ",own", "own,", "", "  ", ",", "own, ,group"])
def test_comma_list_refuses_an_empty_item(text):
    _refused(lambda: comma_list(text, "--sources", "own,group"), f"--sources {text!r}", "e.g. own,group")


@pytest.mark.parametrize("text, twice", [("3,3", "3"), ("own, own", "own"), ("a,b,a", "a")])
def test_comma_list_refuses_a_value_given_twice(text, twice):
    msg = _refused(lambda: comma_list(text, "--num-spec-tokens", "3,8"))
    assert msg == f"--num-spec-tokens {text!r}: {twice} is given twice; give each value once (e.g. 3,8)"


def test_int_list_refuses_empty_items_and_repeats_as_integers():
    assert int_list("4,8,16", "--b") == [4, 8, 16]
    _refused(lambda: int_list("3,03", "-k"), "-k '3,03'", "3 is given twice")
    _refused(lambda: int_list("4,,8", "--b"), "--b '4,,8'", "empty item")
    _refused(lambda: int_list("4,8,", "--b"), "--b '4,8,'", "empty item")
    _refused(lambda: int_list("", "--b"), "--b ''", "empty")
    _refused(lambda: int_list("4,x", "--b"), "--b '4,x'", "integers")   # unchanged checks
    _refused(lambda: int_list("0,1", "--b"), "give integers >= 1")


# --- each suite's list options ----------------------------------------------------------------------

# a JSONL file that exists (accept checks --traces with its options); the tokenizer is read when the run starts
ACCEPT = ["--traces", str(Path(samspec_bench.__file__).parent / "benchmarks" / "gsm8k_test.jsonl"), "--tokenizer",
          "nowhere"]


@pytest.mark.parametrize("argv, needles", [
    (["-k", "3,3"], ["--num-spec-tokens '3,3'", "3 is given twice"]),
    (["-k", "3,03"], ["--num-spec-tokens '3,03'", "3 is given twice"]),
    (["-k", "3,"], ["--num-spec-tokens '3,'", "empty item"]),
    (["--sources", "own,,group"], ["--sources 'own,,group'", "empty item"]),
    (["--sources", "group,own+group"], ["--sources 'group,own+group'", "own+group is group again"]),
    (["--drafter", "sam,sam"], ["--drafter 'sam,sam'", "sam is given twice"]),
    (["--strategy", "seed,seed"], ["--strategy 'seed,seed'", "seed is given twice"]),
])
def test_accept_lists(argv, needles):
    _refused(lambda: accept_config(**_params(accept_command, accept_config, ACCEPT + argv)), *needles)


def test_accept_list_parsers():
    assert parse_ks("3,5") == [3, 5] and parse_ks([3, 5]) == [3, 5]
    _refused(lambda: parse_ks([3, 3]), "--num-spec-tokens '3,3'", "3 is given twice")
    assert parse_list("own, group", "--sources") == ["own", "group"]
    ok = accept_config(**_params(accept_command, accept_config, ACCEPT + ["-k", "3,5", "--sources", "own,group"]))
    assert ok.num_spec_tokens == [3, 5] and ok.sources == ["own", "group"] and ok.strategies == []


@pytest.mark.parametrize("spec, needles", [
    ("own,,group", ["--sources 'own,,group'", "empty item"]), ("own,", ["empty item"]),
    ("group,group", ["group is given twice"]), ("history,own+history", ["own+history is history again"]),
])
def test_rollout_sources(spec, needles):
    _refused(lambda: source_list(RolloutConfig(sources=spec)), *needles)


def test_rollout_sources_and_strategies_that_pass():
    assert source_list(RolloutConfig(sources="own, group+history")) == ["own", "group+history"]
    assert strategy_list(None) == [] and strategy_list("seed") == ["seed"]
    _refused(lambda: strategy_list("seed,seed"), "--strategy 'seed,seed'", "seed is given twice")
    _refused(lambda: strategy_list("seed,,arctic"), "--strategy 'seed,,arctic'", "empty item")


@pytest.mark.parametrize("arms, needles", [("off,,threshold", ["--arms 'off,,threshold'", "empty item"]),
                                           ("off,off", ["--arms 'off,off'", "off is given twice"]),
                                           ("", ["--arms ''"])])
def test_rollout_arms(tmp_path, arms, needles):
    from samspec_bench.suites import rollout as ro
    res = CliRunner().invoke(ro.command, ["--traces", str(tmp_path / "t.jsonl"), "--tokenizer", str(tmp_path),
                                          "--arms", arms, "--output", str(tmp_path / "o")])
    assert isinstance(res.exception, UserError), res.output
    assert "\n" not in str(res.exception) and all(n in str(res.exception) for n in needles), str(res.exception)


def test_rollout_prompt_pads():
    assert parse_prompt_pads("0,256") == (0, 256) and parse_prompt_pads("") == (0,)   # blank: 0, as documented
    _refused(lambda: parse_prompt_pads("0,,256"), "--prompt-pad '0,,256'", "empty item")
    _refused(lambda: parse_prompt_pads("0,00"), "--prompt-pad '0,00'", "0 is given twice")


@pytest.mark.parametrize("drafters, needles", [("sam,,ngram", ["--drafters 'sam,,ngram'", "empty item"]),
                                               ("ngram,", ["--drafters 'ngram,'", "empty item"]),
                                               ("sam,sam", ["--drafters 'sam,sam'", "sam is given twice"])])
def test_drafters_list(tmp_path, drafters, needles):
    from samspec_bench.suites import drafters as suite
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt": "p", "response": "r"}\n')
    _refused(lambda: suite.build_config(traces=(str(trace),), tokenizer="tok", data_dir=None, drafters=drafters, k=8,
                                        max_tokens=100, sweep=[64], sweep_steps=10, repeats=1, chat_template="auto",
                                        on_error="stop", no_progress=True), *needles)


@pytest.mark.parametrize("over, needles", [
    ({"levels": "kernel,,model"}, ["--level 'kernel,,model'", "empty item"]),
    ({"levels": "kernel,kernel"}, ["--level 'kernel,kernel'", "kernel is given twice"]),
    ({"dtypes": "float32,float32"}, ["--dtype 'float32,float32'", "float32 is given twice"]),
    ({"pairs": "reference,"}, ["--pairs 'reference,'", "empty item"]),
    ({"pairs": "reference,reference"}, ["--pairs 'reference,reference'", "reference is given twice"]),
    ({"gqa": "2,2"}, ["--gqa '2,2'", "2 is given twice"]),
])
def test_op_equivalence_lists(over, needles):
    params = _params(opeq_command, opeq_config, ["--level", "kernel"], **over)
    _refused(lambda: opeq_config(**params), *needles)


def test_sampler_lists():
    base = ["--no-speed"]
    for argv, needles in [(["--builtins", "samspec,,vllm"], ["--builtins 'samspec,,vllm'", "empty item"]),
                          (["--builtins", "samspec,samspec"], ["samspec is given twice"]),
                          (["--speed-k", "1,1"], ["--speed-k '1,1'", "1 is given twice"])]:
        params = _params(sampler_command, sampler_config, base + argv)
        _refused(lambda: sampler_config(**params), *needles)
    # blank --builtins with --no-builtin: no built-in, as before
    cfg = sampler_config(**_params(sampler_command, sampler_config, ["--no-builtin", "--builtins", "", "--audit",
                                                                     "samspec"]))
    assert cfg.builtins == ()
    _refused(lambda: parse_vocab("32k,32000"), "--speed-vocab '32k,32000'", "32000 is given twice")
    _refused(lambda: parse_vocab("32000,,151936"), "empty item")


def test_curves_lists():
    _refused(lambda: curves_config(**_params(curves_command, curves_config, ["a", "b"], families="reward,,kl")),
             "--families 'reward,,kl'", "empty item")
    _refused(lambda: curves_config(**_params(curves_command, curves_config, ["a", "b"], families="kl,kl")),
             "kl is given twice")
    _refused(lambda: curves_config(**_params(curves_command, curves_config, ["a", "b"], labels="x,")),
             "--labels 'x,'", "empty item")
    _refused(lambda: parse_gpus(("a=8,,b=4",)), "--gpus 'a=8,,b=4'", "empty item")
    _refused(lambda: parse_gpus(("a=8", "a=4")), "--gpus a: the run is given twice (a=8 and a=4)")
    assert parse_gpus(("a=8,b=4",)) == {"a": 8, "b": 4}


# --- the command line: exit 2, one line -------------------------------------------------------------

_WRAPPER = click.Command("samspec-bench", add_help_option=False,
                         context_settings={"ignore_unknown_options": True},
                         params=[click.Argument(["argv"], nargs=-1, type=click.UNPROCESSED)],
                         callback=lambda argv: main(list(argv)))


@pytest.mark.parametrize("argv, needle", [
    (["accept", *ACCEPT, "-k", "3,3"],
     "error: --num-spec-tokens '3,3': 3 is given twice; give each value once (e.g. 3,8)"),
    (["accept", *ACCEPT, "--sources", "own,,group"], "error: --sources 'own,,group': an empty item"),
    (["drafters", *ACCEPT, "--sweep", "64,64"], "error: --sweep '64,64': 64 is given twice"),
    (["sampler", "--no-speed", "--builtins", "samspec,"], "error: --builtins 'samspec,': an empty item"),
    (["op-equivalence", "--level", "kernel", "--dtype", "float32,float32"], "error: --dtype 'float32,float32'"),
])
def test_the_cli_refuses_in_one_line_with_exit_2(argv, needle):
    res = CliRunner().invoke(_WRAPPER, argv)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(needle), res.stderr
