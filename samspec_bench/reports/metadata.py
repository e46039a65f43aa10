"""A run's metadata as the report shows it: what ran, where, on what model and data."""

from __future__ import annotations

from typing import Any

from samspec_bench.reports.model import Run


def data_files(result: dict) -> list[tuple[str, str]]:
    """(file, sha256) of every input file the result records, wherever the suite put them."""
    found: dict[str, str] = {}

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            sha = obj.get("sha256")
            name = next((obj[k] for k in ("file", "path", "name") if isinstance(obj.get(k), str)), None)
            if isinstance(sha, str) and name:
                found.setdefault(name, sha)
            for k, v in obj.items():
                if k in ("data_files", "files_sha256") and isinstance(v, dict):
                    for f, h in v.items():
                        if isinstance(h, str):
                            found.setdefault(str(f), h)
                else:
                    walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk({k: v for k, v in result.items() if k not in ("tables", "metrics", "environment")})
    return sorted(found.items())


def model_of(result: dict) -> str | None:
    """The model a run used, where the suite records one."""
    cfg = result.get("config") or {}
    for src in (cfg, result.get("engine") or {}, result):
        if isinstance(src, dict) and isinstance(src.get("model"), str):
            return src["model"]
    ml = result.get("model_level")
    if isinstance(ml, dict):
        for v in ml.values():
            if isinstance(v, dict) and isinstance((v.get("engine") or {}).get("model"), str):
                return v["engine"]["model"]
    eng = result.get("engine")
    if isinstance(eng, dict) and eng.get("name"):
        return f"none ({eng['name']} engine)"
    return None


def metadata_rows(run: Run) -> list[tuple[str, str]]:
    """(field, text) of a run's metadata: what ran, where, on what."""
    r = run.result
    env = r.get("environment") or {}
    pk = env.get("packages") or {}
    argv = env.get("argv")
    rows = [
        ("directory", str(run.path)),
        ("suite", run.suite),
        ("created", str(r.get("created"))),
        ("git revision", str(env.get("git_revision"))),
        ("samspec-bench", str(pk.get("samspec-bench"))),
        ("model", str(model_of(r))),
        ("python", str(env.get("python"))),
        ("platform", str(env.get("platform"))),
        ("machine", f"{env.get('machine')}, {env.get('cpu_count')} CPUs"
                    + (f", {env.get('processor')}" if env.get("processor") else "")),
        ("packages", ", ".join(f"{k} {v}" for k, v in sorted(pk.items()))),
        ("command", " ".join(str(a) for a in argv) if isinstance(argv, list) else str(argv)),
    ]
    for key in ("accelerator", "gpu"):
        if env.get(key):
            rows.append((key, str(env[key])))
    if env.get("device"):
        rows.append(("device", device_text(env["device"])))
    return rows


_SOFTWARE = (("torch", "torch"), ("cuda", "CUDA"), ("hip", "HIP"), ("driver", "driver"), ("torch_npu", "torch-npu"),
             ("cann", "CANN"))


def device_text(d: Any) -> str:
    """environment.device (results.py) in one line: the device, its name, the software that
    drives it, and whether the run used it."""
    if not isinstance(d, dict):
        return str(d)
    text = str(d.get("device"))
    if d.get("name"):
        text += f" ({d['name']}" + (f", {d['memory_gib']:g} GiB" if isinstance(d.get("memory_gib"), (int, float))
                                    else "") + ")"
    soft = [f"{label} {d[k]}" for k, label in _SOFTWARE if d.get(k)]
    if d.get("torch_threads"):
        soft.append(f"{d['torch_threads']} torch thread(s)")
    if soft:
        text += "; " + ", ".join(soft)
    if d.get("chosen_by"):
        text += f"; chosen by {d['chosen_by']}"
    if d.get("used") is False:
        text += f"; not used: {d.get('why') or 'nothing ran on it'}"
    model_level = d.get("model_level")
    if isinstance(model_level, dict):
        text += f"; model level: {device_text(model_level)}"
    return text
