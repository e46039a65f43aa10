"""sampler: options that would change nothing are refused (nothing silent).

The --speed-* grid with --no-speed, --audit-timeout without an --audit module:function (the
built-ins run in this process, without a limit), --builtins with --no-builtin, and a comma list
for --max-vocab / --large-vocab (only its first value was used) used to be accepted and ignored
(exit 0, identical results); each is a one-line error naming the option, exit 2.
"""

from __future__ import annotations

import pytest

from samspec_bench.cli import main
from samspec_bench.errors import UserError
from samspec_bench.suites.run.config_options import suite_params
from samspec_bench.suites.run.plan import Ctx, plan_sampler
from samspec_bench.suites.sampler import build_config, command

BASE = ["--builtins", "samspec", "--samples", "100", "--max-vocab", "64", "--no-speed", "--device", "cpu"]


def _over(extra: list[str]) -> list[str]:
    """BASE with the options `extra` gives again left out (an option given twice is refused)."""
    given = {a for a in extra if a.startswith("--")}
    out, i = [], 0
    while i < len(BASE):
        n = 1 if BASE[i] == "--no-speed" else 2
        if BASE[i] not in given:
            out += BASE[i:i + n]
        i += n
    return out + extra


def _config(argv: list[str]):
    ctx = command.make_context("sampler", list(argv))
    return build_config(**{k: v for k, v in ctx.params.items() if k not in ("output", "json_path", "resume")})


@pytest.mark.parametrize("extra, named", [
    (["--speed-batch", "7"], "--speed-batch"), (["--speed-k", "2"], "--speed-k"),
    (["--speed-vocab", "32k"], "--speed-vocab"), (["--speed-reps", "5"], "--speed-reps"),
    (["--speed-min-time", "1"], "--speed-min-time"), (["--speed-threads", "2"], "--speed-threads"),
])
def test_speed_options_with_no_speed_are_refused(extra, named, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["sampler", "--output", str(tmp_path / "out"), *BASE, *extra])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err == (f"error: {named} with --no-speed: the speed benchmark does not run; drop it "
                                         "or --no-speed")
    assert not (tmp_path / "out").exists()


def test_several_speed_options_are_named_together():
    with pytest.raises(UserError, match=r"^--speed-batch, --speed-k with --no-speed: .*drop them or --no-speed$"):
        _config(BASE + ["--speed-batch", "7", "--speed-k", "2"])


@pytest.mark.parametrize("audits", [[], ["--audit", "samspec"]], ids=["built-ins only", "a built-in by --audit"])
def test_audit_timeout_without_a_module_function_audit_is_refused(audits):
    with pytest.raises(UserError, match=r"^--audit-timeout 5: limits a sampler given as --audit module:function .*"
                                        r"add --audit module:function or drop --audit-timeout$"):
        _config(BASE + audits + ["--audit-timeout", "5"])


def test_builtins_with_no_builtin_is_refused():
    with pytest.raises(UserError, match=r"^--builtins token-rule with --no-builtin: no built-in is audited"):
        _config(_over(["--no-builtin", "--audit", "samspec", "--builtins", "token-rule"]))


@pytest.mark.parametrize("option", ["--max-vocab", "--large-vocab"])
def test_a_vocabulary_list_where_one_size_is_used_is_refused(option):
    with pytest.raises(UserError, match=rf"^{option} '151936,32k': takes one vocabulary size, got 2; give one "
                                        rf"\(e.g. {option} 151936\)$"):
        _config(_over([option, "151936,32k"]))


def test_the_legitimate_combinations_still_build():
    cfg = _config(BASE)
    assert (cfg.speed, cfg.builtins, cfg.max_vocab) == (False, ("samspec",), 64)
    # the speed grid with the speed benchmark
    cfg = _config(["--speed-batch", "1,2", "--speed-k", "2", "--speed-vocab", "64", "--speed-threads", "2"])
    assert (cfg.speed_batches, cfg.speed_ks, cfg.speed_vocabs, cfg.speed_threads) == ((1, 2), (2,), (64,), 2)
    # --audit-timeout with a module:function sampler (one of the built-ins' own targets counts)
    cfg = _config(BASE + ["--audit", "samspec_bench.bench.rejection:samspec_sampler", "--audit-timeout", "5"])
    assert cfg.audit_timeout == 5
    # --no-builtin with the default --builtins, or a blank one (no built-in either way)
    assert _config(BASE[2:] + ["--no-builtin", "--audit", "samspec"]).builtin is False
    assert _config(BASE[2:] + ["--no-builtin", "--builtins", "", "--audit", "samspec"]).builtins == ()
    # one vocabulary, by name too
    assert (_config(BASE + ["--large-vocab", "qwen3"]).large_vocab, _config(_over(["--max-vocab", "32k"])).max_vocab) \
        == (151936, 32000)


def test_the_run_step_drops_its_speed_grid_when_the_config_turns_speed_off(tmp_path):
    """`samspec-bench run` with `sampler: {speed: false}` must not hand the suite the grid it
    would now refuse; with speed on (the default) the small grid is kept."""
    for section, speed_grid in (({}, True), ({"speed": False}, False), ({"no-speed": False}, False),
                                ({"speed": True}, True)):
        ctx = Ctx(out=tmp_path, model="m", engine=None, data_dir=None, sections={"sampler": section},
                  state={"steps": {}, "threads": {"threads": 1}})
        opts = {**plan_sampler(ctx).options, **section}
        assert ("speed-batch" in opts) is speed_grid
        cfg = build_config(**suite_params(command, "sampler", opts))   # no refusal
        assert cfg.speed is speed_grid
