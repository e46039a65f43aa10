/*
 * The evidence draft-length policy's compiled fast path, included once by _samcore.c (after
 * the automaton's helpers it reads): a separate file so _samcore.c keeps to the automaton.
 *
 * EvidenceLength.choose and SamDrafter's judging of the previous draft
 * (samspec_bench/sam/draft_length.py, drafters.py) are the specification: this file does the
 * same arithmetic in the same order, so drafts and expected values are identical (the
 * extension is built with -std=c99, which keeps GCC from contracting a*b+c into an FMA).
 * A policy this file does not implement is chosen in Python (EvidenceLength.c_params).
 *
 * One call per draft: the candidates (the match and up to depth-1 shorter ones up its suffix
 * links, as evidence_chain walks them) are generated token by token only as far as the
 * estimate keeps them, and scored as they go, without building Python lists. The
 * drafter-wide corrections (tokens=, shape=) read and update an AcceptanceStats
 * (_acceptance_stats.h), which several batches may share.
 */

typedef struct {
    double cost, novelty, cap, tau, decay;
    double m_tok, m_shape;         /* the corrections' prior weights (tokens=, shape=; 0: off) */
    Py_ssize_t depth, l_threshold;
    int mode, pooled;              /* pooled: the shape prior centred on the record's pooled ratio */
} EvParams;

/* One request: its source (core, doc), its recent acceptance and the draft waiting to be judged. */
typedef struct {
    PyObject_HEAD
    SamCore *core;                 /* strong reference */
    Py_ssize_t doc;
    double predicted, accepted, pending_pred;
    int32_t *pending;              /* the last draft, npending tokens (0: none waiting) */
    AccEst *pending_est;           /* its tokens' estimates (with the corrections on) */
    Py_ssize_t npending, pending_cap;
    int has_est;                   /* pending_est holds the pending draft's estimates */
    int32_t small[16];
    AccEst small_est[16];
} EvRequest;

/* The candidates from matched state q (match length L): the draft with the most expected
 * accepted tokens net of cost, into best (room for k tokens); returns its length, sets
 * *expected. work: scratch for k tokens. The dynamic source (the match's own current
 * occurrence is counted in cnt: at_end) is the only one this path drafts from. A: the
 * corrections' record (NULL: off), read per token; best_est / work_est: the estimates
 * (room for k each) the record is later judged against, as choose() keeps them in pending_q.
 * *silenced: no draft, though some candidate's first token would pass with the shape prior
 * centred on no change (the pooled prior alone kept the drafter silent). */
static Py_ssize_t ev_choose(SamCore *s, int32_t q, int64_t L, Py_ssize_t k, const EvParams *P,
                            double cost, double scale, int32_t *best, int32_t *work, double *expected,
                            const AccStats *A, AccEst *best_est, AccEst *work_est, int *silenced) {
    int frequent = P->mode == CHOOSE_FREQUENT, unpooled_pass = 0;
    double best_score = 0.0, best_exp = 0.0;
    Py_ssize_t best_n = 0;
    for (Py_ssize_t d = 0; d < P->depth && q > 0; d++) {
        Py_ssize_t most = k;
        if (P->cap > 0) {   /* min(most, int(cap * L + 1e-9)), without overflowing the cast */
            double v = P->cap * (double)L + 1e-9;
            if (v < (double)most) most = (Py_ssize_t)v;
        }
        double p = 1.0, score = 0.0, exp_ = 0.0;
        Py_ssize_t n = 0;
        int32_t t = q, pos = s->st[q].fpos;
        if (P->mode == CHOOSE_RECENT && s->ev[q].rpos != NONE && succ_of(s, s->ev[q].rpos) != NONE) pos = s->ev[q].rpos;
        int64_t prev = s->ev[q].cnt;        /* counts[j-1] */
        for (Py_ssize_t j = 1; j <= most; j++) {
            int32_t nt, c;
            int64_t seen;
            if (frequent) {
                if ((nt = frequent_child(s, t, &seen)) == NONE) break;
                c = tok_of(s, nt);
            } else {
                if ((pos = succ_of(s, pos)) == NONE) break;
                c = s->text[pos];
                if ((nt = get_trans(s, t, c)) == NONE) break;
                seen = prev - (j == 1 ? 1 : 0);
            }
            if (seen <= 0) break;
            work[j - 1] = c;
            double x = scale * (double)s->ev[nt].cnt / ((double)seen + P->novelty / (double)(L + j - 1));
            x = x < 0.99 ? x : 0.99;     /* min(0.99, x) */
            if (A) {                     /* q = min(0.99, q * f_tok * f_shape) */
                AccEst *e = &work_est[j - 1];
                e->q = x;
                e->f_tok = acc_token_factor(A, c, P->m_tok);
                e->key = P->m_shape > 0 ? acc_shape_index(L, seen, s->ev[nt].cnt, j) : -1;
                e->f_shape = e->key >= 0 ? acc_shape_factor(A, e->key, P->m_shape, P->pooled) : 1.0;
                if (P->pooled && P->m_shape > 0 && j == 1 && !unpooled_pass) {
                    double f0 = e->key >= 0 ? acc_shape_factor(A, e->key, P->m_shape, 0) : 1.0;
                    double x0 = e->q * e->f_tok * f0;
                    unpooled_pass = (x0 < 0.99 ? x0 : 0.99) >= cost;
                }
                x = x * e->f_tok * e->f_shape;
                x = x < 0.99 ? x : 0.99;
            }
            p *= x;
            if (p < cost) break;
            n = j; score = score + p - cost; exp_ = exp_ + p;
            prev = s->ev[nt].cnt;
            t = nt;
        }
        if (n && score > best_score) {
            best_n = n; best_score = score; best_exp = exp_;
            memcpy(best, work, (size_t)n * sizeof(int32_t));
            if (A) memcpy(best_est, work_est, (size_t)n * sizeof(AccEst));
        }
        q = s->st[q].link;
        L = s->st[q].len;
    }
    *expected = best_exp;
    *silenced = best_n == 0 && unpooled_pass;
    return best_n;
}

/* ---------- EvidenceBatch: the drafter's per-request calls, each one C call ---------- */

typedef struct {
    PyObject_HEAD
    PyObject *reqs;   /* dict: request id -> EvRequest */
    AccStats *stats;  /* the corrections' record, shareable (NULL: none, no corrections) */
    EvParams P;
} EvidenceBatch;

/* the record the corrections read and update, NULL where they are off */
static inline AccStats *ev_corrections(EvidenceBatch *self) {
    return self->stats && (self->P.m_tok > 0 || self->P.m_shape > 0) ? self->stats : NULL;
}

static PyTypeObject EvRequestType;

static void EvRequest_dealloc(EvRequest *r) {
    Py_XDECREF(r->core);
    if (r->pending != r->small) free(r->pending);
    if (r->pending_est != r->small_est) free(r->pending_est);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *EvRequest_get_pending(EvRequest *r, void *c) {
    if (r->npending == 0) Py_RETURN_NONE;
    PyObject *out = PyList_New(r->npending);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < r->npending; i++) {
        PyObject *v = PyLong_FromLong(r->pending[i]);
        if (!v) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

/* pending_q: the pending draft's estimates as choose() leaves them (corrections on), else None */
static PyObject *EvRequest_get_pending_q(EvRequest *r, void *c) {
    if (r->npending == 0 || !r->has_est) Py_RETURN_NONE;
    PyObject *out = PyList_New(r->npending);
    for (Py_ssize_t i = 0; out && i < r->npending; i++) {
        const AccEst *e = &r->pending_est[i];
        int k = e->key;
        PyObject *v = k < 0 ? Py_BuildValue("(dddO)", e->q, e->f_tok, e->f_shape, Py_None)
                            : Py_BuildValue("(ddd(iiii))", e->q, e->f_tok, e->f_shape, k / (SHAPE_SEEN * 8),
                                            k / 8 % SHAPE_SEEN, k / 4 % 2, k % 4);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyMemberDef EvRequest_members[] = {
    {"predicted", T_DOUBLE, offsetof(EvRequest, predicted), 0, "decayed sum of the expected accepted tokens of its drafts"},
    {"accepted", T_DOUBLE, offsetof(EvRequest, accepted), 0, "decayed sum of the tokens of its drafts that were accepted"},
    {"pending_pred", T_DOUBLE, offsetof(EvRequest, pending_pred), 0, "the expected accepted tokens of the pending draft"},
    {"doc", T_PYSSIZET, offsetof(EvRequest, doc), READONLY, "its document in the automaton"},
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef EvRequest_getset[] = {
    {"pending", (getter)EvRequest_get_pending, NULL, "the draft waiting to be judged (None: none)", NULL},
    {"pending_q", (getter)EvRequest_get_pending_q, NULL,
     "its tokens' estimates (q, f_tok, f_shape, shape key or None), as RequestEvidence.pending_q (None: none or no corrections)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject EvRequestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "samspec_bench.sam._samcore.EvidenceRequest",
    .tp_basicsize = sizeof(EvRequest),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One request's recent acceptance under the evidence policy (made by EvidenceBatch.add).",
    .tp_dealloc = (destructor)EvRequest_dealloc,
    .tp_members = EvRequest_members,
    .tp_getset = EvRequest_getset,
};

static int EvidenceBatch_set_stats(EvidenceBatch *self, PyObject *v, void *c);

/* EvidenceBatch(cost, novelty, depth, cap, tau, decay, choice, l_threshold, tokens=0, shape=0,
 * stats=None, pooled=0); cost < 0: the policy's cost is a profile, read in Python per draft and
 * passed to propose. tokens / shape: the corrections' prior weights, applied with an
 * AcceptanceStats; pooled: the shape prior centred on the record's pooled ratio. */
static int EvidenceBatch_init(EvidenceBatch *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"cost", "novelty", "depth", "cap", "tau", "decay", "choice", "l_threshold",
                             "tokens", "shape", "stats", "pooled", NULL};
    EvParams *P = &self->P;
    PyObject *stats = Py_None;
    P->m_tok = P->m_shape = 0.0;
    P->pooled = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ddndddin|ddOp", kwlist, &P->cost, &P->novelty, &P->depth,
                                     &P->cap, &P->tau, &P->decay, &P->mode, &P->l_threshold,
                                     &P->m_tok, &P->m_shape, &stats, &P->pooled))
        return -1;
    if (P->depth < 1 || P->mode < 0 || P->mode > 2 || P->l_threshold < 1 || !(P->novelty > 0) || !(P->tau > 0)
        || !(P->m_tok >= 0) || !(P->m_shape >= 0)) {
        PyErr_SetString(PyExc_ValueError, "EvidenceBatch: need depth >= 1, choice in 0..2, l_threshold >= 1, novelty > 0, "
                                          "tau > 0, tokens >= 0, shape >= 0");
        return -1;
    }
    if (EvidenceBatch_set_stats(self, stats, NULL)) return -1;
    if (!self->reqs && !(self->reqs = PyDict_New())) return -1;
    return 0;
}

static void EvidenceBatch_dealloc(EvidenceBatch *self) {
    Py_XDECREF(self->reqs);
    Py_XDECREF(self->stats);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static EvRequest *ev_lookup(EvidenceBatch *self, PyObject *req_id) {
    PyObject *r = PyDict_GetItemWithError(self->reqs, req_id);   /* borrowed */
    if (!r && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, req_id);
    return (EvRequest *)r;
}

/* add(req_id, core, doc) -> the request's EvidenceRequest: it drafts from document doc of
 * core (an automaton made with evidence=True). */
static PyObject *EvidenceBatch_add(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "add(req_id, core, doc)"); return NULL; }
    if (!PyObject_TypeCheck(args[1], &SamCoreType)) { PyErr_SetString(PyExc_TypeError, "add: core must be a SamCore"); return NULL; }
    SamCore *core = (SamCore *)args[1];
    Py_ssize_t doc;
    if (as_index(args[2], "doc", &doc) || check_evidence(core) || check_doc(core, doc)) return NULL;
    EvRequest *r = PyObject_New(EvRequest, &EvRequestType);
    if (!r) return NULL;
    Py_INCREF(core);
    r->core = core;
    r->doc = doc;
    r->predicted = r->accepted = r->pending_pred = 0.0;
    r->pending = r->small;
    r->pending_est = r->small_est;
    r->has_est = 0;
    r->npending = 0;
    r->pending_cap = 16;
    if (PyDict_SetItem(self->reqs, args[0], (PyObject *)r)) { Py_DECREF(r); return NULL; }
    return (PyObject *)r;
}

/* Judge the request's pending draft by the tokens emitted after it: the accepted prefix is the
 * common prefix of the two. Returns -1 with an exception set on failure. */
static int ev_judge(EvidenceBatch *self, EvRequest *r, const TokenVec *tv) {
    if (!r->npending) return 0;
    Py_ssize_t a = 0, m = r->npending < tv->n ? r->npending : tv->n;
    while (a < m && tv->buf[a] == r->pending[a]) a++;
    r->predicted = self->P.decay * r->predicted + r->pending_pred;
    r->accepted = self->P.decay * r->accepted + (double)a;
    AccStats *A = ev_corrections(self);
    /* the record now in use learns (a drafter's record may have been replaced since the draft) */
    int err = A && r->has_est && acc_update(A, r->pending, r->pending_est, r->npending, a);
    r->npending = 0;
    return err ? -1 : 0;
}

/* extend(req_id, token_ids): append to the request's document, then judge its pending draft:
 * the accepted prefix is the common prefix of the draft and the tokens emitted after it. */
static PyObject *EvidenceBatch_extend(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "extend(req_id, token_ids)"); return NULL; }
    EvRequest *r = ev_lookup(self, args[0]);
    if (!r) return NULL;
    SamCore *s = r->core;
    if (!s->interleaved && r->doc != s->ndocs - 1) {
        PyErr_SetString(PyExc_ValueError, "a contiguous automaton only extends its newest document");
        return NULL;
    }
    TokenVec tv;
    if (read_tokens(args[1], &tv)) return NULL;
    if (append_tokens(s, r->doc, &tv)) { tv_free(&tv); return NULL; }
    int err = ev_judge(self, r, &tv);
    tv_free(&tv);
    if (err) return NULL;
    Py_RETURN_NONE;
}

/* settle(req_id, token_ids): judge the pending draft by the tokens its step emits, without
 * appending them (a profile appends them one at a time; extend then has nothing to judge). */
static PyObject *EvidenceBatch_settle(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "settle(req_id, token_ids)"); return NULL; }
    EvRequest *r = ev_lookup(self, args[0]);
    if (!r) return NULL;
    TokenVec tv;
    if (read_tokens(args[1], &tv)) return NULL;
    int err = ev_judge(self, r, &tv);
    tv_free(&tv);
    if (err) return NULL;
    Py_RETURN_NONE;
}

/* propose / choose / peek: (req_id, k, cost=None). keep: remember the draft to judge it;
 * peek: neither remember it nor fade the pooled prior (no side effect at all). */
static PyObject *ev_draft(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs, int keep, int peek) {
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, keep ? "propose(req_id, k, cost=None)"
                                              : peek ? "peek(req_id, k, cost=None)" : "choose(req_id, k, cost=None)");
        return NULL;
    }
    EvRequest *r = ev_lookup(self, args[0]);
    if (!r) return NULL;
    Py_ssize_t k;   /* as every drafter checks it (parse_k; python_automaton.check_count) */
    if (parse_k(args[1], &k)) return NULL;
    double cost = self->P.cost;
    if (nargs == 3 && args[2] != Py_None) {
        cost = PyFloat_AsDouble(args[2]);
        if (cost == -1.0 && PyErr_Occurred()) return NULL;
    } else if (cost < 0) {
        PyErr_SetString(PyExc_ValueError, "this policy's cost is a profile: pass propose(req_id, k, cost)");
        return NULL;
    }
    SamCore *s = r->core;
    int64_t L;
    int32_t q = doc_match(s, r->doc, &L);
    Py_ssize_t n = 0;
    double expected = 0.0;
    int32_t stack[128], *buf = stack;
    AccEst est_stack[64], *est = est_stack;
    AccStats *A = ev_corrections(self);
    if (q > 0 && L >= self->P.l_threshold && k > 0) {   /* k = 0: no draft, as without a match */
        if (k > s->n) k = (Py_ssize_t)s->n;     /* no draft is longer than the text */
        if (2 * k > 128 && !(buf = (int32_t *)malloc((size_t)(2 * k) * sizeof(int32_t)))) return PyErr_NoMemory();
        if (A && 2 * k > 64 && !(est = (AccEst *)malloc((size_t)(2 * k) * sizeof(AccEst)))) {
            if (buf != stack) free(buf);
            return PyErr_NoMemory();
        }
        double x = (r->accepted + self->P.tau) / (r->predicted + self->P.tau);
        x = x > 0.25 ? x : 0.25;                /* min(4, max(0.25, x)) */
        double scale = x < 4.0 ? x : 4.0;
        int silenced = 0;
        n = ev_choose(s, q, L, k, &self->P, cost, scale, buf, buf + k, &expected, A, est, A ? est + k : NULL,
                      &silenced);
        if (silenced && !peek) acc_relax_pooled(A, self->P.decay);   /* EvidenceLength.choose says why */
    }
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromLong(buf[i]);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, v);
    }
    if (out && keep && n) {
        if (n > r->pending_cap) {
            int32_t *p = (int32_t *)malloc((size_t)n * sizeof(int32_t));
            AccEst *pe = (AccEst *)malloc((size_t)n * sizeof(AccEst));
            if (!p || !pe) { free(p); free(pe); Py_DECREF(out); out = PyErr_NoMemory(); goto done; }
            if (r->pending != r->small) free(r->pending);
            if (r->pending_est != r->small_est) free(r->pending_est);
            r->pending = p;
            r->pending_est = pe;
            r->pending_cap = n;
        }
        memcpy(r->pending, buf, (size_t)n * sizeof(int32_t));
        if ((r->has_est = A != NULL)) memcpy(r->pending_est, est, (size_t)n * sizeof(AccEst));
        r->npending = n;
        r->pending_pred = expected;
    }
done:
    if (buf != stack) free(buf);
    if (est != est_stack) free(est);
    if (!out || keep || peek) return out;
    return Py_BuildValue("(Nd)", out, expected);
}

/* propose(req_id, k, cost=None) -> the draft (as EvidenceLength.choose picks it) */
static PyObject *EvidenceBatch_propose(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    return ev_draft(self, args, nargs, 1, 0);
}

/* choose(req_id, k, cost=None) -> (draft, expected accepted tokens), nothing remembered */
static PyObject *EvidenceBatch_choose(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    return ev_draft(self, args, nargs, 0, 0);
}

/* peek(req_id, k, cost=None) -> the draft propose would give, with no side effect */
static PyObject *EvidenceBatch_peek(EvidenceBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    return ev_draft(self, args, nargs, 0, 1);
}

static PyObject *EvidenceBatch_get_requests(EvidenceBatch *self, void *c) { Py_INCREF(self->reqs); return self->reqs; }

static PyObject *EvidenceBatch_get_stats(EvidenceBatch *self, void *c) {
    PyObject *v = self->stats ? (PyObject *)self->stats : Py_None;
    Py_INCREF(v);
    return v;
}

/* stats = an AcceptanceStats (shared: a reference is kept) or None */
static int EvidenceBatch_set_stats(EvidenceBatch *self, PyObject *v, void *c) {
    if (v && v != Py_None && !PyObject_TypeCheck(v, &AccStatsType)) {
        PyErr_SetString(PyExc_TypeError, "EvidenceBatch.stats must be an AcceptanceStats or None");
        return -1;
    }
    AccStats *old = self->stats;
    self->stats = v && v != Py_None ? (AccStats *)v : NULL;
    Py_XINCREF(self->stats);
    Py_XDECREF(old);
    return 0;
}

static PyMethodDef EvidenceBatch_methods[] = {
    {"add", (PyCFunction)(void (*)(void))EvidenceBatch_add, METH_FASTCALL,
     "add(req_id, core, doc) -> EvidenceRequest: the request drafts from document doc of core"},
    {"extend", (PyCFunction)(void (*)(void))EvidenceBatch_extend, METH_FASTCALL,
     "extend(req_id, token_ids): append, and judge the pending draft"},
    {"propose", (PyCFunction)(void (*)(void))EvidenceBatch_propose, METH_FASTCALL,
     "propose(req_id, k, cost=None) -> list[int]"},
    {"choose", (PyCFunction)(void (*)(void))EvidenceBatch_choose, METH_FASTCALL,
     "choose(req_id, k, cost=None) -> (draft, expected): propose without remembering the draft"},
    {"peek", (PyCFunction)(void (*)(void))EvidenceBatch_peek, METH_FASTCALL,
     "peek(req_id, k, cost=None) -> list[int]: the draft propose would give, with no side effect"},
    {"settle", (PyCFunction)(void (*)(void))EvidenceBatch_settle, METH_FASTCALL,
     "settle(req_id, token_ids): judge the pending draft by these emitted tokens, not appending them"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef EvidenceBatch_getset[] = {
    {"requests", (getter)EvidenceBatch_get_requests, NULL, "the live requests: id -> EvidenceRequest", NULL},
    {"stats", (getter)EvidenceBatch_get_stats, (setter)EvidenceBatch_set_stats,
     "the corrections' record (an AcceptanceStats, may be shared; None: no corrections)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject EvidenceBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "samspec_bench.sam._samcore.EvidenceBatch",
    .tp_basicsize = sizeof(EvidenceBatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The evidence draft-length policy's per-request calls in C (see _evidence_policy.h).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)EvidenceBatch_init,
    .tp_dealloc = (destructor)EvidenceBatch_dealloc,
    .tp_methods = EvidenceBatch_methods,
    .tp_getset = EvidenceBatch_getset,
};
