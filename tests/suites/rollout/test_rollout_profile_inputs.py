"""A `rollout profile` JSON (format 3) given to `--step-model` with values the writer never
writes: a non-finite or negative intercept or coefficient, a coefficient name it does not know,
a number written as text, a model of an unknown format. Each is refused when the profile is
read (`read_profile`), as one line naming --step-model, the file and the fix; `rollout` exits 2."""

import json

import numpy as np
import pytest

from samspec_bench import cli
from samspec_bench.bench.simulation.fitted_step_model import FEATURES, fit_from_steps
from samspec_bench.errors import UserError
from samspec_bench.suites.rollout.profile import profile_document, read_profile, write_profile


def _table(n=40, seed=3):
    rng = np.random.default_rng(seed)
    run = rng.integers(1, 9, n)
    drafted = run * 3 * rng.integers(0, 2, n)
    prefill = np.where(rng.random(n) < 0.2, 64, 0)
    ctx = run * rng.integers(10, 400, n)
    return {"time_s": 2e-3 + 1e-3 * run + 2e-4 * drafted + 1e-5 * prefill + 1e-7 * ctx, "num_running": run,
            "num_scheduled_tokens": run + drafted + prefill, "num_prefill_tokens": prefill, "num_drafted": drafted,
            "num_decode_reqs": run, "speculative": drafted > 0, "context_tokens": ctx}


def _profile(tmp_path, edit=None, name="prof.json"):
    """A profile written by the code's own writer, then `edit(doc["model"])` applied to it."""
    tables = [_table()]
    meta = {"engine": {"name": "reference", "version": "test", "device": "cpu", "model": "m", "dtype": "float32",
                       "tp": 1, "threads": 1}, "grid": {"batch_sizes": [8], "ks": [3]}}
    p = write_profile(tmp_path / name, profile_document(fit_from_steps(tables, source="synthetic"), tables, meta))
    if edit is not None:
        doc = json.loads(p.read_text())
        edit(doc["model"])
        p.write_text(json.dumps(doc))   # NaN / Infinity as Python's json writes them
    return p


def _set(**kv):
    def edit(md):
        for k, v in kv.items():
            if k == "intercept":
                md["intercept"] = v
            else:
                md["coef"][k] = v
    return edit


def test_a_profile_from_the_writer_reads_as_written(tmp_path):
    p = _profile(tmp_path)
    model, meta = read_profile(p)
    md = json.loads(p.read_text())["model"]
    assert model.intercept == md["intercept"] and model.coef == md["coef"] and meta["engine"]["name"] == "reference"


@pytest.mark.parametrize("edit, says", [
    (_set(intercept=float("nan")), "intercept=nan is not a finite number"),
    (_set(intercept=float("inf")), "intercept=inf is not a finite number"),
    (_set(draft_tokens=float("nan")), "draft_tokens=nan is not a finite number"),
    (_set(intercept=-5.0, decode_tokens=-1.0), "negative coefficient(s) intercept=-5, decode_tokens=-1"),
    (_set(intercept=0.0, running=0.0, decode_tokens=0.0), "would cost 0 s"),
    (_set(bogus_feature=5.0), "unknown coefficient(s) 'bogus_feature'"),
    (_set(intercept="0.01"), "intercept='0.01' is not a number"),
    (_set(running="fast"), "running='fast' is not a number"),
    (_set(running=True), "running=True is not a number"),
    (lambda md: md.update(format=9), "format 9"),
    (lambda md: md.pop("intercept"), "no intercept"),
    (lambda md: md.update(coef=[1, 2]), "coef is not an object"),
    (lambda md: md["fit"]["valid_range"].update(running=[float("nan"), 8.0]),
     "fit.valid_range running=[nan, 8.0]: a feature's range is [lo, hi]"),
    (lambda md: md["fit"]["valid_range"].update(running=[9, 1]), "fit.valid_range running=[9, 1]"),
    (lambda md: md["fit"].update(valid_range=[1, 2]), "fit.valid_range is not an object"),
    (lambda md: md["fit"].update(verify_widths={"3": "many"}), "fit.verify_widths '3': 'many'"),
    (lambda md: md["fit"].update(verify_widths=[3]), "fit.verify_widths is not an object"),
])
def test_an_impossible_or_edited_model_is_refused_when_the_profile_is_read(tmp_path, edit, says):
    p = _profile(tmp_path, edit)
    with pytest.raises(UserError) as e:
        read_profile(p)
    msg = str(e.value)
    assert says in msg and msg.startswith(f"--step-model {p}:") and "samspec-bench rollout profile" in msg
    assert "\n" not in msg


def test_a_profile_without_a_model_is_refused(tmp_path):
    p = _profile(tmp_path)
    doc = json.loads(p.read_text())
    del doc["model"]
    p.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="without a model object; write it again with `samspec-bench rollout profile`"):
        read_profile(p)


def test_an_unknown_coefficient_names_the_known_ones(tmp_path):
    p = _profile(tmp_path, _set(bogus_feature=5.0))
    with pytest.raises(UserError) as e:
        read_profile(p)
    assert "known: " + ", ".join(FEATURES) in str(e.value)


@pytest.mark.parametrize("edit, says", [
    (_set(intercept=float("nan")), "intercept=nan is not a finite number"),
    (_set(intercept=float("inf")), "intercept=inf is not a finite number"),
    (_set(draft_tokens=float("nan")), "draft_tokens=nan is not a finite number"),
    (_set(intercept=-5.0, decode_tokens=-1.0), "negative coefficient"),
])
def test_rollout_exits_2_on_such_a_profile_before_it_runs(shared_data, tmp_path, capsys, edit, says):
    p = _profile(tmp_path, edit)
    with pytest.raises(SystemExit) as e:
        cli.main(["rollout", "--engine", "replay", "--data-dir", str(shared_data), "--prompts", "2",
                  "--step-model", str(p), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and f"--step-model {p}: " in err and says in err
    assert not (tmp_path / "out").exists()
