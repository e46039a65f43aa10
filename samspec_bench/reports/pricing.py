"""How a rollout result's times were made, for the report's answers: measured on an engine,
modelled by a named step model (a fitted profile of which engine, or the roofline model of
which hardware), or counted in decode steps (never shown as time); the configuration they
stand for and the arms' extrapolation flags. Reads `units` / `priced_by` / `measured` and, for
older results, infers them from the step model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from samspec_bench.reports.metadata import device_text
from samspec_bench.reports.model import Run
from samspec_bench.reports.values import is_number


def pricing(result: dict) -> dict:
    """How a rollout result's times were made: {"units": "s" | "steps", "kind", "source",
    "measured", "describe"}. Reads the explicit `units` / `priced_by` / `measured` metrics; an
    older result without them was priced by a constant 1-second step model when its step model's
    fit source is "constant": its "seconds" are step counts."""
    m = result.get("metrics") or {}
    sm = m.get("step_model") if isinstance(m.get("step_model"), dict) else {}
    pb = m.get("priced_by") if isinstance(m.get("priced_by"), dict) else {}
    fitted_on = m.get("step_model_fitted_on")
    constant = ((sm.get("fit") or {}).get("source") == "constant" or sm.get("kind") == "constant-steps"
                or pb.get("kind") == "constant-steps" or str(fitted_on or "").startswith("none"))
    u = str(m.get("units") or "").lower()
    units = "steps" if u.startswith("step") else "s" if u in ("s", "sec") or u.startswith("second") else \
        "steps" if constant else "s"
    kind = pb.get("kind") or sm.get("kind") or ("constant-steps" if constant else "fitted-profile")
    source = None if kind == "constant-steps" else pb.get("source") or pb.get("spec") or sm.get("spec") or \
        (fitted_on if isinstance(fitted_on, str) else None) or (sm.get("fit") or {}).get("source")
    measured = m.get("measured")
    if not isinstance(measured, bool):
        measured = (result.get("config") or {}).get("engine") in ("reference", "vllm")
    return {"units": units, "kind": kind, "source": source, "measured": measured, "describe": pb or sm}


def _name(x: Any) -> str | None:
    if isinstance(x, dict):
        return next((x[k] for k in ("name", "id", "short", "model", "hardware", "source") if isinstance(x.get(k), str)),
                    None)
    return str(x) if x not in (None, "") else None


def hardware(result: dict, p: dict) -> str:
    """What the times stand for: the measuring machine, or the priced hardware."""
    env = result.get("environment") or {}
    cfg = result.get("config") or {}
    d = p["describe"]
    if p["measured"]:
        acc = env.get("accelerator") or env.get("gpu") or env.get("device")
        return (f"measured on the {cfg.get('engine')} engine, model {cfg.get('model')}, "
                f"{acc or (str(env.get('machine')) + ', ' + str(env.get('cpu_count')) + ' CPUs')}")
    if p["units"] == "steps":
        return "no hardware: step counts"
    if p["kind"] == "roofline":
        hw, model = _name(d.get("hardware")), _name(d.get("model"))
        spec = str(p["source"] or "")
        if hw is None and "hardware=" in spec:
            hw = spec.split("hardware=", 1)[1].split(",", 1)[0]
        return (f"modelled by the roofline step model: {hw or '?'}" + (f", TP {d['tp']}" if d.get("tp") else "")
                + (f", {model}" if model else "") + (f", {d['dtype']}" if d.get("dtype") else ""))
    eng = d.get("engine") if isinstance(d.get("engine"), dict) else {}
    what = ", ".join(str(eng[k]) for k in ("name", "version", "device", "model", "dtype") if eng.get(k))
    return f"modelled by a step-time profile measured on {what}" if what else \
        f"modelled by a step-time profile ({(d.get('fit') or {}).get('source') or 'its engine not recorded'})"


def config_line(result: dict) -> str:
    cfg, w = result.get("config") or {}, (result.get("metrics") or {}).get("workload") or {}
    bits = [f"preset {cfg['preset']}" if cfg.get("preset") else None,
            f"{w['prompts']} prompts x {w.get('group_size') or '?'}" if is_number(w.get("prompts")) else None,
            f"trace {Path(str(cfg['traces'])).name}" if cfg.get("engine") == "replay" and cfg.get("traces") else None,
            f"lengths {cfg['length_dist']}" + (f" (a prompt's responses sharing {w['length_group_share']:.2f} of their "
                                               "log-length variance)" if is_number(w.get("length_group_share"))
                                               else "")
            + (f", {w['length_rank_share']:g} of each length's rank from its recorded response"
               if w.get("length_rank_share") else "") if cfg.get("length_dist") else None]
    bits = [b for b in bits if b]
    for key, label in (("max_num_seqs", "max_num_seqs"), ("dp", "DP"), ("max_response_len", "max response")):
        if is_number(cfg.get(key)):
            bits.append(f"{label} {cfg[key]:,}")
    return ", ".join(bits)


def extrapolation(a: dict):
    """The arm's extrapolation flags: its step model's (replay) or its simulation's (measured)."""
    return a.get("step_model_extrapolation") or (a.get("sim_fit") or {}).get("extrapolation")


def extrapolated(a: dict) -> str:
    x = extrapolation(a)
    return "EXTRAPOLATED beyond the profiled range" + (f" ({', '.join(map(str, x))})" if isinstance(x, dict) else "")


def figure_basis(run: Run) -> str:
    """What a run's figures stand for, for their captions: measured (on which device), modelled
    (by which step model), or step counts; or that the run used no device of this machine."""
    r = run.result
    env = r.get("environment") if isinstance(r.get("environment"), dict) else {}
    dev = env.get("device")
    if run.suite == "rollout":
        p = pricing(r)
        if p["units"] == "steps":
            return "simulated: decode-step counts, not time (no step model)"
        if not p["measured"]:
            return hardware(r, p)   # "modelled by ..."
    if isinstance(dev, dict) and dev.get("used") is False:
        return f"no device of this machine used: {dev.get('why') or 'nothing ran on it'}"
    return f"measured on {device_text(dev)}" if dev else "measured; device not recorded"
