"""Rollouts as users have them, read as traces: the format of each file is detected (or
named with --trace-format) and every reader yields `data.TraceRecord`s.

- `samspec`: this package's JSONL (id, group, prompt / prompt_ids, response / response_ids,
  ...), read by `data.read_traces`.
- `verl`: verl's rollout dumps (`trainer.rollout_data_dir`): one `{global_step}.jsonl` per RL
  step, each line {"input", "output", "score", "step"} plus, in newer versions, "gts" and the
  reward function's extra keys (volcengine/verl @ 00401103, verl/trainer/ppo/ray_trainer.py:
  `RayPPOTrainer._dump_generations` and the `rollout_data_dir` branch of `fit`). `input` and
  `output` are `tokenizer.batch_decode(..., skip_special_tokens=True)` of the prompt and the
  response: the chat template's text is there but its special tokens are not, so prompts are
  tokenized as raw text (an approximation of the real prompt ids; responses are exact up to
  the decode/encode round trip). The batch is reordered before the dump (`balance_batch`),
  so a group is the lines of one step with the same `input`; its name is a hash of `input`,
  the same in every step, and the step is kept (`TraceRecord.step`). Validation generations
  (`trainer.validation_data_dir`, the same file naming) are marked (`validation`). Two files
  of one folder for one step (03.jsonl beside 3.jsonl, or a copy whose lines hold the step)
  are refused; one step in the step files of two folders (two runs, a resumed job's new
  folder) is merged as one step, counted and said (`step_folders`).
- `lm-eval`: lm-eval's `--log_samples` files (`samples_<task>_<date>.jsonl`, one line per
  document and filter: doc_id, arguments, resps, ...). A group is one document's responses
  (`repeats`) in one samples file: another run of the task (another date) is read too, its
  groups named `<task>@<date>:<doc_id>`. Only generate_until lines (arguments: prompt and
  generation kwargs) hold responses; a perplexity task's log-likelihoods are bad lines. The
  lines of other filters repeat the same responses and are read once; a line of a document with
  other responses, or an empty response, is a bad line. The model is taken from the run's
  `results_<date>.json` (else the newest `results_*.json` beside the samples) when there is one.
- `plain`: JSONL with `prompt` and `response` strings (optional id, group, system, model,
  dataset, step; null or of the right type, else a bad line); without a group, responses to the
  same prompt form one.

A file is read once: one named twice (or inside a folder also named) is refused. Compressed trace
files in a folder (3.jsonl.gz beside 4.jsonl) are refused, not left out; a file that is empty,
compressed, UTF-16 or one JSON array is named with what it is.

Every response's tool output (multi-turn tool turns, executor results) is marked in any format
(`tool_turns`): a rollout engine prefills it, it is not generated.

Modules: `files` (which files, which format), `readers` (read_any and the readers),
`tool_turns`, `validation`, `step_folders` (one RL step from several folders, counted),
`model_check` (the traces' model against --model).
"""

from samspec_bench.trace_formats.files import (FORMAT_FIELDS, FORMATS, LM_EVAL_SAMPLES, SNIFF_LINES, VERL_STEP_FILE,
                                               UnknownTraceFile, detect_file, expand, verl_step_files)
from samspec_bench.trace_formats.model_check import check_models, same_model, trace_models
from samspec_bench.trace_formats.readers import (READERS, BadLine, prompt_group, read_any, read_rl_steps, skipped_counts,
                                                 skipped_line)
from samspec_bench.trace_formats.step_folders import merged_steps_line, steps_in_folders
from samspec_bench.trace_formats.tool_turns import SHAPES as TOOL_SHAPES
from samspec_bench.trace_formats.tool_turns import TOOL_OUTPUT, find_tool_spans, tool_summary
from samspec_bench.trace_formats.validation import VALIDATION_FOLDER, split_validation, validation_line, validation_row

__all__ = ["FORMATS", "FORMAT_FIELDS", "LM_EVAL_SAMPLES", "READERS", "SNIFF_LINES", "TOOL_SHAPES", "VALIDATION_FOLDER",
           "VERL_STEP_FILE", "BadLine", "UnknownTraceFile", "check_models", "detect_file", "expand",
           "TOOL_OUTPUT", "find_tool_spans", "tool_summary", "prompt_group", "read_any", "read_rl_steps", "same_model", "split_validation",
           "merged_steps_line", "skipped_counts", "skipped_line", "steps_in_folders",
           "trace_models", "validation_line", "validation_row", "verl_step_files"]
