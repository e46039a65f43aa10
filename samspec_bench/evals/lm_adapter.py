"""lm-eval's `LM` over a samspec-bench engine (reference or vLLM).

`EngineLM.generate_until` takes all requests lm-eval hands it for a task and runs them in
one `engine.generate` call (continuous batching), with or without the drafter. The context
is tokenized with the engine's tokenizer (no special tokens, as lm-eval's HF model does by
default); lm-eval's `until` strings go to the engine as stop strings, so a request ends at
EOS, at a stop string or at `max_gen_toks`; the text is then cut at the first `until` string
(a verify step may have emitted a few tokens past it).

Every finished request is recorded (`on_record`, called as it finishes: the suite appends it
to the run's generations JSONL) with its token ids, the number of tokens the cut text keeps,
finish reason and acceptance counts; `cache` (key -> earlier record) makes `--resume` skip
requests that were already generated. A request whose generation raises is recorded with
its error and scored as an empty response: one bad sample does not end the run.
"""

from __future__ import annotations

import hashlib
import traceback
from typing import Any, Callable

from lm_eval.api.model import LM

from samspec_bench.bench.engines.base import Request, SamplingParams


def sample_key(arm: str, sample: int, task: str, doc_id: Any, repeat: int = 0) -> str:
    """A response's key in the generations (what --resume reuses); `repeat`: the task's repeats."""
    return f"{arm}|{sample}|{task}|{doc_id}" + (f"|r{repeat}" if repeat else "")


def sample_seed(base: int, task: str, doc_id: Any, sample: int, repeat: int = 0) -> int:
    """The same seed for a (task, doc, sample, repeat) in both arms."""
    doc = f"{doc_id}#{repeat}" if repeat else f"{doc_id}"
    h = hashlib.sha256(f"{base}|{task}|{doc}|{sample}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def cut_at_stop(text: str, until: list[str]) -> tuple[str, str | None]:
    """The text before the earliest stop string, and that string (None when none occurs)."""
    best, which = len(text), None
    for s in until or ():
        if not s:
            continue
        i = text.find(s)
        if 0 <= i < best:
            best, which = i, s
    return text[:best], which


class EngineLM(LM):
    def __init__(self, engine: Any, *, arm: str, sample: int = 0, drafter: Any = None, num_spec_tokens: int = 3,
                 temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0,
                 max_gen_toks: int = 256, cache: dict[str, dict] | None = None,
                 on_record: Callable[[dict], None] | None = None, progress: bool = False):
        super().__init__()
        self.engine = engine
        self.tokenizer = engine.tokenizer
        if self.tokenizer is None:
            raise ValueError("the engine has no tokenizer: lm-eval works on text")
        self.arm = arm
        self.sample = sample
        self.drafter = drafter
        self.num_spec_tokens = num_spec_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.seed = seed
        self.max_gen_toks = max_gen_toks
        self.cache = cache if cache is not None else {}
        self.on_record = on_record
        self.progress = progress
        self.records: list[dict] = []   # this adapter's records (generated or from the cache)
        self.generated = 0              # requests actually generated (not from the cache)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        self.stop_token_ids = (int(eos),) if isinstance(eos, int) else ()

    # lm-eval's chat-template path (simple_evaluate(apply_chat_template=True)): lm-eval builds
    # the chat (few-shot examples as turns with fewshot_as_multiturn) and asks for the prompt text
    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if isinstance(chat_template, str):
            return chat_template
        return getattr(self.tokenizer, "chat_template", None) or ""

    # lm-eval's loglikelihood requests are not needed by generation tasks
    def loglikelihood(self, requests):
        raise NotImplementedError("samspec-bench accuracy runs generation tasks only (generate_until)")

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError("samspec-bench accuracy runs generation tasks only (generate_until)")

    def _params(self, gen_kwargs: dict, task: str, doc_id: Any, until: list[str], repeat: int = 0) -> SamplingParams:
        max_toks = int(gen_kwargs.get("max_gen_toks") or self.max_gen_toks)
        seed = sample_seed(self.seed, task, doc_id, self.sample, repeat) if self.temperature > 0 else None
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, seed=seed,
                              max_tokens=max_toks, stop_token_ids=self.stop_token_ids,
                              stop=tuple(u for u in until if u))

    def _record(self, key: str, inst, until: list[str], out=None, error: str | None = None) -> dict:
        task, doc_id = inst.task_name, inst.doc_id
        rec: dict[str, Any] = {"key": key, "arm": self.arm, "sample": self.sample, "task": task, "doc_id": doc_id}
        if error is not None:
            rec.update({"error": error, "text": "", "token_ids": [], "num_tokens": 0})
            return rec
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        cut, stop = cut_at_stop(text, until)
        # tokens the cut text keeps: the shortest prefix whose decode covers it
        kept = len(out.token_ids)
        if stop is not None:
            lo, hi = 0, len(out.token_ids)
            while lo < hi:
                mid = (lo + hi) // 2
                if len(self.tokenizer.decode(out.token_ids[:mid], skip_special_tokens=True)) >= len(cut):
                    hi = mid
                else:
                    lo = mid + 1
            kept = lo
        c = out.counts
        rec.update({"text": cut, "stop": stop, "token_ids": list(out.token_ids), "num_tokens": len(out.token_ids),
                    "kept_tokens": kept, "finish_reason": out.finish_reason, "prompt_tokens": len(out.prompt_ids),
                    "drafted": int(c.drafted), "accepted": int(c.accepted), "steps": int(c.steps)})
        return rec

    def _emit(self, rec: dict) -> None:
        self.records.append(rec)
        self.cache[rec["key"]] = rec
        if self.on_record is not None:
            self.on_record(rec)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        todo: dict[int, tuple[Request, Any, list[str], str]] = {}
        seen: dict[tuple, int] = {}   # a task with repeats hands the same request `repeats` times
        for i, inst in enumerate(requests):
            context, gen_kwargs = inst.args[0], dict(inst.args[1] or {})
            until = gen_kwargs.get("until") or []
            if isinstance(until, str):
                until = [until]
            repeat = seen.get((inst.task_name, inst.doc_id), 0)
            seen[(inst.task_name, inst.doc_id)] = repeat + 1
            key = sample_key(self.arm, self.sample, inst.task_name, inst.doc_id, repeat)
            if key in self.cache:
                rec = self.cache[key]
                self.records.append(rec)
                results[i] = rec.get("text", "")
                continue
            ids = self.tokenizer.encode(context, add_special_tokens=False)
            if not ids:
                ids = [self.stop_token_ids[0]] if self.stop_token_ids else [0]
            todo[i] = (Request(i, ids, self._params(gen_kwargs, inst.task_name, inst.doc_id, until, repeat)), inst,
                       until, key)
        if todo:
            def on_output(out):
                i = out.req_id
                if i in todo and results[i] is None:
                    _, inst, until, key = todo[i]
                    rec = self._record(key, inst, until, out)
                    rec["seed"] = todo[i][0].params.seed
                    self._emit(rec)
                    results[i] = rec["text"]
                    self.generated += 1
            reqs = [t[0] for t in todo.values()]
            try:
                self._generate(reqs, on_output)
            except Exception:  # noqa: BLE001 - one bad request must not end the run: retry one by one
                for req in reqs:
                    if results[req.req_id] is not None:
                        continue
                    try:
                        self._generate([req], on_output)
                    except Exception as e:  # noqa: BLE001
                        _, inst, until, key = todo[req.req_id]
                        err = f"{type(e).__name__}: {e}"
                        rec = self._record(key, inst, until, error=err + "\n" + traceback.format_exc(limit=3))
                        self._emit(rec)
                        results[req.req_id] = ""
        return [r if r is not None else "" for r in results]

    def _generate(self, reqs: list[Request], on_output: Callable) -> None:
        res = self.engine.generate(reqs, drafter=self.drafter, num_spec_tokens=self.num_spec_tokens,
                                   progress=self.progress, on_output=on_output)
        for out in res.outputs:   # engines that do not call on_output
            on_output(out)
