"""The kv_routers of SGLang disaggregated serving on the plain-Python reference ranks (decision 0440).

The compiled loop runs ``kernels/router.py``'s router, fed by the prefill ranks' KV event rings
(``kernels/sglang_disagg_route.py``). This module computes the same choices from the reference's
own state, so that the tests can compare the two:

* what a prefill rank has published at a moment is its radix tree as it stood before the pass in
  flight (the pages a pass stores or evicts are published at its end; a release's at the release),
  plus the complete prompt pages of the copies it holds (from the end of their prefill pass until
  their release is published);
* the costs, the loads and the tie-breaking draws are the router kernels' (splitmix64 from the same
  seed), with the derived configs of each pool (``fastsim/sim_disagg.py``'s
  ``stage_router_configs``).
"""

from __future__ import annotations

from collections import Counter

_MASK = (1 << 64) - 1


class TieBreaker:
    """The router kernels' random draws (``kernels/router.py``'s ``_next_u64``) for ties."""

    def __init__(self, seed):
        self.state = (int(seed) * 0x9E3779B97F4A7C15 + 12345) % (1 << 64)

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        x = self.state
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        return x ^ (x >> 31)

    def lowest(self, costs):
        """The index of the lowest cost, a tie broken by one draw."""
        lo = min(costs)
        ties = [k for k, c in enumerate(costs) if c == lo]
        return ties[self.next_u64() % len(ties)] if len(ties) > 1 else ties[0]


def chained(keys):
    """Each page's key chained over the pages before it (a page is named by its path)."""
    out, prev = [], 0
    for k in keys:
        prev = hash((prev, k))
        out.append(prev)
    return out


def _tree_chains(tree):
    """The chained keys of every page a radix tree holds."""
    out = set()
    stack = [(tree.root, 0)]
    while stack:
        node, prev = stack.pop()
        for child in node.children.values():
            p = prev
            for k in child.keys:
                p = hash((p, k))
                out.add(p)
            stack.append((child, p))
    return out


class DecodeRouter:
    """The decode pool's router: no overlap, a rank's cost its active prompt pages plus the
    request's (and ``decode_active_request_weight`` times its requests)."""

    def __init__(self, cfg, n_ranks, seed):
        self.req_weight = float(cfg.decode_active_request_weight)
        self.active = [0] * n_ranks
        self.nreq = [0] * n_ranks
        self.ties = TieBreaker(seed)

    def route(self, nfull):
        costs = [float(a + nfull) + (self.req_weight * q if self.req_weight != 0.0 else 0.0)
                 for a, q in zip(self.active, self.nreq)]
        k = self.ties.lowest(costs)
        self.active[k] += nfull
        self.nreq[k] += 1
        return k

    def done(self, k, nfull):
        self.active[k] -= nfull
        self.nreq[k] -= 1


class _Published:
    """What one prefill rank has published: its tree (as before the pass in flight) and the
    prompt pages of its held copies."""

    def __init__(self):
        self.snapshot = None   # (end of the pass in flight, the tree's chained keys before it)
        self.holds = Counter()
        self.withdrawn = []    # (when a release is published, the chained keys it withdraws)

    def overlap(self, tree, chains, keys, now):
        for stamp, gone in [w for w in self.withdrawn if w[0] <= now]:
            self.holds.subtract(gone)
        self.withdrawn = [w for w in self.withdrawn if w[0] > now]
        if self.snapshot is not None and now < self.snapshot[0]:
            seen = self.snapshot[1]
            in_tree = 0
            while in_tree < len(chains) and chains[in_tree] in seen:
                in_tree += 1
        else:
            in_tree = tree.match(keys, readonly=True)[0]
        j = 0
        while j < len(chains) and (j < in_tree or self.holds[chains[j]] > 0):
            j += 1
        return j


class PrefillRouter:
    """The prefill pool's router: overlaps from what the ranks published, the prefill load
    ``isl - overlap`` from the routing to the end of the copy's prefill pass; no active pages."""

    def __init__(self, cfg, n_ranks, seed):
        self.pls = cfg.effective_prefill_load_scale
        self.credit = cfg.effective_credit
        self.track_prefill = bool(cfg.router_track_prefill_tokens)
        self.decay = float(cfg.overlap_score_credit_decay)
        self.req_weight = float(cfg.decode_active_request_weight)
        self.pf = [0] * n_ranks
        self.nreq = [0] * n_ranks
        self.ties = TieBreaker(seed)
        self.published = [_Published() for _ in range(n_ranks)]
        self.contrib = {}

    def pass_starts(self, y, tree):
        """Rank ``y`` is about to run a pass: its tree as published until the pass ends."""
        self.published[y].snapshot = (None, _tree_chains(tree))

    def pass_ends(self, y, end):
        """The pass rank ``y`` started ends at ``end`` (the time it started, if none started)."""
        snap = self.published[y].snapshot
        if snap is not None and snap[0] is None:
            self.published[y].snapshot = (end, snap[1])

    def route(self, trees, keys, isl, ps, row, now):
        """(rank, overlap pages, best overlap) for request ``row`` (its prompt's complete page keys
        ``keys``), its prefill load committed."""
        chains = chained(keys)
        overlaps = [pub.overlap(tree, chains, keys, now) for pub, tree in zip(self.published, trees)]
        min_pf = min(self.pf) if self.decay > 0.0 and self.track_prefill else 0
        req_blocks = float((isl + ps - 1) // ps)
        costs = []
        for k, ov in enumerate(overlaps):
            pf = self.pf[k] if self.track_prefill else 0
            credit = self.credit
            if self.decay > 0.0 and self.track_prefill:
                excess = max(self.pf[k] - min_pf, 0) / float(ps)
                credit = credit * (1.0 / (1.0 + self.decay * (excess / req_blocks)))
            load = max((pf + isl) / ps - credit * ov, 0.0)
            c = self.pls * load
            if self.req_weight != 0.0:
                c = c + self.req_weight * self.nreq[k]
            costs.append(c)
        k = self.ties.lowest(costs)
        self.contrib[row] = isl - overlaps[k] * ps
        self.pf[k] += self.contrib[row]
        self.nreq[k] += 1
        return k, overlaps[k], max(overlaps)

    def held(self, y, row, keys):
        """The pass that prefilled ``row``'s copy on rank ``y`` ended: its load leaves, its pages
        are published."""
        self.pf[y] -= self.contrib[row]
        self.published[y].holds.update(chained(keys))

    def released(self, y, keys, stamp):
        """``row``'s source on rank ``y`` was released, published at ``stamp``."""
        self.nreq[y] -= 1
        self.published[y].withdrawn.append((stamp, chained(keys)))
