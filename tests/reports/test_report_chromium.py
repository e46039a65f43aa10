"""The HTML report in a real headless Chromium (Debian's `chromium`; `.ci/run` installs it):
it loads without console errors, every figure decodes and renders, nothing is fetched from
anywhere, and a screenshot is not blank."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from samspec_bench.reports.collect import collect
from samspec_bench.reports.html import render_html

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y chromium; .ci/run does it)")

# Flags checked on this project's machines (see shared/FACTS.md). Nothing may be fetched:
# every host resolves to nothing.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-extensions", "--disable-sync", "--no-first-run",
         "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND"]

# Injected into a copy of the report: records errors, then after `load` writes what it found
# (figures decoded and laid out, resources fetched) into the DOM for --dump-dom.
PROBE_HEAD = ("<script>window.__errors=[];window.addEventListener('error',function(e){"
              "window.__errors.push(String(e.message||(e.target&&e.target.outerHTML||'').slice(0,80)))},true);"
              "</script>")
PROBE_TAIL = """<script>window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img'));
  var figs = imgs.map(function (i) { var r = i.getBoundingClientRect();
    return {name: i.getAttribute('data-figure'), complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
            shownW: r.width, shownH: r.height}; });
  var res = performance.getEntriesByType('resource').map(function (e) { return e.name; })
    .filter(function (n) { return n.indexOf('data:') !== 0; });
  var data = null; try { data = JSON.parse(document.getElementById('samspec-data').textContent).format; }
  catch (e) { window.__errors.push('data: ' + e); }
  var out = document.createElement('pre'); out.id = '__probe';
  out.textContent = JSON.stringify({errors: window.__errors, figures: figs, resources: res, data: data});
  document.body.appendChild(out);
});</script>"""


def _chromium(args: list[str], tmp_path: Path, timeout: int = 90) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=timeout)


def _probe(html: str, tmp_path: Path) -> dict:
    page = tmp_path / "probe.html"
    page.write_text(html.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_TAIL + "</body>", 1),
                    encoding="utf-8")
    r = _chromium(["--virtual-time-budget=10000", "--dump-dom", page.as_uri()], tmp_path)
    m = re.search(r'<pre id="__probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"no probe output; chromium said: {r.stderr[-2000:]}"
    import html as _html
    return json.loads(_html.unescape(m.group(1)))


def _console_errors(stderr: str) -> list[str]:
    """Console messages of the page (chromium's own start-up noise, e.g. dbus, is not the page's)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> tuple[str, int]:
    """A report of several suites with PNG and SVG figures and a two-run comparison."""
    from report_runs import make_run

    root = tmp_path_factory.mktemp("runs")
    make_run(root / "a", "toy", {"speed": 2.0, "checks_pass": True}, config={"k": 3}, figures=("curve.png", "box.svg"))
    make_run(root / "b", "toy", {"speed": 3.0, "checks_pass": False}, config={"k": 5}, figures=("curve.png",))
    make_run(root / "c", "sampler", {"exact_builtins_pass": True, "negative_controls_flagged": True,
                                     "verdicts": {"samspec": "EXACT"}},
             tables={"audits": [{"sampler": "samspec", "verdict": "EXACT"}]}, figures=("tv.png", "mpl_speed.svg"))
    report = collect([root / "a", root / "b", root / "c"])
    n_figures = sum(len(r.figures) for r in report.runs)
    return render_html(report), n_figures


def test_report_loads_renders_and_fetches_nothing(report_html, tmp_path):
    html, n_figures = report_html
    assert n_figures == 5
    probe = _probe(html, tmp_path)
    assert probe["errors"] == []
    assert probe["resources"] == []
    assert probe["data"] == "samspec-bench-report/1"
    assert len(probe["figures"]) == n_figures
    for f in probe["figures"]:
        assert f["complete"] and f["w"] > 0 and f["h"] > 0, f
        assert f["shownW"] > 10 and f["shownH"] > 10, f


def test_no_console_errors_and_screenshot_not_blank(report_html, tmp_path):
    html, _ = report_html
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    shot = tmp_path / "shot.png"
    r = _chromium(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", f"--screenshot={shot}",
                   "--window-size=1200,1600", page.as_uri()], tmp_path)
    assert shot.is_file(), r.stderr[-2000:]
    assert _console_errors(r.stderr) == []
    from PIL import Image

    im = Image.open(shot).convert("RGB")
    assert im.size == (1200, 1600)
    colors = im.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50, "the screenshot is (nearly) a single colour"
    # the page fills more than the top strip: some non-white pixels below the summary
    lower = im.crop((0, 400, 1200, 1600)).convert("L")
    assert lower.getextrema()[0] < 128


def test_the_probe_can_fail(tmp_path):
    """Negative control: a corrupt figure and a script error are caught."""
    from report_runs import make_run

    d = make_run(tmp_path / "x", "toy", {"x": 1.0}, figures=("bad.png",))
    (d / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    html = render_html(collect([d]))
    html = html.replace("</main>", "<script>undefinedFunctionCall();</script></main>")
    probe = _probe(html, tmp_path)
    assert any("undefinedFunctionCall" in e for e in probe["errors"])
    (fig,) = probe["figures"]
    assert fig["w"] == 0
    page = tmp_path / "bad.html"
    page.write_text(html, encoding="utf-8")
    r = _chromium(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                  tmp_path)
    assert _console_errors(r.stderr), "chromium's console log did not show the script error"


ANSWERS_PROBE = """<script>window.addEventListener('load', function () {
  var box = function (sel) { var e = document.querySelector(sel); if (!e) return null;
    var r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
  var out = document.createElement('pre'); out.id = '__answers';
  out.textContent = JSON.stringify({answers: box('#answers'), summary: box('#summary'),
    cards: Array.prototype.map.call(document.querySelectorAll('.answer'), function (e) {
      return [e.getAttribute('data-answer'), getComputedStyle(e).borderLeftColor]; })});
  document.body.appendChild(out);
});</script>"""


def test_the_three_answers_fill_the_first_screen(tmp_path):
    """At 1200x1600 the answers (all three, badges coloured by verdict) are on screen before the
    summary and the evidence."""
    from report_runs import accept, accuracy, opeq, rollout, sampler

    runs = [opeq(tmp_path), sampler(tmp_path), accuracy(tmp_path), accept(tmp_path), rollout(tmp_path, constant=True)]
    page = tmp_path / "answers.html"
    page.write_text(render_html(collect(runs)).replace("</body>", ANSWERS_PROBE + "</body>", 1), encoding="utf-8")
    r = _chromium(["--virtual-time-budget=5000", "--window-size=1200,1600", "--dump-dom", page.as_uri()], tmp_path)
    m = re.search(r'<pre id="__answers">(.*?)</pre>', r.stdout, re.S)
    assert m, r.stderr[-2000:]
    import html as _html
    probe = json.loads(_html.unescape(m.group(1)))
    assert 0 < probe["answers"]["top"] < probe["answers"]["bottom"] <= 1600   # all of it on the first screen
    assert probe["answers"]["bottom"] <= probe["summary"]["top"]
    colours = dict(probe["cards"])
    assert list(colours) == ["lossless", "accept", "rollout"]
    assert len({colours["lossless"], colours["accept"], colours["rollout"]}) == 3   # partial, yes, unknown
