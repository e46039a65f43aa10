"""The old import path of the report's building blocks, kept for scripts that use it
(`from samspec_bench.reports.summary import collect, summarize, status`). The code lives in:

    model.py            headline/gate dicts, Figure, Run, SuiteGroup, Report, status()
    headlines.py        summarize(): the registry and the generic summary
    suite_headlines.py  each suite's headlines and gates
    collect.py          run directories into a Report
    metadata.py         a run's metadata rows and data files
    tables.py           any JSON shape to tables
    fmt.py, values.py   number formatting; is_number, flatten

New code imports from those modules.
"""

from samspec_bench.reports.collect import (FIGURE_TYPES, RUN_STATE_FILE, SUITE_ORDER, collect, find_run_dirs,
                                           load_figures, run_label)
from samspec_bench.reports.fmt import fmt, fmt_headline
from samspec_bench.reports.headlines import REGISTRY, generic, register, summarize
from samspec_bench.reports.metadata import data_files, metadata_rows, model_of
from samspec_bench.reports.model import (SUMMARY_HEADLINES, Figure, Gate, Headline, Report, Run, SuiteGroup,
                                         Summarizer, gate, headline, status)
from samspec_bench.reports.suite_headlines import MIN_TOKENS_FOR_SPEED_BAR
from samspec_bench.reports.tables import Table, shape_tables
from samspec_bench.reports.values import flatten, is_number

__all__ = ["FIGURE_TYPES", "MIN_TOKENS_FOR_SPEED_BAR", "REGISTRY", "RUN_STATE_FILE", "SUITE_ORDER",
           "SUMMARY_HEADLINES", "Figure", "Gate", "Headline", "Report", "Run", "SuiteGroup", "Summarizer", "Table",
           "collect", "data_files", "find_run_dirs", "flatten", "fmt", "fmt_headline", "gate", "generic", "headline",
           "is_number", "load_figures", "metadata_rows", "model_of", "register", "run_label", "shape_tables",
           "status", "summarize"]
