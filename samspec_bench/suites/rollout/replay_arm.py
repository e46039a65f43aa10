"""The simulated arms of `samspec-bench rollout --engine replay`: requests taken from traces,
acceptance from each response's profile (`bench.simulation.profiles`), every arm scheduled by
`bench.simulation.scheduler.simulate` and timed by a step-time model; with --dp N, sharded
over N engine instances (`bench.simulation.dp`), the rollout ending at the slowest.

`prepare` reads the traces and computes the acceptance profiles once; `simulate_arms` runs
arms on them for given response lengths (the sensitivity table reruns it with other lengths)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Sequence

import click
import numpy as np

from samspec_bench.bench.engines.base import RequestProgress
from samspec_bench.bench.simulation.profiles import (RESAMPLE_METHOD, history_store, profiles_for, rule_profile,
                                                    split_history)
from samspec_bench.bench.simulation.dp import instance_steps, rule_text, shard_requests, simulate_dp
from samspec_bench.bench.simulation.profile_table import NEVER, LateProfile
from samspec_bench.bench.simulation.scheduler import SimRequest, simulate
from samspec_bench.bench.simulation.shared_queue import DIVIDED_ASSUMED, simulate_shared
from samspec_bench.bench.simulation.tool_turns import turn_profile, turn_segments
from samspec_bench.bench.simulation.fitted_step_model import StepTimeModel, extrapolation
from samspec_bench.data import load_tokenizer, tokenize_traces
from samspec_bench.errors import UserError
from samspec_bench.sam.strategies import parse_strategy
from samspec_bench.sam.strategies.base import rule_context
from samspec_bench.suites.rollout.config import (RolloutConfig, arm_policy, arm_settings, draw_lengths, kv_options,
                                                 needs_history, tail_threshold_for)
from samspec_bench.suites.rollout.cost_policies import cost_switch
from samspec_bench.suites.rollout.draws import run_draws
from samspec_bench.suites.rollout.dp_rule import uneven_dp
from samspec_bench.suites.rollout.length_order import drafting_by_length, recorded_scores
from samspec_bench.suites.rollout.length_share import share_used
from samspec_bench.suites.rollout.phases import (POSITION_EDGES, add_dp_speedups, add_speedups, arm_metrics,
                                                 dp_arm_metrics, tail_acceptance_rows)
from samspec_bench.suites.rollout.turns import stretched_turns, turn_pairs
from samspec_bench.trace_formats import read_rl_steps, skipped_counts, skipped_line


GROUP_PROFILES = ("lockstep: a member drafting at position p sees each sibling's first p tokens (the trace "
                  "group's distinct responses); from the longest of its simulated siblings' lengths on, the "
                  "after-siblings profile: every other distinct response of the group whole")


def sim_requests(pairs: Sequence[tuple[Any, Any]], lengths, profiles) -> list[SimRequest]:
    """One SimRequest per (prompt_ids, response_ids) pair with its length and, unless
    `profiles` is None (no drafting), its (drafted, accepted) profile."""
    out = []
    for i, ((p, r), n) in enumerate(zip(pairs, lengths)):
        dr, ac = (profiles[i] if profiles is not None else (None, None))
        out.append(SimRequest(len(p), int(n), dr, ac))
    return out


def trace_requests(items, prompts: int | None, group_size: int | None, traces: str):
    """`prompts` groups x `group_size` members taken from the traces' groups (groups and
    members cycled when more are asked for than the traces hold). Returns (chosen items, the
    distinct ones, each chosen item's index among them, prompts, group size)."""
    groups: dict[tuple[str, str], list] = {}
    for it in items:
        if len(it.response_ids):
            groups.setdefault((str(it.source), str(it.group)), []).append(it)
    if not groups:
        raise UserError(f"--traces {traces}: no response with tokens; give traces with responses")
    glist = list(groups.values())
    n_prompts = prompts or len(glist)
    n = group_size or max(len(g) for g in glist)
    chosen = [glist[i % len(glist)][j % len(glist[i % len(glist)])] for i in range(n_prompts) for j in range(n)]
    uniq: dict[int, int] = {}
    base = []
    for it in chosen:
        if id(it) not in uniq:
            uniq[id(it)] = len(base)
            base.append(it)
    return chosen, base, [uniq[id(it)] for it in chosen], n_prompts, n


@dataclass
class Replay:
    """What every simulated arm of a run shares: the distinct trace responses, which one each
    request replays, and their acceptance profiles per k."""
    pairs: list                  # (prompt_ids, response_ids) of the distinct responses
    idx: list[int]               # per request (prompt-major), its index into pairs
    n_prompts: int
    group_size: int
    profiles: dict[Any, list]    # arm setting's "profile" key -> [(drafted, accepted)] per pair
    profile_s: float
    history: dict[str, Any] | None = None   # where the history source's steps came from, what its stores held
    trees: dict[Any, list] = field(default_factory=dict)   # profile key -> [(tree drafted, tree accepted)] per pair
    # group-source profile key -> per pair (drafted, accepted, tree drafted, tree accepted) after its siblings
    # finished (profiles.after_siblings_profiles; the tree pair None without trees)
    late: dict[Any, list] = field(default_factory=dict)
    # what the traces held beside what the requests replay (the workload line says what was left out)
    coverage: dict[str, Any] = field(default_factory=dict)
    turns: list = field(default_factory=list)   # per pair, its tool spans between turns (None: single-turn)
    tools: dict[str, Any] | None = None         # the traces' tool output and how it is replayed (turns.py)
    turns_at: dict = field(default_factory=dict)   # (pair, length) -> its turns at that length, memo
    files: tuple = ()   # the trace files read (what --resume checks has not changed)

    @property
    def trace_lengths(self) -> np.ndarray:
        return np.array([len(p[1]) for p in self.pairs], dtype=np.int64)


def prepare(cfg: RolloutConfig, profiles: bool = True) -> Replay:
    """The traces' requests and every arm's acceptance profiles. With a history source (an arm's
    or a strategy's) the rollout is the traces' last RL step and the earlier steps its history
    (`profiles.split_history`; single-step traces: each group's first half), for every arm.
    `profiles=False`: the requests alone, quietly (what a run plans its profile grid from)."""
    merged: dict[str, Any] = {}   # validation generations, one RL step in several folders' step files: counted
    traces, note = read_rl_steps(cfg.traces, cfg.on_error, cfg.history_includes_validation, merged)
    if note and profiles:
        click.echo(f"rollout --traces: {note}", err=True)
    read_skipped = len(traces.skipped)
    items = tokenize_traces(traces, load_tokenizer(cfg.tokenizer))
    if len(traces.skipped) > read_skipped:   # --on-error skip: lines the tokenizer refused, counted with the rest
        if profiles:
            click.echo(f"rollout --traces: after tokenizing, {skipped_line(traces.skipped[read_skipped:])}", err=True)
        merged.update(skipped_counts(traces.skipped))
    hist_info, earlier = None, []
    if needs_history(cfg):
        items, earlier, why = split_history(items)
        hist_info = {"steps": why, "earlier_responses": len(earlier), "stores": {}}
    chosen, base, idx, n_prompts, n = trace_requests(items, cfg.prompts, cfg.group_size, cfg.traces)
    pairs, turns, tools = turn_pairs(base, cfg.max_response_len, cfg.tool_output)
    check_turns(cfg, tools, turns)
    if tools:
        tools.update(tool_latency_s=cfg.tool_latency_s, tool_latency_from=cfg.tool_latency_from)
    coverage = {"trace_responses": len(items), "empty_responses": sum(1 for it in items if not len(it.response_ids)),
                "unused_responses": sum(1 for it in items if len(it.response_ids)) - len(base),
                "cut_at_max_response_len": sum(1 for it in base if len(it.response_ids) > cfg.max_response_len),
                **merged}
    base_groups: list[Hashable] = [(str(it.source), str(it.group)) for it in base]
    stores: dict[int, Any] = {}

    def store(window: int):
        if window not in stores:
            stores[window] = history_store(earlier, window, int(cfg.history_budget_mb * (1 << 20)))
            hist_info["stores"][str(window)] = stores[window].describe()
        return stores[window]

    t0 = time.perf_counter()
    profs: dict[Any, list] = {}
    trees: dict[Any, list] = {}
    late: dict[Any, list] = {}
    for s in arm_settings(cfg) if profiles else ():
        key = s["profile"]
        if key is None or key in profs:
            continue
        label = f"profiles {key[1]}" + (f" k={key[2]}" if key[0] == "sources" else "")
        for after in (False, True) if "group" in key_sources(key) else (False,):
            bar = RequestProgress(len(pairs), True, label + (" after siblings" if after else ""))   # minutes per arm
            try:
                got, tree = key_profiles(cfg, key, pairs, base_groups, store, bar.advance, after, turns)
            finally:
                bar.close()
            if after:
                late[key] = [(d, a, *(tree[j] if tree else (None, None))) for j, (d, a) in enumerate(got)]
            else:
                profs[key] = got
                if tree is not None:
                    trees[key] = tree
    val_files = set((merged.get("validation") or {}).get("files", {}))   # left out, still read: an edit counts
    files = tuple(sorted({str(r.source) for r in traces.records} | {str(f) for f, _, _ in traces.skipped} | val_files))
    return Replay(pairs, idx, n_prompts, n, profs, time.perf_counter() - t0, hist_info, trees, late, coverage,
                  turns, tools, files=files)


def check_turns(cfg: RolloutConfig, tools: dict[str, Any] | None, turns: list) -> None:
    """Refuse tool options the traces give nothing to read, and a divided rollout of multi-turn
    requests (its chunks would move between instances while a tool runs: not modelled)."""
    multi = any(t for t in turns)
    if cfg.tool_latency_s and not multi:
        raise UserError(f"--tool-latency-s {cfg.tool_latency_s:g} prices the tool calls between turns, and no "
                        f"response the run replays from --traces {cfg.traces} has a turn after tool output; drop it")
    if cfg.tool_output == "decode" and not tools:
        raise UserError(f"--tool-output decode replays tool output as generated, and no response the run replays "
                        f"from --traces {cfg.traces} holds any; drop it")
    divided = [s["label"] for s in arm_settings(cfg) if s.get("divided")]
    if multi and divided:
        raise UserError(f"--strategy {divided[0]}: a divided rollout moves requests between instances, and "
                        f"{sum(bool(t) for t in turns)} of the responses it replays are multi-turn (tool calls between "
                        "turns are not modelled there); drop :divided=, or pass --tool-output decode")


def key_sources(key) -> str:
    """The draft sources of an arm's profile key."""
    return key[1] if key[0] == "sources" else parse_strategy(key[1]).sources


def key_profiles(cfg: RolloutConfig, key, pairs, groups, store, done, after_siblings: bool,
                 turns: Sequence | None = None) -> tuple[list, list | None]:
    """(profiles, tree profiles or None) of one profile key; `after_siblings`: each response
    drafted after its group's siblings finished (group sources only); `turns`: per pair, its
    tool spans (tool_turns.turn_profile: nothing drafted in tool text, drafts kept to the turn's end)."""
    if key[0] == "sources":
        src, k = key[1], key[2]
        profs = profiles_for(pairs, groups, k, cfg.drafter, src, history=store(cfg.history_window) if "history" in src
                             else None, done=done, after_siblings=after_siblings, turns=turns)
        return [turn_profile(p, t) for p, t in zip(profs, per_pair(turns, len(profs)))], None
    return strategy_profiles(parse_strategy(key[1]), pairs, groups, store, done=done, after_siblings=after_siblings,
                             turns=turns)


def strategy_profiles(st, pairs, groups, store, done=None, after_siblings: bool = False,
                      turns: Sequence | None = None) -> tuple[list, list | None]:
    """A strategy's profiles: its drafter's at its k over its sources, cut by its length rule
    (if any) along each response's decode walk, with what it knows at the start
    (sam/strategies/base.rule_context, as in `accept`); and with `paths`, its tree profiles
    from the same walk (the tree's paths at the drafter's own lengths: a rule cuts the single
    path only), else None."""
    hist = store(st.history_window) if "history" in st.sources else None
    profs = profiles_for(pairs, groups, st.k, st.drafter, st.sources, history=hist, options=st.drafter_options(),
                         paths=st.paths, done=done, after_siblings=after_siblings, turns=turns)
    profs = [turn_profile(p, t) for p, t in zip(profs, per_pair(turns, len(profs)))]
    trees = [(p[2], p[3]) for p in profs] if st.paths else None
    profs = [(p[0], p[1]) for p in profs]
    if st.rule is None:
        return profs, trees
    return [rule_by_turn(d, a, st, rule_context(hist, p), t)
            for (d, a), (p, _), t in zip(profs, pairs, per_pair(turns, len(profs)))], trees


def per_pair(turns: Sequence | None, n: int) -> Sequence:
    """Each pair's tool spans, or None for every pair of a single-turn replay."""
    return turns or [None] * n


def rule_by_turn(drafted, accepted, st, context, spans) -> tuple[np.ndarray, np.ndarray]:
    """A length rule's profile (profiles.rule_profile), started afresh at every model turn: verl's
    agent loop sends each turn as a new engine request (a new request id), whose rule state
    (AIMD's length, a rolling cut-off) starts over."""
    if not spans:
        return rule_profile(drafted, accepted, st.rule(), context)
    d_out, a_out = np.zeros_like(drafted), np.zeros_like(accepted)
    for lo, hi in turn_segments(spans, len(drafted)):
        d_out[lo:hi], a_out[lo:hi] = rule_profile(drafted[lo:hi], accepted[lo:hi], st.rule(), context)
    return d_out, a_out


def requests_for(rep: Replay, lengths: np.ndarray, key, stretch: bool, max_tokens: int | None = None
                 ) -> list[SimRequest]:
    """The simulated requests of one arm at these lengths; with a group source, each also reads
    its after-siblings profile from the longest of its simulated siblings' lengths on.
    `max_tokens` (the rollout's max response length) is the engine's limit: a response that ends
    before it ends at an EOS the engine cannot see, so its drafts are not cut at its end."""
    pr = rep.profiles[key] if key is not None else None
    tr = rep.trees.get(key) if key is not None else None
    lt = rep.late.get(key) if key is not None else None
    after = siblings_longest(np.asarray(lengths), rep.group_size) if lt else None
    out = []
    for q, j in enumerate(rep.idx):
        turns, n = turns_at(rep, j, int(lengths[q]))
        out.append(SimRequest(len(rep.pairs[j][0]), n, pr[j][0] if pr else None, pr[j][1] if pr else None,
                              group=q // rep.group_size, stretch=stretch, tree_drafted=tr[j][0] if tr else None,
                              tree_accepted=tr[j][1] if tr else None,
                              late=LateProfile(int(after[q]), *lt[j]) if lt and after[q] < lengths[q] else None,
                              # a length raised to min_len may pass a --max-response-len below it
                              turns=turns, max_tokens=max(max_tokens, n) if max_tokens else None))
    return out


def turns_at(rep: Replay, j: int, n: int) -> tuple[list | None, int]:
    """Pair j's tool spans at response length n (turns.stretched_turns), and the length the
    engine generates to."""
    spans = rep.turns[j] if rep.turns else None
    if not spans:
        return None, n
    key = (j, n)
    if key not in rep.turns_at:
        rep.turns_at[key] = stretched_turns(spans, len(rep.pairs[j][1]), n)
    return rep.turns_at[key]


def siblings_longest(lengths: np.ndarray, group_size: int) -> np.ndarray:
    """Per request (prompt-major groups of `group_size`), the longest length among the other
    members of its group; a group of one has none (profile_table.NEVER)."""
    if group_size < 2:
        return np.full(len(lengths), NEVER, dtype=np.int64)
    g = np.asarray(lengths, dtype=np.int64).reshape(-1, group_size)
    top = np.argmax(g, axis=1)
    first = g[np.arange(len(g)), top]
    second = np.sort(g, axis=1)[:, -2]
    col = np.arange(group_size)[None, :]
    return np.where(col == top[:, None], second[:, None], first[:, None]).reshape(-1)


def tree_options(setting: dict[str, Any]) -> dict[str, int]:
    """The simulation's tree keywords of an arm: a strategy's with `paths` verifies trees of
    at most paths x k tokens where at most its tree_at requests run and nobody waits."""
    if setting.get("arm") != "strategy":
        return {}
    st = parse_strategy(setting["strategy"])
    return {"tree_running": st.tree_running, "tree_k": st.paths * st.k} if st.paths else {}


def simulate_arms(cfg: RolloutConfig, rep: Replay, settings, lengths: np.ndarray, stretch: bool,
                  step_model: StepTimeModel) -> tuple[dict[str, Any], dict[str, dict]]:
    """Every arm of `settings` on these lengths: (simulation results, metrics with speedups).
    One instance (--dp 1, rule group): `scheduler.simulate`; otherwise the requests sharded
    by `bench.simulation.dp.shard_requests` and every instance simulated."""
    sharded = cfg.dp > 1 or cfg.dp_shard != "group"
    shards = shard_requests(rep.n_prompts, rep.group_size, cfg.dp, cfg.dp_shard) if sharded else None
    sims, metrics = {}, {}
    for s in settings:
        T = tail_threshold_for(s, cfg)
        reqs = requests_for(rep, lengths, s.get("profile"), stretch, cfg.max_response_len)
        cost = (cost_switch(rep, s["profile"], lengths, step_model, cfg.max_num_seqs, s["k"]) if s.get("profile")
                else None)
        opts = dict(k=s["k"], step_model=step_model, max_num_seqs=cfg.max_num_seqs,
                    max_num_batched_tokens=cfg.max_num_batched_tokens, tail_threshold=T,
                    position_edges=POSITION_EDGES, **{"block_size": cfg.block_size, **kv_options(cfg)},
                    admission=s.get("schedule", "fcfs"), tool_latency_s=cfg.tool_latency_s, **tree_options(s))   # block_size also cuts a capacity from device memory
        made = []   # the arm's switches (one per instance), read back for what they decided

        def policy(s=s):
            made.append(arm_policy(s, cost))
            return made[-1]
        t0 = time.perf_counter()
        divided = s.get("divided", 0)
        if divided:   # one queue the instances pull from, chunks moving between them (not the shards)
            r = simulate_shared(reqs, cfg.dp, chunk_tokens=divided, policy=policy, **opts)
        elif sharded:
            r = simulate_dp(reqs, shards, policy=policy, **opts)
        else:
            r = simulate(reqs, policy=policy(), **opts)
        moves = r.moves if divided else None
        if divided and not sharded:   # one instance: its result as the engine simulation's
            r = r.instances[0]
        if sharded:
            m = dp_arm_metrics([x.steps for x in r.instances], [x.finish_time_s for x in r.instances], T,
                               r.finish_time_s, [len(x) for x in r.shards])
            for row, x in zip(m["instances"], r.instances):
                st = x.steps
                row["kv_peak_tokens"] = int(np.max(st["context_tokens"] + st["num_scheduled_tokens"])) if len(
                    st["time_s"]) else 0
            tails = [x.tail_acceptance for x in r.instances if x.tail_acceptance is not None]
            ta = ({kk: (v if kk == "edges" else np.sum([t[kk] for t in tails], axis=0)) for kk, v in tails[0].items()}
                  if tails else None)
            steps = instance_steps(r)
        else:
            m = arm_metrics(r.steps, r.finish_time_s, T)
            ta, steps = r.tail_acceptance, r.steps
        m["sim_seconds"] = time.perf_counter() - t0
        turns = [x.turns for x in r.instances] if sharded else [r.turns]
        if any(turns):   # multi-turn requests: tool calls made, tool tokens prefilled, in all instances
            m["turns"] = {"tool_calls": sum(t.get("tool_calls", 0) for t in turns),
                          "tool_tokens_prefilled": sum(t.get("tool_tokens_prefilled", 0) for t in turns),
                          "tool_latency_s": cfg.tool_latency_s}
        if moves is not None:
            m["divided"] = {**moves, "assumed": DIVIDED_ASSUMED}
        if any(getattr(p, "gate", False) for p in made):   # a switch that can turn speculation off for good
            trips = [p.off_after_step for p in made]
            m["switch_off_after_step"] = trips if sharded else trips[0]
        m["step_model_extrapolation"] = extrapolation(step_model, steps) or None   # a roofline claims no range
        if ta is not None:
            m["tail_acceptance_by_position"] = tail_acceptance_rows(ta)
        sims[s["label"]] = r
        metrics[s["label"]] = m
    if sharded:
        add_dp_speedups(metrics, settings, [x.steps for x in sims["off"].instances])
    else:
        add_speedups(metrics, settings, sims["off"].steps, cfg.thresholds[0])
    return sims, metrics


def draw(cfg: RolloutConfig, rep: Replay) -> tuple[np.ndarray, bool]:
    """Per-request response lengths and whether profiles are stretched to them: drawn from
    --length-dist (a prompt's responses alike by --length-group-share, length_share.py), else
    the traces' own."""
    if cfg.length_dist is not None:
        return np.maximum(drawn_below(cfg, rep), cfg.min_len), True
    return np.array([len(rep.pairs[j][1]) for j in rep.idx], dtype=np.int64), False


def drawn_below(cfg: RolloutConfig, rep: Replay) -> np.ndarray:
    """The drawn lengths clipped at --max-response-len only: those below cfg.min_len, which `draw`
    raises to it, stay visible to be counted (the workload's requests_raised_to_min_len)."""
    rank = cfg.length_rank_share
    return draw_lengths(cfg.length_dist, len(rep.idx), cfg.seed, 0, cfg.max_response_len,
                        trace_lengths=rep.trace_lengths, group_size=rep.group_size, share=share_used(cfg, rep),
                        rank_scores=recorded_scores(rep) if rank else None, rank_share=rank)


def simulate_seed(cfg: RolloutConfig, rep: Replay, settings, seed: int, step_model: StepTimeModel):
    """Every arm of `settings` on one draw of the lengths (`draw` with this seed)."""
    c = replace(cfg, seed=seed)
    lengths, stretch = draw(c, rep)
    return simulate_arms(c, rep, settings, lengths, stretch, step_model)


def run_replay(cfg: RolloutConfig, step_model: StepTimeModel, rep: Replay | None = None) -> dict[str, Any]:
    """Simulated arms on traces (`trace_requests`; group sources draft from the trace group's
    distinct responses). Lengths: the responses' own, or drawn from `length_dist` with each
    response's acceptance profile stretched to its length
    (`bench.simulation.profiles.stretch_positions`)."""
    rep = rep or prepare(cfg)
    lengths, stretch = draw(cfg, rep)
    settings = arm_settings(cfg)
    sims, metrics = simulate_arms(cfg, rep, settings, lengths, stretch, step_model)
    # every draw's figures as median [min, max] (draws.py); this first draw's tables are the ones shown
    draws = run_draws(cfg, sims, metrics, lambda seed: simulate_seed(cfg, rep, settings, seed, step_model))
    sharded = not hasattr(sims["off"], "steps")
    out = {"settings": settings, "metrics": metrics,
           "tables": {lbl: ("simulated", instance_steps(r) if sharded else r.steps) for lbl, r in sims.items()},
           "finish": {lbl: r.finish_time_s for lbl, r in sims.items()},
           "workload": {"requests": len(rep.idx), "prompts": rep.n_prompts, "group_size": rep.group_size,
                        "distinct_responses": len(rep.pairs), "response_tokens": int(lengths.sum()),
                        "response_len_max": int(lengths.max()), "response_len_median": float(np.median(lengths)),
                        "response_len_mean": float(np.mean(lengths)),
                        "truncated_share": float(np.mean(lengths >= cfg.max_response_len)),
                        "requests_at_max_response_len": int(np.sum(lengths >= cfg.max_response_len)),
                        "requests_raised_to_min_len": int(np.sum(drawn_below(cfg, rep) < cfg.min_len)) if stretch else 0,
                        "min_len": cfg.min_len,
                        "max_response_len": cfg.max_response_len, **rep.coverage,
                        "sources": cfg.sources,
                        "strategies": {s["label"]: parse_strategy(s["strategy"]).describe() for s in settings
                                       if s["arm"] == "strategy"} or None,
                        "history": rep.history,
                        "tool_output": rep.tools,
                        "group_profiles": GROUP_PROFILES if rep.late else None,
                        "lengths": (f"drawn from {cfg.length_dist}, clipped to [{cfg.min_len}, {cfg.max_response_len}]"
                                    + (f", {cfg.length_rank_share:g} of each normal score from its recorded "
                                       "response's length (--length-rank-share)" if cfg.length_rank_share else "")
                                    if stretch else "the traces' responses"),
                        "length_rank_share": cfg.length_rank_share if stretch else None,
                        # read only where lengths are drawn: there the draw decides who runs long
                        "drafting_by_length": (drafting_by_length(rep, settings) or None) if stretch else None,
                        "profile_resampling": RESAMPLE_METHOD if stretch else None,
                        "profile_seconds": rep.profile_s,
                        "sim_seconds_total": float(sum(m["sim_seconds"] for m in metrics.values())),
                        "draws": {k: v for k, v in draws.items() if k != "records"}},
           "draws": draws}
    if sharded:
        out["instance_tables"] = {lbl: [x.steps for x in r.instances] for lbl, r in sims.items()}
        out["slowest"] = {lbl: r.slowest for lbl, r in sims.items()}
        sizes = [int(len(x)) for x in sims["off"].shards]
        out["workload"]["dp"] = {"instances": cfg.dp, "rule": cfg.dp_shard, "rule_text": rule_text(cfg.dp_shard),
                                 "requests_per_instance": sizes,
                                 **uneven_dp(rep.n_prompts, rep.group_size, cfg.dp, cfg.dp_shard, sizes)}
    return out
