"""A slow, obvious reference of ONE aggregated Dynamo 1.4.2 worker (dp 1), for property tests.

Written from the spec (tests must not depend on it at run time, so the rules are restated here):
dynamo-mocker-notes.md sections 3.4-3.8 and 5.3, with the corrections of dynamo-1.4.2-verified.md
(and, for block identity, of Dynamo 1.4.2 itself, see "Physical blocks"):

* Block contents. The tokens of a prompt are its hash ids (low 32 bits) repeated
  ``trace_block_size`` times, cut to the input length. The content key of full prompt block ``j``
  is the tuple of the first ``(j + 1) * block_size`` tokens (equal prefixes <=> equal chained
  hashes). Blocks holding the prompt's partial tail or generated tokens have keys private to their
  request (``("own", row, j)``): only that request, re-admitted after a preemption, can match them.
* Physical blocks (notes 5.3, corrected by experiment on Dynamo 1.4.2, see below). The pool holds
  ``num_gpu_blocks`` slots: active blocks (refcount > 0), cached blocks (refcount 0, registered,
  an LRU, oldest first) and free slots. At admission a request matches the leading full blocks of
  its known context (prompt + generated) that are registered; those blocks of its cached prefix
  are *hits*: a reference to the key's primary block (its earliest registered block still alive),
  re-activating it if it is cached. Every other block a request allocates is *fresh*: a free
  slot, else the slot of the oldest cached block (evicted). Allocation is all-or-nothing (it fits
  iff fresh blocks + cached primaries to re-activate <= capacity - active). A fresh block is
  registered under its content key once all its tokens are computed (at schedule time, so later
  requests of the same pass can hit it); if that key is already registered it stays a separate
  duplicate (never merged: it counts in the decode KV and takes a slot, cached or active). On
  release (tail first) a block whose refcount drops to 0 is cached if registered, else its slot is
  free (a block whose tokens were not all computed). With prefix caching off nothing is matched
  or registered.
  Why (Dynamo 1.4.2 black-box runs, 2000 random traces): a request recomputing its last cached
  block (cached tokens are capped at ((L - 1) // bs) * bs), or computing a chunk-split block,
  while another request holds an equal block adds one block to the decode KV; a prefix hit goes
  to the first block, not to the duplicate; a released duplicate keeps occupying a slot.
* Pass (notes 3.4): phase A schedules the running requests in running order (by index, as
  Dynamo's loop does) while budget remains; phase B, only if nothing was preempted, takes waiting
  requests FIFO while ``running < max_num_seqs``: reject a prompt ``>= max_model_len`` or a FRESH
  request whose known length needs more blocks than the pool has; admit iff
  ``ceil(len / bs) - active_cached_blocks <= capacity - active`` (else head-of-line wait).
  ``schedule`` = Dynamo's ``schedule_request``: chunk ``min(remaining, budget)``, allocate at
  schedule time, on failure preempt (lifo: last running, fifo: first running; the victim's blocks
  are freed, its computed tokens reset, its scheduled work of this pass refunded, and it goes to
  the FRONT of waiting).
* Cached tokens at admission = leading matched full blocks of the known context (prompt +
  generated), capped at ``((len - 1) // bs) * bs`` when a token must still be generated.
  ``reused_input_tokens`` = max over admissions.
* Time (verified Q1-Q3, X1): prefill ``t = n * (sum(prefix + chunk) // n - sum(prefix) // n)``
  over requests with prompt tokens in the pass; decode from the physical active blocks after the
  pass's allocations (and after freeing requests that finish without a token); each duration
  quantised to the ns; ``end = (now + prefill) + decode``. Every request whose computed tokens
  reach its known length emits one token, stamped at ``end``. A pass with no token has decode 0.
* Loop (notes 8.2, verified Q10): at one time, pass completions, then arrivals (<= now, in
  (time, file) order), then a new pass if the worker is idle and has work. A zero-duration pass
  that changed something completes at once (another pass may follow at the same time); one that
  changed nothing stalls the worker until a new arrival. Nothing left to happen while requests are
  unfinished is a dead end.

Only the timing functions are shared with fastsim (``fastsim.kernels.perf``).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from fastsim.kernels.perf import decode_time_nb, modeled_ms_nb, prefill_time_nb
from fastsim.perf import polynomial_model

_PERF = polynomial_model()
SCHEDULED, BLOCKED, SELF_PREEMPTED = "scheduled", "blocked", "self-preempted"


class NaiveDeadEnd(Exception):
    """No future event while requests are unfinished."""


class Request:
    def __init__(self, row, arrival, tokens, osl):
        self.row = row
        self.arrival = arrival
        self.tokens = tokens
        self.prompt_len = len(tokens)
        self.osl = osl
        self.generated = 0
        self.computed = 0
        self.allocated = 0  # tokens covered by the blocks held
        self.held = []  # ids of the physical blocks held, block 0 first
        self.status = "pending"  # waiting, running, preempted, completed, rejected
        self.first_admit = None
        self.token_times = []
        self.terminal = None
        self.reused = 0

    @property
    def length(self):
        return self.prompt_len + self.generated


class Pool:
    """Physical blocks of one rank. Several blocks may carry the same content key: a block computed
    afresh while an equal one exists stays a separate physical block (a duplicate); prefix-cache
    hits always go to the earliest registered block of a key that is still alive (the primary)."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.ref = {}  # active block id -> refcount
        self.inactive = OrderedDict()  # cached free block ids, oldest first
        self.key_of = {}  # block id -> content key (registered blocks only)
        self.by_key = {}  # content key -> registered block ids (active or cached)
        self.next_id = 0

    def present(self, key):
        return bool(self.by_key.get(key))

    def primary(self, key):
        """The block a prefix-cache hit on ``key`` uses: the earliest registered one still alive."""
        return self.by_key[key][0]

    def fits(self, n_slots):
        return len(self.ref) + n_slots <= self.capacity

    def hit(self, key):
        """Take a reference to the primary block of ``key`` (reactivating it if it is cached)."""
        b = self.primary(key)
        if b in self.inactive:
            del self.inactive[b]
            self.ref[b] = 0
        self.ref[b] += 1
        return b

    def fresh(self):
        """A new, unregistered block: a free slot, else the slot of the oldest cached block."""
        if len(self.ref) + len(self.inactive) >= self.capacity:
            victim, _ = self.inactive.popitem(last=False)
            self._forget(victim)
        b = self.next_id
        self.next_id += 1
        self.ref[b] = 1
        return b

    def register(self, b, key):
        self.key_of[b] = key
        self.by_key.setdefault(key, []).append(b)

    def _forget(self, b):
        key = self.key_of.pop(b, None)
        if key is not None:
            self.by_key[key].remove(b)

    def release(self, b):
        self.ref[b] -= 1
        if self.ref[b] == 0:
            del self.ref[b]
            if b in self.key_of:
                self.inactive[b] = True
            # an unregistered (not fully computed) block simply frees its slot


class NaiveEngine:
    """One worker. ``rows``: (arrival_ms, hash_ids, input_length, output_length) in file order."""

    def __init__(self, rows, *, trace_block_size, block_size=64, num_gpu_blocks=16384, max_num_seqs=256,
                 max_num_batched_tokens=8192, enable_prefix_caching=True, enable_chunked_prefill=True,
                 preemption_mode="lifo", max_model_len=None, speedup_ratio=1.0, decode_speedup_ratio=1.0,
                 engine_type="vllm"):
        self.bs = block_size
        # TRT-LLM (guaranteed_no_evict): a request reserves its whole sequence at admission, and its
        # output is cut to the room its prompt leaves in the pool (a prompt that leaves none is rejected)
        self.trtllm = engine_type == "trtllm"
        if self.trtllm and (max_model_len is None or max_model_len > num_gpu_blocks * block_size):
            max_model_len = num_gpu_blocks * block_size
        self.cap = num_gpu_blocks
        self.max_seqs = max_num_seqs if max_num_seqs is not None else math.inf
        self.budget_per_pass = max_num_batched_tokens if max_num_batched_tokens is not None else math.inf
        self.caching = enable_prefix_caching
        self.chunked = enable_chunked_prefill
        self.lifo = preemption_mode == "lifo"
        self.mml = max_model_len
        self.speedup = speedup_ratio
        self.decode_speedup = decode_speedup_ratio
        self.pool = Pool(num_gpu_blocks)
        self.reqs = []
        for row, (arrival, hash_ids, isl, osl) in enumerate(rows):
            tokens = [h & 0xFFFFFFFF for h in hash_ids for _ in range(trace_block_size)][:isl]
            assert len(tokens) == isl
            self.reqs.append(Request(row, arrival, tokens, osl))
        self.waiting = deque()
        self.running = []

    # ------------------------------------------------------------------ blocks
    def key(self, r, j):
        if self.caching and (j + 1) * self.bs <= r.prompt_len:
            return ("prompt", tuple(r.tokens[: (j + 1) * self.bs]))
        return ("own", r.row, j)

    def free(self, r):
        for b in reversed(r.held):
            self.pool.release(b)
        r.held = []
        r.allocated = 0

    def completion_blocks(self, r):
        """TRT-LLM: the blocks ``r`` holds when it completes."""
        return -(-min(r.prompt_len + r.osl, self.mml) // self.bs)

    def generation_complete(self, r):
        if r.generated >= r.osl:
            return True
        return self.mml is not None and r.length >= self.mml

    def prefix_hit(self, r):
        """(cached tokens, active cached blocks) of ``r`` about to be admitted."""
        if not self.caching:
            return 0, 0
        matched = 0
        while matched < r.length // self.bs and self.pool.present(self.key(r, matched)):
            matched += 1
        cached = matched * self.bs
        if not self.trtllm and not self.generation_complete(r):  # (TRT-LLM reuses it all)
            cached = min(cached, ((r.length - 1) // self.bs) * self.bs)
        active = sum(1 for j in range(cached // self.bs) if self.pool.primary(self.key(r, j)) in self.pool.ref)
        return cached, active

    # ------------------------------------------------------------------ scheduling
    def preempt(self, v):
        self.running.remove(v)
        self.free(v)
        v.computed = 0
        v.status = "preempted"
        self.waiting.appendleft(v)
        self.preempted_any = True
        self.changed = True
        if v.row in self.scheduled:
            tokens, prompt_tokens, prefix = self.scheduled.pop(v.row)
            self.budget += tokens
            if prompt_tokens > 0:
                self.batch[0] -= 1
                self.batch[1] -= prefix + prompt_tokens
                self.batch[2] -= prefix

    def schedule(self, r, cached):
        bs = self.bs
        ecb = r.computed + cached
        prompt_before = min(ecb, r.prompt_len)
        remaining = r.length - ecb
        if (r.prompt_len - prompt_before > 0 and not self.chunked
                and r.prompt_len - prompt_before > self.budget):
            return BLOCKED
        desired = min(remaining, self.budget)
        if desired == 0 and remaining > 0:
            return BLOCKED
        target = ecb + desired
        actual = target
        while target > r.allocated:
            # blocks of the cached prefix are hits on registered blocks; every other block is fresh
            js = range(len(r.held), -(-target // bs))
            hits = [self.key(r, j) for j in js if j < cached // bs]
            slots = len(js) - len(hits) + sum(1 for k in hits if self.pool.primary(k) not in self.pool.ref)
            if self.pool.fits(slots):
                r.held += [self.pool.hit(self.key(r, j)) if j < cached // bs else self.pool.fresh() for j in js]
                r.allocated = target
                break
            if not self.running:
                actual = ecb
                break
            victim = self.running[-1] if self.lifo else self.running[0]
            self.preempt(victim)
            if victim is r:
                return SELF_PREEMPTED
        used = actual - ecb
        if used == 0 and actual < r.length:
            return BLOCKED
        r.computed = actual
        if self.caching:  # blocks now fully computed become prefix-cache visible
            for j, b in enumerate(r.held):
                if b not in self.pool.key_of and (j + 1) * bs <= actual:
                    self.pool.register(b, self.key(r, j))
        prompt_tokens = min(actual, r.prompt_len) - prompt_before
        self.scheduled[r.row] = (used, prompt_tokens, prompt_before)
        if prompt_tokens > 0:
            self.batch[0] += 1
            self.batch[1] += prompt_before + prompt_tokens
            self.batch[2] += prompt_before
        self.budget -= used
        self.changed = self.changed or used > 0
        return SCHEDULED

    def phase_running(self):
        """Phase A: running requests in running order, by index as Dynamo's loop does (so a fifo
        victim taken from before the current request shifts the list and the next request waits
        for the next pass)."""
        i = 0
        while i < len(self.running) and self.budget > 0:
            out = self.schedule(self.running[i], 0)
            if out == SCHEDULED:
                i += 1
            elif out == BLOCKED:
                break

    def run_pass(self, now):
        """One forward pass starting at ``now``: (end, changed, terminals [(request, status)])."""
        self.budget = self.budget_per_pass
        self.scheduled = {}
        self.batch = [0, 0, 0]  # count, sum(prefix + prompt tokens), sum(prefix)
        self.preempted_any = False
        self.changed = False
        terminals = []
        self.phase_running()
        while not self.preempted_any and len(self.running) < self.max_seqs and self.waiting:
            r = self.waiting[0]
            fresh = r.status == "waiting"
            if (self.mml is not None and r.prompt_len >= self.mml) or (
                    fresh and -(-r.length // self.bs) > self.cap):
                self.waiting.popleft()
                r.status = "rejected"
                terminals.append(r)
                self.changed = True
                continue
            cached, active_cached = self.prefix_hit(r)
            if self.trtllm:
                # every running request's remaining reservation is spoken for
                reserved = sum(self.completion_blocks(x) - len(x.held) for x in self.running)
                if self.completion_blocks(r) - active_cached > self.cap - len(self.pool.ref) - reserved:
                    break
            elif -(-r.length // self.bs) - active_cached > self.cap - len(self.pool.ref):
                break
            before = self.budget
            if self.schedule(r, cached) != SCHEDULED:
                break
            self.waiting.popleft()
            self.running.append(r)
            r.status = "running"
            if r.first_admit is None:
                r.first_admit = now
            r.reused = max(r.reused, cached)
            self.changed = True
            if before == self.budget and self.budget == 0:
                break
        n, isl_sum, prefix_sum = self.batch
        prefill = 0.0
        if n > 0:
            t = n * (isl_sum // n - prefix_sum // n)
            prefill = modeled_ms_nb(prefill_time_nb(_PERF, t), self.speedup)
        ready = []
        for r in list(self.running):
            if r.computed < r.length:
                continue
            if self.generation_complete(r):  # e.g. zero output tokens: done without a token
                self.running.remove(r)
                self.free(r)
                r.status = "completed"
                terminals.append(r)
                self.changed = True
            else:
                ready.append(r)
        decode = 0.0
        if ready:
            total_len = sum(r.length for r in ready)
            raw = decode_time_nb(_PERF, float(len(self.pool.ref) * self.bs), float(total_len // len(ready)),
                                 float(self.cap * self.bs))
            decode = modeled_ms_nb(raw, self.speedup * self.decode_speedup)
        end = (now + prefill) + decode
        for r in ready:
            r.generated += 1
            r.token_times.append(end)
            self.changed = True
            if self.generation_complete(r):
                self.running.remove(r)
                self.free(r)
                r.status = "completed"
                terminals.append(r)
        return end, self.changed, terminals

    # ------------------------------------------------------------------ event loop
    def run(self, max_passes=1_000_000):
        order = sorted(self.reqs, key=lambda r: (r.arrival, r.row))
        pos = 0
        now = 0.0
        busy_until = None
        pending = []
        stalled = False
        passes = 0
        while True:
            while True:
                changed = False
                if busy_until is not None and busy_until <= now:
                    for r in pending:
                        r.terminal = busy_until
                    busy_until, pending, changed = None, [], True
                while pos < len(order) and order[pos].arrival <= now:
                    order[pos].status = "waiting"
                    self.waiting.append(order[pos])
                    pos += 1
                    changed, stalled = True, False
                if busy_until is None and not stalled and (self.waiting or self.running):
                    passes += 1
                    if passes > max_passes:
                        raise RuntimeError("naive engine: too many passes")
                    end, progress, terms = self.run_pass(now)
                    if end > now:
                        busy_until, pending, changed = end, terms, True
                    elif progress:
                        for r in terms:
                            r.terminal = now
                        changed = True
                    else:
                        stalled = True
                if not changed:
                    break
            if all(r.terminal is not None for r in self.reqs):
                return self.records()
            times = [t for t in (busy_until, order[pos].arrival if pos < len(order) else None) if t is not None]
            if not times:
                unfinished = sum(1 for r in self.reqs if r.terminal is None)
                raise NaiveDeadEnd(f"dead end with {unfinished} in-flight requests remaining")
            now = min(times)

    def records(self):
        """Per-request results, in row order (the fields of Dynamo's JSONL that fastsim compares)."""
        out = []
        for r in self.reqs:
            out.append(dict(
                arrival_time_ms=r.arrival,
                first_admit_ms=r.first_admit,
                first_token_ms=r.token_times[0] if r.token_times else None,
                last_token_ms=r.token_times[-1] if r.token_times else None,
                terminal_time_ms=r.terminal,
                output_length=r.generated,
                reused_input_tokens=r.reused,
                terminal_status=r.status,
            ))
        return out
