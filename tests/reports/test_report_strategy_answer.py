"""The third answer names the best strategy of a `rollout --strategy` run and what it needs."""

from samspec_bench.reports.answers import best_strategy_text


def test_best_strategy_is_the_shortest_total_with_its_needs():
    rows = [{"arm": "seed", "strategy": True, "total": 90.0, "speedup_overall": 1.1, "speedup_tail": 1.4, "needs": []},
            {"arm": "histospec", "strategy": True, "total": 50.0, "speedup_overall": 2.0, "speedup_tail": 1.25,
             "needs": ["history kept between RL steps"]},
            {"arm": "always k=3", "strategy": False, "total": 40.0, "speedup_overall": 2.5, "speedup_tail": 1.0,
             "needs": []}]
    text = best_strategy_text({"strategy_table": {"rows": rows}}, "modelled")
    assert text == (" Best strategy: histospec (2.00x overall, 1.25x in the tail, modelled; in-sample: chosen on the "
                    "prompts it is measured on (rollout --dev-split F holds some out)); it needs: "
                    "history kept between RL steps.")
    assert best_strategy_text({"strategy_table": {"rows": rows[:1]}}, "modelled").endswith(
        "it needs: nothing beyond the request's own text.")
    assert best_strategy_text({}, "modelled") == ""


def test_the_tables_marked_best_row_wins_with_its_range_draws_and_split():
    """In a --dev-split run the table marks the dev prompts' choice, which may not be the
    shortest held-out total: the answer names that row, its range and the split."""
    spread = {"speedup_overall": {"median": 1.5, "min": 1.25, "max": 1.75}}
    rows = [{"arm": "das", "strategy": True, "total": 40.0, "speedup_overall": 2.5, "speedup_tail": 1.0, "needs": [],
             "split": "held-out"},
            {"arm": "seer", "strategy": True, "total": 60.0, "speedup_overall": 1.5, "speedup_tail": 1.1, "needs": [],
             "split": "held-out", "spread": spread, "best_in_draws": {"best": 2, "draws": 3}}]
    text = best_strategy_text({"strategy_table": {"rows": rows}}, "modelled")
    assert text == (" Best strategy: seer (1.50x [1.25, 1.75] overall, 1.10x in the tail, modelled, fastest in 2 of 3 "
                    "draws; chosen on the dev prompts, figures from the held-out ones); it needs: nothing beyond the "
                    "request's own text.")


def test_a_tree_best_is_followed_by_the_best_on_one_path():
    rows = [{"arm": "arctic:paths=4", "strategy": True, "total": 40.0, "speedup_overall": 2.5, "speedup_tail": 1.9,
             "needs": ["tree verification"], "best_in_draws": {"best": 1, "draws": 1}},
            {"arm": "arctic", "strategy": True, "total": 45.0, "speedup_overall": 2.25, "speedup_tail": 1.5,
             "needs": [], "best_one_path": True}]
    text = best_strategy_text({"strategy_table": {"rows": rows}}, "modelled")
    assert text.startswith(" Best strategy: arctic:paths=4 (2.50x overall, 1.90x in the tail, modelled; in-sample")
    assert text.endswith(" On one path (no tree verification, as vLLM verifies today): arctic (2.25x overall, "
                         "1.50x in the tail); it needs: nothing beyond the request's own text.")


def test_the_answer_gives_seers_reading_of_the_tail_where_the_run_has_it():
    rows = [{"arm": "arctic:paths=4", "strategy": True, "total": 50.0, "speedup_overall": 2.5, "speedup_tail": 1.2,
             "speedup_last10": 3.25, "needs": []}]
    text = best_strategy_text({"strategy_table": {"rows": rows}}, "modelled")
    assert "(2.50x overall, 1.20x in the tail, 3.25x over the last 10 % of requests, modelled;" in text
