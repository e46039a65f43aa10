"""SamProposer under a stand-in of vLLM's GPU model runner: the custom_class call path of vLLM
0.32.0's `v1/worker/gpu_model_runner.py` (the same from 0.22 to 0.33; the CPU runner inherits
it), replayed on CPU in the order the runner takes it:

- built by vLLM's own `create_custom_proposer(vllm_config)` where vLLM imports (one
  positional argument), inside the runner's `__init__` after `speculative_config` is set and
  before `requests` / `input_batch` exist; then `load_model(target)`;
- buffers as `InputBatch` holds them: numpy int32 `token_ids_cpu` (max_num_seqs,
  max_model_len) and `num_tokens_no_spec` (max_num_seqs,), whole buffers (not sliced), junk
  past each row's length (earlier occupants' tokens, this step's spec tokens);
- per step: prefill chunks (a partial one samples nothing: `[]`), greedy verification of the
  drafts the scheduler holds, bookkeeping (ids written, counts advanced), then
  `propose(sampled, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)` with device slot
  mappings (here a dict whose every access raises, holding a meta tensor), unless the longest
  sequence plus k exceeds max_model_len: then no call and every row gets k drafts of token 0;
- the answer consumed as the scheduler does (one list per row, Python ints, at most k each,
  pickled / msgpack-encoded, ignored for finished requests and prefill chunks);
- finished requests leave the batch at the next step, holes are filled by new requests, then
  the batch is condensed (the last row moves into a hole).
What only a GPU shows (CUDA tensors, the pinned-memory copies, CUDA graphs) is not here.
"""

from __future__ import annotations

import importlib
import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from samspec_bench.bench.vllm_proposer.proposer import ASYNC_REFUSED, SamProposer
from samspec_bench.bench.vllm_proposer.proposer_options import CLASS_PATH, EXTRA_KEY
from samspec_bench.metrics import ResponseSteps
from samspec_bench.sam.drafters import SamDrafter

K = 3
MAX_LEN = 96
MAX_SEQS = 16
CHUNK = 24   # prefill tokens per step: a longer prompt takes two steps, the first samples nothing
VOCAB = 12   # small: continuations repeat (SAM drafts) and token 0 occurs (vLLM's zero drafts can be accepted)


def create_custom_proposer(vllm_config):
    """vLLM's factory where it imports (vllm/v1/spec_decode/custom_class_proposer.py), else
    what it does: import the class named by speculative_config.model, call it with the config."""
    try:
        from vllm.v1.spec_decode.custom_class_proposer import create_custom_proposer as create
    except Exception:  # noqa: BLE001 - no vLLM here
        module, _, name = vllm_config.speculative_config.model.rpartition(".")
        return getattr(importlib.import_module(module), name)(vllm_config)
    return create(vllm_config)


def vllm_config(*, async_scheduling=False, model=CLASS_PATH):
    """The parts of VllmConfig the factory and the proposer read."""
    return SimpleNamespace(
        speculative_config=SimpleNamespace(method="custom_class", model=model, num_speculative_tokens=K),
        model_config=SimpleNamespace(max_model_len=MAX_LEN),
        scheduler_config=SimpleNamespace(async_scheduling=async_scheduling, max_num_seqs=MAX_SEQS))


class DeviceSlotMappings(dict):
    """slot_mappings as the GPU runner passes them (layer name -> a device tensor, here on the
    meta device, whose data cannot be read); every access raises: on a GPU a read syncs."""

    def _touched(self, *args, **kwargs):
        raise AssertionError("slot_mappings was read (on a GPU this waits for the device)")

    __getitem__ = __iter__ = __len__ = __contains__ = keys = values = items = get = _touched


def slot_mappings(tokens: int) -> DeviceSlotMappings:
    return DeviceSlotMappings({"model.layers.0.self_attn.attn": torch.empty(tokens, dtype=torch.int64, device="meta")})


@dataclass
class Req:
    rid: str
    prompt: list[int]
    cont: list[int]            # the target's greedy continuation: verification accepts what matches it
    out: list[int] = field(default_factory=list)
    computed: int = 0          # prompt tokens prefilled
    spec: list[int] = field(default_factory=list)   # drafts the scheduler holds for the next step
    spec_is_sam: bool = False
    verified: tuple | None = None   # (drafted, accepted, emitted) of SAM's draft verified at the last step
    finished: bool = False
    sampling_params: SimpleNamespace = None

    def __post_init__(self):
        self.sampling_params = SimpleNamespace(max_tokens=len(self.cont), stop_token_ids=[], eos_token_id=None,
                                               extra_args={EXTRA_KEY: {"key": self.rid, "length": "fixed"}})


class InputBatch:
    """gpu_input_batch.py: the host buffers (torch.zeros(...).numpy(), :131-155), condensed rows."""

    def __init__(self, rng):
        self.token_ids_cpu = torch.zeros((MAX_SEQS, MAX_LEN), dtype=torch.int32).numpy()
        self.token_ids_cpu[:] = rng.integers(0, VOCAB, size=self.token_ids_cpu.shape)   # earlier occupants
        self.num_tokens_no_spec = torch.zeros(MAX_SEQS, dtype=torch.int32).numpy()
        self.num_prompt_tokens = torch.zeros(MAX_SEQS, dtype=torch.int32).numpy()
        self._req_ids: list[str | None] = []
        self.req_id_to_index: dict[str, int] = {}

    @property
    def req_ids(self) -> list:
        return self._req_ids

    def add(self, req: Req) -> None:
        i = self._req_ids.index(None) if None in self._req_ids else len(self._req_ids)   # a hole first
        if i == len(self._req_ids):
            self._req_ids.append(None)
        self._req_ids[i] = req.rid
        self.req_id_to_index[req.rid] = i
        p = len(req.prompt)
        self.token_ids_cpu[i, :p] = req.prompt     # the rest of the row keeps what was there
        self.num_tokens_no_spec[i] = self.num_prompt_tokens[i] = p

    def remove(self, rid: str) -> None:
        self._req_ids[self.req_id_to_index.pop(rid)] = None

    def condense(self) -> None:
        while None in self._req_ids:
            hole = self._req_ids.index(None)
            last = max(i for i, r in enumerate(self._req_ids) if r is not None) if any(self._req_ids) else -1
            if last < hole:
                del self._req_ids[hole:]
                return
            rid, n = self._req_ids[last], int(self.num_tokens_no_spec[last])
            self._req_ids[hole], self._req_ids[last] = rid, None
            self.req_id_to_index[rid] = hole
            self.token_ids_cpu[hole, :n] = self.token_ids_cpu[last, :n]   # only the row's tokens move
            self.num_tokens_no_spec[hole] = n
            self.num_prompt_tokens[hole] = self.num_prompt_tokens[last]


class StandInRunner:
    """GPUModelRunner's custom_class path (line numbers: vLLM 0.32.0 gpu_model_runner.py)."""

    def __init__(self, config, rng, target_model="target"):
        self.speculative_config = config.speculative_config              # :485, before the drafter
        self.drafter = create_custom_proposer(config)                     # :603-606
        self.requests: dict[str, Req] = {}                                # :683
        self.input_batch = InputBatch(rng)                                # :714
        if hasattr(self.drafter, "load_model"):                           # :5070-5073
            self.drafter.load_model(target_model)
        self.calls = self.skipped = 0

    def _update_states(self, new: list[Req]) -> None:
        """Finished requests leave, new ones take the holes, then the batch is condensed."""
        for rid in [r for r in self.input_batch.req_ids if r is not None and self.requests[r].finished]:
            self.input_batch.remove(rid)
            del self.requests[rid]
        for req in new:
            self.requests[req.rid] = req
            self.input_batch.add(req)
        self.input_batch.condense()

    def step(self, new: list[Req]) -> tuple[list[list[int]], list[list[int]] | None]:
        """One engine step; returns the sampled ids and the drafts (None: propose was skipped)."""
        self._update_states(new)
        b = self.input_batch
        sampled, seq_lens = [], []
        for i, rid in enumerate(b.req_ids):
            req, n = self.requests[rid], int(b.num_tokens_no_spec[i])
            req.verified = None
            if req.computed < len(req.prompt):                   # a prefill chunk
                req.computed += min(CHUNK, len(req.prompt) - req.computed)
                seq_lens.append(req.computed)
                new_ids = [] if req.computed < len(req.prompt) else req.cont[:1]   # partial: discarded
            else:
                spec = req.spec[: MAX_LEN - n - 1]                # the scheduler's cut at max_model_len
                b.token_ids_cpu[i, n: n + len(spec)] = spec       # update_req_spec_token_ids: junk past n
                seq_lens.append(n + len(spec))
                pos, a = len(req.out), 0
                while a < len(spec) and pos + a < len(req.cont) and spec[a] == req.cont[pos + a]:
                    a += 1
                new_ids = req.cont[pos: pos + a + 1]
                if req.spec_is_sam:
                    req.verified = (len(spec), a, len(new_ids))
            b.token_ids_cpu[i, n: n + len(new_ids)] = new_ids   # bookkeeping (:3560-3587)
            b.num_tokens_no_spec[i] = n + len(new_ids)
            req.out += new_ids
            req.finished = len(req.out) >= len(req.cont) or n + len(new_ids) >= MAX_LEN
            sampled.append(list(new_ids))
        fits = max(seq_lens) + K <= MAX_LEN                       # _input_fits_in_drafter (:4288-4302)
        if fits:
            self.calls += 1
            drafts = self.drafter.propose(sampled, b.num_tokens_no_spec, b.token_ids_cpu,
                                          slot_mappings=slot_mappings(sum(seq_lens)))   # :4778-4785
        else:
            self.skipped += 1
            drafts = [[0] * K for _ in b.req_ids]                 # :4454-4465
        self._schedule_drafts(drafts, is_sam=fits)
        return sampled, drafts if fits else None

    def _schedule_drafts(self, drafts, is_sam: bool) -> None:
        """take_draft_token_ids -> Scheduler.update_draft_token_ids, with the checks the path implies."""
        b = self.input_batch
        assert isinstance(drafts, list) and len(drafts) == len(b.req_ids)
        for d in drafts:
            assert isinstance(d, list) and len(d) <= K and all(type(t) is int for t in d), d
        assert pickle.loads(pickle.dumps(drafts)) == drafts
        try:
            import msgspec
        except ImportError:
            msgspec = None
        if msgspec is not None:
            assert msgspec.msgpack.decode(msgspec.msgpack.encode(drafts)) == drafts
        for rid, d in zip(b.req_ids, drafts):
            req = self.requests[rid]
            if req.finished:
                continue
            if req.computed < len(req.prompt):                    # prefill chunk: drafts ignored
                req.spec, req.spec_is_sam = [], False
                continue
            req.spec, req.spec_is_sam = list(d), is_sam


def _requests(rng, count: int) -> list[Req]:
    out = []
    for j in range(count):
        plen = int(rng.integers(6, 40))   # prompts over CHUNK take two prefill steps
        motif = rng.integers(0, VOCAB, size=int(rng.integers(2, 6))).tolist()
        cont: list[int] = []
        length = int(rng.integers(8, 90))   # some run into max_model_len
        while len(cont) < length:
            cont += motif if rng.random() < 0.7 else rng.integers(0, VOCAB, size=2).tolist()
        out.append(Req(f"req-{j}", rng.integers(0, VOCAB, size=plen).tolist(), cont[:length]))
    return out


def _room(req: Req, n: int) -> int:
    """What the proposer may draft: k, max_model_len, the request's max_tokens."""
    return min(K, MAX_LEN - n - 1, len(req.cont) - len(req.out) - 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_proposer_under_the_gpu_runner_call(seed):
    """Every draft equals the request's own automaton's draft over its true tokens (row moves,
    junk past the row, prefill chunks, the buffers read in place); the records hold exactly
    the SAM drafts that were verified at a step followed by a call, never vLLM's zero drafts;
    each record accounts for every output token the proposer was shown; every automaton is freed."""
    rng = np.random.default_rng(seed)
    runner = StandInRunner(vllm_config(), rng)
    prop = runner.drafter
    assert isinstance(prop, SamProposer) and prop.runner is runner and prop.request_mapping == "request-id"
    ref = SamDrafter(length="fixed")
    fed: dict[str, int] = {}          # tokens of each request the reference automaton holds (at its last call)
    want_records: dict[str, list] = {}
    skipped: set[str] = set()         # requests known to the proposer that decoded at a step without a call
    gapped: set[str] = set()          # requests whose record must show a gap
    waiting = _requests(rng, 30)
    all_reqs = {r.rid: r for r in waiting}
    partial_rows = 0
    while waiting or any(not r.finished for r in runner.requests.values()):
        running = sum(not r.finished for r in runner.requests.values())
        wanted = int(rng.integers(0, 3)) or int(running == 0)
        admit = [waiting.pop(0) for _ in range(min(len(waiting), 6 - running, wanted))]
        sampled, drafts = runner.step(admit)
        b = runner.input_batch
        for i, rid in enumerate(b.req_ids):
            req = runner.requests[rid]
            if not sampled[i]:
                partial_rows += 1
                assert drafts is None or drafts[i] == [], "a partial prefill drafts nothing"
                assert rid not in prop._states
                continue
            if drafts is None:
                if rid in fed:
                    skipped.add(rid)
                continue
            if req.verified is not None:
                want_records.setdefault(rid, []).append(req.verified[:2])
            n = int(b.num_tokens_no_spec[i])
            if rid in skipped or (rid not in fed and n - len(sampled[i]) > len(req.prompt)):
                gapped.add(rid)   # the call was skipped at this request's earlier step(s)
            skipped.discard(rid)
            if rid not in fed:
                ref.start(rid, req.prompt)
                fed[rid] = len(req.prompt)
            ref.extend(rid, (req.prompt + req.out)[fed[rid]: n])
            fed[rid] = n
            room = _room(req, n)
            assert drafts[i] == (ref.propose(rid, room) if room > 0 else []), f"{rid} at {n} tokens"
    assert runner.skipped > 0 and runner.calls > 0 and partial_rows > 0   # the scenario has all three
    runner.step([Req("last", [1, 2, 3], [4, 5])])   # the next step frees the finished requests
    assert set(prop._states) == {"last"} and prop.num_freed == len(fed)
    records = {r["key"]: r for r in prop.take_records(list(all_reqs))}
    assert set(records) == set(fed)   # a request that finished with every call skipped has no state
    assert len(gapped) > 0
    for rid in fed:
        req, rec = all_reqs[rid], records[rid]
        ResponseSteps(rid, len(req.prompt), len(req.out), rec["position"], rec["drafted"], rec["accepted"],
                      rec["emitted"])   # raises where a step is inconsistent
        got = [(d, a) for d, a in zip(rec["drafted"], rec["accepted"]) if d > 0]
        assert got == [(d, a) for d, a in want_records.get(rid, []) if d > 0], rid
        # every output token the proposer was shown (all but the first: the prefill's) is in a
        # step or unseen; those after its last call (skipped to the end) it never saw
        assert sum(rec["emitted"]) + rec["unseen_tokens"] == fed[rid] - len(req.prompt) - 1, rid
        assert (rec["gaps"] > 0) == (rid in gapped), rid
    assert prop.describe()["calls_after_skipped_steps"] > 0


def _two_rows(prop: SamProposer, runner: StandInRunner):
    """Two requests decoding one token per step (nothing accepted: the tokens never repeat)."""
    b = runner.input_batch
    for rid in ("a", "b"):
        runner.requests[rid] = Req(rid, list(range(10)), list(range(100, 180)))
        b.add(runner.requests[rid])
    counter = iter(range(1000, 10_000))

    def call(propose=True):
        sampled = []
        for i in range(2):
            n = int(b.num_tokens_no_spec[i])
            b.token_ids_cpu[i, n] = t = next(counter)
            b.num_tokens_no_spec[i] = n + 1
            runner.requests[b.req_ids[i]].out.append(t)
            sampled.append([t])
        if propose:
            return prop.propose(sampled, b.num_tokens_no_spec, b.token_ids_cpu, slot_mappings=slot_mappings(2))
        return None
    return call


def test_skipped_call_drops_the_stale_draft_and_its_cost_sample():
    """Calls 1..6, a step without a call (max_model_len near: vLLM's zero drafts), calls 8 and
    9. The cost fit takes the intervals of calls 3..6 and 9 (not 1 and 2: new requests; not 8:
    it spans two steps); the records hold the steps verified at calls 2..6 and 9, the draft
    pending at the skipped step is dropped, the tokens of steps 7 and 8 are unseen."""
    rng = np.random.default_rng(0)
    runner = StandInRunner(vllm_config(), rng)
    prop = runner.drafter
    call = _two_rows(prop, runner)
    for _ in range(6):
        call()
    assert prop.cost_fit.steps == 4
    call(propose=False)
    call()
    assert prop.cost_fit.steps == 4 and prop.describe()["calls_after_skipped_steps"] == 1
    call()
    assert prop.cost_fit.steps == 5
    for rec in prop.take_records(["a", "b"]):
        assert len(rec["drafted"]) == 6 and rec["gaps"] == 1 and rec["unseen_tokens"] == 2
        assert sum(rec["emitted"]) + rec["unseen_tokens"] == 9 - 1


def test_empty_call_frees_nothing():
    """An empty sampled list (async scheduling's shape) while rows are in the batch: no draft,
    no request freed, and the next call goes on without a gap."""
    runner = StandInRunner(vllm_config(), np.random.default_rng(1))
    prop = runner.drafter
    call = _two_rows(prop, runner)
    call()
    assert prop.propose([], runner.input_batch.num_tokens_no_spec, runner.input_batch.token_ids_cpu) == []
    assert set(prop._states) == {"a", "b"} and prop.num_freed == 0
    call()
    assert prop.describe()["calls_after_skipped_steps"] == 0 and prop.describe()["empty_calls"] == 1


def test_async_scheduling_refused_at_construction():
    with pytest.raises((ValueError, RuntimeError), match="async_scheduling=False") as exc:
        StandInRunner(vllm_config(async_scheduling=True), np.random.default_rng(0))
    assert ASYNC_REFUSED in str(exc.value)
    assert "\n" not in ASYNC_REFUSED


def test_cpu_tensors_taken_device_tensors_refused():
    """Buffers given as CPU torch tensors draft as the numpy ones; a tensor on a device (here
    meta) is refused with its name instead of being read."""
    drafts = []
    for as_tensor in (False, True):
        runner = StandInRunner(vllm_config(), np.random.default_rng(2))
        b = runner.input_batch
        runner.requests["a"] = Req("a", [1, 2, 3, 1, 2, 3, 1, 2], [3, 1, 2, 3, 1, 2, 3, 1])
        b.add(runner.requests["a"])
        b.token_ids_cpu[0, 8], b.num_tokens_no_spec[0] = 3, 9
        args = (b.num_tokens_no_spec, b.token_ids_cpu)
        if as_tensor:
            args = tuple(torch.from_numpy(x) for x in args)
        drafts.append(runner.drafter.propose([[3]], *args, slot_mappings=slot_mappings(1)))
    assert drafts[0] == drafts[1] == [[1, 2, 3]]
    meta = torch.empty((MAX_SEQS, MAX_LEN), dtype=torch.int32, device="meta")
    with pytest.raises(TypeError, match="token_ids_cpu is a tensor on meta"):
        runner.drafter.propose([[3]], b.num_tokens_no_spec, meta)
