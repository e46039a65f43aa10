"""The vLLM drafter (`SamProposer`) against a simulated vLLM persistent batch: rows move when
the batch is condensed, new requests take free rows, requests finish at different lengths.
No vLLM needed: these run in every venv. The same proposer inside a real vLLM engine is
tested in test_vllm_engine.py."""

from __future__ import annotations

import numpy as np
import pytest

from samspec_bench.bench.vllm_proposer import EXTRA_KEY, SamProposer, SamWorkerExtension
from samspec_bench.bench.vllm_proposer import proposer as proposer_mod
from samspec_bench.sam import SamDrafter
from samspec_bench.sam.draft_length import DEFAULT_COST

K = 4
MAX_LEN = 512


@pytest.fixture(autouse=True)
def replay_default_length(monkeypatch):
    """The simulations check drafts against a replay SamDrafter: the proposer's own default
    (cost fitted from step times, real ones here) is tested alone below."""
    monkeypatch.setattr(proposer_mod, "ENGINE_LENGTH", None)


class _Params:
    def __init__(self, extra):
        self.extra_args = extra


class _Req:
    def __init__(self, extra):
        self.sampling_params = _Params(extra)


class _Batch:
    def __init__(self):
        self.req_ids: list[str] = []
        self.req_id_to_index: dict[str, int] = {}
        self.num_prompt_tokens = np.zeros(64, dtype=np.int32)


class FakeRunner:
    """What SamProposer reads from vLLM's model runner: input_batch and requests."""

    speculative_config = None

    def __init__(self):
        self.input_batch = _Batch()
        self.requests: dict[str, _Req] = {}

    def _update_states(self, *_):  # marks the class as a model runner
        pass


def _texts(rng, n):
    """n (prompt, continuation) pairs with repeats inside, so SAM has something to draft."""
    out = []
    for _ in range(n):
        motif = rng.integers(0, 50, size=int(rng.integers(3, 9))).tolist()
        prompt = rng.integers(0, 50, size=int(rng.integers(4, 40))).tolist() + motif
        cont = []
        length = int(rng.integers(5, 160))
        while len(cont) < length:
            cont += motif if rng.random() < 0.6 else rng.integers(0, 50, size=3).tolist()
        out.append((prompt, cont[:length]))
    return out


def simulate(proposer: SamProposer, runner: FakeRunner | None, texts, max_rows: int, rng, extra=None):
    """Run requests through a vLLM-like batch: at most max_rows at a time, FCFS admission,
    greedy acceptance against each request's known continuation, condense on finish (the
    last row moves into the hole, as vLLM's InputBatch.condense does). Checks every draft
    against a reference SamDrafter keyed by the true request. Returns per-request emissions."""
    ref = SamDrafter()
    rows: list[str | None] = []
    state: dict[str, dict] = {}
    waiting = list(range(len(texts)))
    done: dict[str, list[int]] = {}
    tok = np.zeros((max_rows, MAX_LEN), dtype=np.int32)
    ntok = np.zeros(max_rows, dtype=np.int32)
    pending_drafts: dict[str, list[int]] = {}
    steps = 0
    while waiting or any(r is not None for r in rows):
        steps += 1
        # admit into free rows (after a condense the free rows are at the end)
        while waiting and len([r for r in rows if r is not None]) < max_rows:
            i = waiting.pop(0)
            rid = f"req-{i}"
            prompt, cont = texts[i]
            row = len(rows)
            rows.append(rid)
            tok[row, :len(prompt)] = prompt
            ntok[row] = len(prompt)
            state[rid] = {"prompt": prompt, "cont": cont, "out": [], "fresh": True, "emits": []}
            if runner is not None:
                runner.requests[rid] = _Req({EXTRA_KEY: dict(extra or {}, key=rid)})
        # the step: every row samples (prefill rows sample their first token)
        sampled = []
        for row, rid in enumerate(rows):
            s = state[rid]
            if s["fresh"]:
                new = [s["cont"][0]]
                s["fresh"] = False
                ref.start(rid, s["prompt"])
            else:
                draft = pending_drafts.get(rid, [])
                pos = len(s["out"])
                a = 0
                while a < len(draft) and pos + a < len(s["cont"]) and draft[a] == s["cont"][pos + a]:
                    a += 1
                new = s["cont"][pos: pos + a + 1]
            s["out"] += new
            s["emits"].append(len(new))
            tok[row, ntok[row]: ntok[row] + len(new)] = new
            ntok[row] += len(new)
            sampled.append(new)
        if runner is not None:
            b = runner.input_batch
            b.req_ids = list(rows)
            b.req_id_to_index = {r: j for j, r in enumerate(rows)}
            for j, r in enumerate(rows):
                b.num_prompt_tokens[j] = len(state[r]["prompt"])
        drafts = proposer.propose(sampled, ntok[: len(rows)].copy(), tok[: len(rows)])
        assert len(drafts) == len(rows)
        for row, rid in enumerate(rows):
            # row by row, as the proposer goes: the drafter-wide acceptance record a row's
            # judgement updates is read by the rows after it
            ref.extend(rid, sampled[row])
            want = ref.propose(rid, K)
            assert drafts[row] == want, f"step {steps} row {row} ({rid}): drafted {drafts[row]}, its own automaton {want}"
            pending_drafts[rid] = drafts[row]
        # finish, free the reference, condense: the last row moves into each hole
        finished = [rid for rid in rows if len(state[rid]["out"]) >= len(state[rid]["cont"])]
        for rid in finished:
            ref.stop(rid)
            done[rid] = state[rid]["emits"]
            if runner is not None:
                runner.requests.pop(rid, None)
            hole = rows.index(rid)
            last = len(rows) - 1
            if hole != last:
                rows[hole] = rows[last]
                tok[hole] = tok[last]
                ntok[hole] = ntok[last]
            rows.pop()
        if rng.random() < 0.1 and len(rows) > 2:   # vLLM may also reorder rows (swap_states)
            a, b = rng.choice(len(rows), size=2, replace=False)
            rows[a], rows[b] = rows[b], rows[a]
            tok[[a, b]] = tok[[b, a]]
            ntok[[a, b]] = ntok[[b, a]]
    # vLLM calls the proposer only for a step with rows: the next request's first prefill
    # chunk (no ids sampled) frees what is left
    if runner is not None:
        runner.input_batch.req_ids, runner.input_batch.req_id_to_index = ["next"], {"next": 0}
    tok[0, :3], ntok[0] = [1, 2, 3], 3
    assert proposer.propose([[]], ntok[:1].copy(), tok[:1]) == [[]]
    return done


@pytest.mark.parametrize("mapping", ["request-id", "content"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_move_state_follows_request(mapping, seed):
    rng = np.random.default_rng(seed)
    runner = FakeRunner() if mapping == "request-id" else None
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    assert prop.request_mapping == mapping
    texts = _texts(rng, 40)
    done = simulate(prop, runner, texts, max_rows=7, rng=rng)
    assert len(done) == 40
    assert not prop._states, "every finished request's automaton is freed"
    assert prop.memory_bytes() == 0
    assert prop.num_freed == 40


def test_records_match_the_decode():
    rng = np.random.default_rng(5)
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    texts = _texts(rng, 12)
    done = simulate(prop, runner, texts, max_rows=4, rng=rng)
    recs = {r["key"]: r for r in prop.take_records()}
    assert set(recs) == set(done)
    for rid, emits in done.items():
        r = recs[rid]
        # the first emission is the prefill's (not a decode step); the rest one record each
        assert r["emitted"] == emits[1:]
        assert all(0 <= a <= d for a, d in zip(r["accepted"], r["drafted"]))
        assert all(e == a + 1 or e < a + 1 for a, e in zip(r["accepted"], r["emitted"]))
        assert r["position"][0] == 1
        assert r["position"] == list(np.cumsum([1] + r["emitted"][:-1]))
    assert prop.take_records() == []  # handed out once


def test_propose_time_recorded_per_call_and_per_step():
    """The proposer's own time: every propose call timed (rows and drafted tokens with it),
    every request's step carries the seconds spent on its draft; taken once through the
    worker extension."""
    rng = np.random.default_rng(7)
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    simulate(prop, runner, _texts(rng, 10), max_rows=4, rng=rng)
    recs = prop.take_records()
    for r in recs:
        assert len(r["propose_s"]) == len(r["position"])
        assert all(t > 0 for t in r["propose_s"]), "each decode step's draft was proposed in measurable time"

    class W(SamWorkerExtension):
        pass

    w = W()
    w.model_runner = runner
    runner.drafter = prop
    assert w.samspec_time_proposer() is True
    calls = w.samspec_take_propose_times()
    assert len(calls["propose_s"]) == prop.num_propose_calls == calls["total_calls"]
    assert all(t > 0 for t in calls["propose_s"])
    # records hold verified drafts; a request's last draft (it finished) is proposed, never verified
    assert sum(calls["drafted"]) >= sum(sum(r["drafted"]) for r in recs) > 0
    assert max(calls["rows"]) == 4
    assert calls["total_s"] == pytest.approx(sum(calls["propose_s"]))
    assert prop.describe()["propose_time_s"] == calls["total_s"]
    assert w.samspec_take_propose_times()["propose_s"] == []   # handed out once


def test_other_drafters_are_timed_by_a_wrapper():
    """vLLM's own drafters (ngram, suffix) get the same timing around their propose."""
    from samspec_bench.bench.vllm_proposer.proposer_timing import summary

    class Ngram:
        def propose(self, k, sampled, *rest, **kw):
            return [[1] * k if s else [] for s in sampled]

    class W(SamWorkerExtension):
        pass

    w = W()
    w.model_runner = FakeRunner()
    w.model_runner.drafter = Ngram()
    assert w.samspec_time_proposer() and w.samspec_time_proposer()   # idempotent
    assert w.model_runner.drafter.propose(2, [[5], [], [6]]) == [[1, 1], [], [1, 1]]
    w.model_runner.drafter.propose(3, [[5]])
    calls = w.samspec_take_propose_times()
    assert calls["rows"] == [3, 1] and calls["drafted"] == [4, 3]
    assert all(t > 0 for t in calls["propose_s"])
    s = summary(calls, wall_s=2 * calls["total_s"], engine_steps=2)
    assert s["propose_calls"] == 2 and s["share_of_wall_time"] == pytest.approx(0.5)
    assert s["ms_per_call_mean"] == pytest.approx(1e3 * calls["total_s"] / 2)
    w.model_runner.drafter = None
    assert w.samspec_time_proposer() is False and w.samspec_take_propose_times() is None


def test_verify_cost_fit_recovers_the_step_time_line():
    """Step interval = a + b * verified tokens: the fit gives b and the cost in decode steps."""
    from samspec_bench.bench.vllm_proposer.proposer_timing import verify_cost

    rng = np.random.default_rng(0)
    drafted = rng.integers(0, 25, size=60).tolist()
    start, t = [], 0.0
    for i in range(60):
        start.append(t)
        t += 0.05 + 0.002 * (8 + drafted[i])   # the step after call i verifies 8 rows + its drafts
    fit = verify_cost({"start_s": start, "rows": [8] * 60, "drafted": drafted})
    assert fit["ms_per_verified_token"] == pytest.approx(2.0)
    assert fit["fixed_ms"] == pytest.approx(50.0)
    assert fit["draft_token_cost_decode_steps"] == pytest.approx(0.002 * 8 / (0.05 + 0.016))
    assert verify_cost({"start_s": start, "rows": [8] * 60, "drafted": [0] * 60}) is None   # nothing to fit


def test_mode_none_never_drafts():
    rng = np.random.default_rng(3)
    texts = _texts(rng, 6)
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    prop_drafts = []
    orig = prop.propose

    def spy(*a, **kw):
        out = orig(*a, **kw)
        prop_drafts.extend(out)
        return out

    prop.propose = spy
    with pytest.raises(AssertionError):   # the reference SAM drafts, mode none does not
        simulate(prop, runner, texts, max_rows=3, rng=rng, extra={"mode": "none"})
    assert prop_drafts and all(d == [] for d in prop_drafts)


def test_oracle_drafts_the_continuation():
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=3, max_model_len=MAX_LEN)
    prompt, cont = [5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8]
    runner.requests["r"] = _Req({EXTRA_KEY: {"key": "r", "mode": "oracle", "oracle": cont}})
    b = runner.input_batch
    b.req_ids, b.req_id_to_index = ["r"], {"r": 0}
    b.num_prompt_tokens[0] = 3
    tok = np.zeros((1, 32), dtype=np.int32)
    tok[0, :4] = prompt + [1]
    assert prop.propose([[1]], np.array([4]), tok) == [[2, 3, 4]]
    tok[0, 4:8] = [2, 3, 4, 5]
    assert prop.propose([[2, 3, 4, 5]], np.array([8]), tok) == [[6, 7, 8]]
    tok[0, 8] = 9   # the target disagreed: the oracle stops drafting
    assert prop.propose([[9]], np.array([9]), tok) == [[]]


def test_k_and_max_model_len_bound_drafts():
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=5, max_model_len=12)
    runner.requests["r"] = _Req({EXTRA_KEY: {"key": "r", "k": 2}})
    b = runner.input_batch
    b.req_ids, b.req_id_to_index = ["r"], {"r": 0}
    b.num_prompt_tokens[0] = 8
    tok = np.zeros((1, 16), dtype=np.int32)
    tok[0, :9] = [1, 2, 3, 4, 1, 2, 3, 4, 1]
    assert prop.propose([[1]], np.array([9]), tok) == [[2, 3]]          # k=2 per request
    tok[0, 9:11] = [2, 3]
    assert prop.propose([[2, 3]], np.array([11]), tok) == [[]]          # 11 + 1 = max_model_len


def test_worker_extension_reads_the_drafter():
    class W(SamWorkerExtension):
        pass

    w = W()
    w.model_runner = FakeRunner()
    w.model_runner.drafter = SamProposer(None, runner=w.model_runner, num_speculative_tokens=3)
    info = w.samspec_drafter_info()
    # the class's own path (what the guard rail compares), whichever public path built it
    assert info["drafter_class"] == "samspec_bench.bench.vllm_proposer.proposer.SamProposer"
    assert info["drafter"]["request_mapping"] == "request-id"
    assert w.samspec_take_records() == []
    w.model_runner.drafter = None
    assert w.samspec_take_records() is None


def test_cost_auto_is_fitted_from_the_step_intervals(monkeypatch):
    """The proposer times each step as the interval between its calls and pairs it with the
    drafts it returned at the earlier call and the tokens each row emitted: with step time
    a + b * verified tokens on a fake clock, the cost=auto rows draft with b E / S (E tokens
    emitted per step, S the step at the drafting level seen), recorded per call; rows with a
    fixed length spec record no cost."""
    class Clock:
        now = 100.0

        @classmethod
        def perf_counter(cls):
            return cls.now

    monkeypatch.setattr(proposer_mod, "time", Clock)
    a, b, rows = 0.030, 0.002, 4
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    rng = np.random.default_rng(7)
    tok = np.zeros((rows, MAX_LEN), dtype=np.int32)
    ntok = np.zeros(rows, dtype=np.int32)
    motifs = []
    for r in range(rows):
        rid = f"r{r}"
        prompt = rng.integers(0, 40, size=20).tolist()
        tok[r, :20], ntok[r] = prompt, 20
        runner.input_batch.req_ids.append(rid)
        runner.input_batch.req_id_to_index[rid] = r
        runner.input_batch.num_prompt_tokens[r] = 20
        runner.requests[rid] = _Req({EXTRA_KEY: {"length": "evidence:cost=auto"}})
        motifs.append(rng.integers(0, 40, size=int(rng.integers(3, 12))).tolist())
    drafts = [[] for _ in range(rows)]
    for step in range(150):
        sampled = []
        for r in range(rows):   # accept nothing: one token per step, from a motif with noise
            t = motifs[r][step % len(motifs[r])] if rng.random() < 0.8 else int(rng.integers(0, 40))
            tok[r, ntok[r]] = t
            ntok[r] += 1
            sampled.append([t])
        if step:
            Clock.now += a + b * (rows + sum(map(len, drafts)))
        drafts = prop.propose(sampled, ntok.copy(), tok)
    fit = prop.describe()["online_cost"]
    # nothing accepted: each row emitted one token per step and verified its drafts too
    emitted, verified = fit["emitted_per_row_step"], fit["verified_per_row_step"]
    assert emitted == pytest.approx(1.0) and verified > 1.2
    want = b * rows * emitted / (a + b * rows * verified)
    assert fit["warm"] and fit["updates"] > 0
    assert fit["steps"] == 148   # not the first call's step (the prefills) nor the one after (no earlier decode)
    assert fit["cost"] == pytest.approx(want, abs=1e-6)
    assert fit["ms_per_verified_token"] == pytest.approx(1e3 * b)
    holder = next(d.length.cost for d in prop._drafters.values())
    assert holder.value == fit["cost"]
    costs = prop.times.take()["cost"]
    assert costs[-1] == pytest.approx(want) and costs[0] == pytest.approx(DEFAULT_COST)   # warm-up: the default
    # a new request in a finished one's row (same row count): its step prefilled, after an idle gap
    batch = runner.input_batch
    batch.req_ids[0] = "late"
    batch.req_id_to_index = {rid: i for i, rid in enumerate(batch.req_ids)}
    runner.requests["late"] = _Req({EXTRA_KEY: {"length": "evidence:cost=auto"}})
    Clock.now += 10.0
    prop.propose([[1]] * rows, ntok.copy(), tok)
    assert prop.describe()["online_cost"]["steps"] == 148 and prop.cost_fit.cost == pytest.approx(want)
    # a fixed-length request records no cost
    for rid in runner.input_batch.req_ids:
        runner.requests[rid] = _Req({EXTRA_KEY: {"length": "fixed"}})
    prop2 = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    prop2.propose([[1]] * rows, ntok.copy(), tok)
    assert prop2.times.take()["cost"] == [None]


def test_engine_default_length_is_the_measured_cost(monkeypatch):
    """A request that names no length drafts with the engine default, cost=auto (fed by the
    step-time fit); SAMSPEC_VLLM_DRAFTER or the request's own spec override it."""
    from samspec_bench.sam.draft_length import OnlineCost
    monkeypatch.undo()   # drop the replay default fixture
    monkeypatch.delenv("SAMSPEC_VLLM_DRAFTER", raising=False)
    assert proposer_mod.ENGINE_LENGTH == "evidence:cost=auto"
    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    assert prop.defaults["length"] == "evidence:cost=auto"
    auto = prop._drafter_for(prop._options("nobody"))
    assert isinstance(auto.length.cost, OnlineCost) and id(auto) in prop._online
    runner.requests["fixed"] = _Req({EXTRA_KEY: {"length": "fixed"}})
    assert prop._drafter_for(prop._options("fixed")).length.fixed
    monkeypatch.setenv("SAMSPEC_VLLM_DRAFTER", '{"length": "evidence:cost=0.3"}')
    env = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    assert env._drafter_for(env._options("nobody")).length.threshold(K) == 0.3
    # the adapter leaves the length to the engine only when the caller named none
    assert not SamDrafter().length_given and SamDrafter(length="evidence").length_given


def test_tail_prices_rows_only_while_the_batch_drains(monkeypatch):
    """Option tail: each row's cost comes from tail_cost.row_costs over the rows' steps left to
    max_tokens and their tokens emitted / verified per step, and only while the batch drains (a
    request left and none joined since); a joining request (others may be waiting) switches back
    to the batch cost."""
    from samspec_bench.bench.vllm_proposer.tail_cost import row_costs

    priced = []
    real = proposer_mod.row_costs
    monkeypatch.setattr(proposer_mod, "row_costs", lambda *a, **kw: priced.append(a[2]) or real(*a, **kw))

    class _TailParams(_Params):
        max_tokens = 100

    runner = FakeRunner()
    prop = SamProposer(None, runner=runner, num_speculative_tokens=K, max_model_len=MAX_LEN)
    a, b = 0.05, 0.004
    for i in range(64):   # a warm fit: step time = a + b * verified tokens
        prop.cost_fit.observe(a + b * (3 + i % 5), 3, 3 + i % 5)
    assert prop.cost_fit.fit() == pytest.approx((a, b))
    tok = np.zeros((4, MAX_LEN), dtype=np.int32)
    ntok = np.full(4, 10, dtype=np.int32)

    def call(rids):
        batch = runner.input_batch
        batch.req_ids = list(rids)
        batch.req_id_to_index = {r: i for i, r in enumerate(rids)}
        for rid in rids:
            if rid not in runner.requests:
                req = runner.requests[rid] = _Req({EXTRA_KEY: {"tail": True}})
                req.sampling_params = _TailParams({EXTRA_KEY: {"tail": True}})
            batch.num_prompt_tokens[batch.req_id_to_index[rid]] = 8
        for i in range(len(rids)):
            tok[i, ntok[i]] = 7
            ntok[i] += 1
        before = prop.tail_priced_calls
        prop.propose([[7]] * len(rids), ntok[: len(rids)].copy(), tok[: len(rids)])
        return prop.tail_priced_calls - before

    assert call(["r0", "r1", "r2"]) == 0        # all joined: nothing says the batch drains
    assert call(["r0", "r1", "r2"]) == 0
    # what the rows will be priced with: steps left to max_tokens after this call's sample, and
    # the tokens emitted / verified per step so far (the step this call resolves included)
    st = [prop._states[r] for r in ("r0", "r1")]
    pend = [s.pending[1] for s in st]
    assert call(["r0", "r1"]) == 1              # r2 left, none joined: draining
    want = [(100 - (int(ntok[i]) - 8), s.emitted / s.steps, (s.verified + 1 - (1 + pend[i])) / s.steps)
            for i, s in enumerate(st)]
    got = priced[-1]
    assert [g[0] for g in got] == [w[0] for w in want] == [100 - 5] * 2
    assert [x for g in got for x in g[1:]] == pytest.approx([x for w in want for x in w[1:]])
    # alike rows: the batch's own throughput cost
    assert row_costs(a, b, got) == pytest.approx([b * 2 * got[0][1] / (a + b * 2 * got[0][2])] * 2)
    assert call(["r0", "r1"]) == 1
    assert call(["r0", "r1", "r3"]) == 0        # r3 joined: others may be waiting
    assert prop.describe()["tail_priced_calls"] == 2


def test_tail_option_in_the_environment_is_checked(monkeypatch):
    monkeypatch.setenv("SAMSPEC_VLLM_DRAFTER", '{"tail": "yes"}')
    with pytest.raises(ValueError, match="tail 'yes': give true or false"):
        SamProposer(None, num_speculative_tokens=K, max_model_len=MAX_LEN)
    monkeypatch.setenv("SAMSPEC_VLLM_DRAFTER", '{"tail": true}')
    assert SamProposer(None, num_speculative_tokens=K, max_model_len=MAX_LEN).defaults["tail"] is True
