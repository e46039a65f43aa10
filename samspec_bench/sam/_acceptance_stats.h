/*
 * AcceptanceStats: the evidence policy's drafter-wide corrections record in C, included once by
 * _samcore.c before _evidence_policy.h (which reads it per draft token and updates it per judged
 * draft). draft_length.TokenAcceptance is the specification: the same entries, the same sums in
 * the same order, the same ratios (accepted + m) / (predicted + m), so a drafter on the compiled
 * path and one on the Python path keep identical records. The `pairs=` table is not kept here:
 * a policy with pairs > 0 is chosen in Python (EvidenceLength.c_params).
 *
 * Tables: drafted token id -> [sum of estimates, accepted] (open addressing, grows with the
 * vocabulary drafted), and shape_key -> the same in a fixed array (the key's ranges are bounded:
 * 9 x 6 x 2 x 4 buckets), with the pooled sums of every shape judgement (the centre of a
 * shape's prior with pooled=1). Acceptance statistics only, never draft content: one object may be
 * shared by several EvidenceBatch instances (drafters), as one TokenAcceptance is in Python.
 */

#define SHAPE_LEN 9      /* min(length, 255).bit_length(): 0..8 */
#define SHAPE_SEEN 6     /* min(seen, 31).bit_length(): 0..5 */
#define SHAPE_N (SHAPE_LEN * SHAPE_SEEN * 2 * 4)

typedef struct { int32_t tok; double pred, acc; } AccSlot;   /* tok NONE: empty */

typedef struct {
    PyObject_HEAD
    AccSlot *slots;
    Py_ssize_t cap, used;        /* cap: a power of two, used <= cap / 2 */
    double shape_pred[SHAPE_N], shape_acc[SHAPE_N];
    unsigned char shape_has[SHAPE_N];
    double total_pred, total_acc;  /* every shape judgement: TokenAcceptance.shape_total */
} AccStats;

/* The per-token estimates a draft token was proposed with (RequestEvidence.pending_q's tuple). */
typedef struct { double q, f_tok, f_shape; int key; } AccEst;   /* key -1: no shape (shape=0) */

static int bit_length(int64_t v) { int b = 0; while (v > 0) { b++; v >>= 1; } return b; }

/* shape_key(length, seen, count, j) as an index into the shape arrays */
static int acc_shape_index(int64_t length, int64_t seen, int64_t count, Py_ssize_t j) {
    int a = bit_length(length < 255 ? length : 255), b = bit_length(seen < 31 ? seen : 31);
    return ((a * SHAPE_SEEN + b) * 2 + (count >= seen)) * 4 + (int)(j < 3 ? j : 3);
}

static inline size_t acc_hash(const AccStats *a, int32_t t) {
    return (size_t)(((uint64_t)(uint32_t)t * 0x9E3779B97F4A7C15ull) >> 20) & (size_t)(a->cap - 1);
}

static AccSlot *acc_find(const AccStats *a, int32_t t) {
    if (t < 0) return NULL;
    for (size_t i = acc_hash(a, t);; i = (i + 1) & (size_t)(a->cap - 1)) {
        if (a->slots[i].tok == t) return &a->slots[i];
        if (a->slots[i].tok == NONE) return NULL;
    }
}

static int acc_grow(AccStats *a) {
    Py_ssize_t old_cap = a->cap;
    AccSlot *old = a->slots, *s = (AccSlot *)malloc((size_t)(2 * old_cap) * sizeof(AccSlot));
    if (!s) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < 2 * old_cap; i++) s[i].tok = NONE;
    a->slots = s;
    a->cap = 2 * old_cap;
    for (Py_ssize_t i = 0; i < old_cap; i++) {
        if (old[i].tok == NONE) continue;
        size_t j = acc_hash(a, old[i].tok);
        while (s[j].tok != NONE) j = (j + 1) & (size_t)(a->cap - 1);
        s[j] = old[i];
    }
    free(old);
    return 0;
}

/* TokenAcceptance._add: the entry (made at [0, 0] when new) gets predicted and ok */
static int acc_add_token(AccStats *a, int32_t t, double predicted, int ok) {
    AccSlot *e = acc_find(a, t);
    if (!e) {
        if (2 * (a->used + 1) > a->cap && acc_grow(a)) return -1;
        size_t i = acc_hash(a, t);
        while (a->slots[i].tok != NONE) i = (i + 1) & (size_t)(a->cap - 1);
        e = &a->slots[i];
        e->tok = t; e->pred = 0.0; e->acc = 0.0;
        a->used++;
    }
    e->pred += predicted;
    e->acc += ok ? 1.0 : 0.0;
    return 0;
}

static void acc_add_shape(AccStats *a, int key, double predicted, int ok) {
    if (!a->shape_has[key]) { a->shape_has[key] = 1; a->shape_pred[key] = 0.0; a->shape_acc[key] = 0.0; }
    a->shape_pred[key] += predicted;
    a->shape_acc[key] += ok ? 1.0 : 0.0;
    a->total_pred += predicted;
    a->total_acc += ok ? 1.0 : 0.0;
}

/* TokenAcceptance.factor(token, m) / shape_factor(key, m, pooled): (accepted + m * centre) /
 * (predicted + m), centre 1.0, or for a pooled shape prior the ratio over every shape judgement */
static inline double acc_token_factor(const AccStats *a, int32_t t, double m) {
    if (!(m > 0)) return 1.0;
    const AccSlot *e = acc_find(a, t);
    return e ? (e->acc + m * 1.0) / (e->pred + m) : 1.0;
}

static inline double acc_shape_factor(const AccStats *a, int key, double m, int pooled) {
    if (!(m > 0)) return 1.0;
    double centre = pooled ? (a->total_acc + m) / (a->total_pred + m) : 1.0;
    if (key < 0 || !a->shape_has[key]) return centre;
    return (a->shape_acc[key] + m * centre) / (a->shape_pred[key] + m);
}

/* TokenAcceptance.relax_pooled(d): the pooled sums fade by d (see EvidenceLength.choose) */
static inline void acc_relax_pooled(AccStats *a, double d) {
    a->total_pred *= d;
    a->total_acc *= d;
}

/* TokenAcceptance.update without pairs: draft token j (0-based) reached when j <= accepted */
static int acc_update(AccStats *a, const int32_t *draft, const AccEst *est, Py_ssize_t n, Py_ssize_t accepted) {
    for (Py_ssize_t j = 0; j < n && j <= accepted; j++) {
        int ok = j < accepted;
        if (acc_add_token(a, draft[j], est[j].q * est[j].f_shape, ok)) return -1;
        if (est[j].key >= 0) acc_add_shape(a, est[j].key, est[j].q * est[j].f_tok, ok);
    }
    return 0;
}

/* ---------- the Python face: TokenAcceptance's methods and tables ---------- */

static PyObject *AccStats_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "AcceptanceStats() takes no arguments");
        return NULL;
    }
    AccStats *a = (AccStats *)type->tp_alloc(type, 0);   /* zeroed: no shapes */
    if (!a) return NULL;
    a->cap = 1024;
    if (!(a->slots = (AccSlot *)malloc((size_t)a->cap * sizeof(AccSlot)))) { Py_DECREF(a); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < a->cap; i++) a->slots[i].tok = NONE;
    return (PyObject *)a;
}

static void AccStats_dealloc(AccStats *a) {
    free(a->slots);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static Py_ssize_t AccStats_len(AccStats *a) { return a->used; }

static int no_pairs(double m_pair) {
    if (m_pair > 0 || m_pair < 0) {   /* a NaN is refused by the policy's checks */
        PyErr_SetString(PyExc_ValueError, "AcceptanceStats keeps no pair table: use draft_length.TokenAcceptance "
                                          "for pairs > 0 (the policy then runs in Python)");
        return -1;
    }
    return 0;
}

/* factor(token, m, prev=-1, m_pair=0.0) */
static PyObject *AccStats_factor(AccStats *a, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"token", "m", "prev", "m_pair", NULL};
    long long t, prev = -1;
    double m, m_pair = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Ld|Ld", kwlist, &t, &m, &prev, &m_pair) || no_pairs(m_pair)) return NULL;
    return PyFloat_FromDouble(t < 0 || t > INT32_MAX ? 1.0 : acc_token_factor(a, (int32_t)t, m));
}

/* a shape key tuple as an index, -1 where no shape bucket has it */
static int acc_key_index(PyObject *key) {
    long long v[4];
    if (!PyArg_ParseTuple(key, "LLLL", &v[0], &v[1], &v[2], &v[3])) return -2;
    if (v[0] < 0 || v[0] >= SHAPE_LEN || v[1] < 0 || v[1] >= SHAPE_SEEN || v[2] < 0 || v[2] > 1 || v[3] < 0 || v[3] > 3)
        return -1;
    return (int)(((v[0] * SHAPE_SEEN + v[1]) * 2 + v[2]) * 4 + v[3]);
}

/* shape_factor(key, m, pooled=False) */
static PyObject *AccStats_shape_factor(AccStats *a, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"key", "m", "pooled", NULL};
    PyObject *key;
    double m;
    int pooled = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!d|p", kwlist, &PyTuple_Type, &key, &m, &pooled)) return NULL;
    int i = acc_key_index(key);
    if (i == -2) return NULL;
    return PyFloat_FromDouble(acc_shape_factor(a, i, m, pooled));
}

/* relax_pooled(d) */
static PyObject *AccStats_relax_pooled(AccStats *a, PyObject *arg) {
    double d = PyFloat_AsDouble(arg);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    acc_relax_pooled(a, d);
    Py_RETURN_NONE;
}

/* update(draft, estimates, accepted, pairs=False): estimates[j] a float or (q, f_tok, f_shape, key) */
static PyObject *AccStats_update(AccStats *a, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"draft", "estimates", "accepted", "pairs", NULL};
    PyObject *draft, *ests;
    Py_ssize_t accepted;
    int pairs = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOn|p", kwlist, &draft, &ests, &accepted, &pairs)) return NULL;
    if (pairs && no_pairs(1.0)) return NULL;
    PyObject *d = PySequence_Fast(draft, "draft must be a sequence of token ids"), *e = NULL;
    if (!d || !(e = PySequence_Fast(ests, "estimates must be a sequence"))) { Py_XDECREF(d); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(d);
    if (PySequence_Fast_GET_SIZE(e) < n) n = PySequence_Fast_GET_SIZE(e);
    int err = 0;
    for (Py_ssize_t j = 0; !err && j < n && j <= accepted; j++) {
        PyObject *x = PySequence_Fast_GET_ITEM(e, j), *key = Py_None;
        AccEst est = {0.0, 1.0, 1.0, -1};
        long long t = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(d, j));
        if (t == -1 && PyErr_Occurred()) { err = 1; break; }
        if (t < 0 || t > INT32_MAX) { PyErr_Format(PyExc_ValueError, "token id %lld out of range", t); err = 1; break; }
        if (PyTuple_Check(x)) {
            if (!PyArg_ParseTuple(x, "dddO", &est.q, &est.f_tok, &est.f_shape, &key)) { err = 1; break; }
            if (key != Py_None) {
                if (!PyTuple_Check(key) || (est.key = acc_key_index(key)) < 0) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "update: not a shape_key");
                    err = 1; break;
                }
            }
        } else if ((est.q = PyFloat_AsDouble(x)) == -1.0 && PyErr_Occurred()) { err = 1; break; }
        int32_t tok = (int32_t)t;
        err = acc_update(a, &tok, &est, 1, accepted - j);   /* one token: reached, accepted when j < accepted */
    }
    Py_DECREF(d); Py_DECREF(e);
    if (err) return NULL;
    Py_RETURN_NONE;
}

static PyObject *acc_pair(double pred, double acc) { return Py_BuildValue("[dd]", pred, acc); }

static PyObject *AccStats_get_stats(AccStats *a, void *c) {
    PyObject *out = PyDict_New();
    for (Py_ssize_t i = 0; out && i < a->cap; i++) {
        if (a->slots[i].tok == NONE) continue;
        PyObject *k = PyLong_FromLong(a->slots[i].tok), *v = acc_pair(a->slots[i].pred, a->slots[i].acc);
        if (!k || !v || PyDict_SetItem(out, k, v)) Py_CLEAR(out);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    return out;
}

static PyObject *AccStats_get_shape_stats(AccStats *a, void *c) {
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < SHAPE_N; i++) {
        if (!a->shape_has[i]) continue;
        PyObject *k = Py_BuildValue("(iiii)", i / (SHAPE_SEEN * 8), i / 8 % SHAPE_SEEN, i / 4 % 2, i % 4);
        PyObject *v = acc_pair(a->shape_pred[i], a->shape_acc[i]);
        if (!k || !v || PyDict_SetItem(out, k, v)) Py_CLEAR(out);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    return out;
}

static PyObject *AccStats_get_pair_stats(AccStats *a, void *c) { return PyDict_New(); }

static PyObject *AccStats_get_shape_total(AccStats *a, void *c) { return acc_pair(a->total_pred, a->total_acc); }

static PyMethodDef AccStats_methods[] = {
    {"factor", (PyCFunction)(void (*)(void))AccStats_factor, METH_VARARGS | METH_KEYWORDS,
     "factor(token, m, prev=-1, m_pair=0.0) -> the token's correction (no pairs: m_pair must be 0)"},
    {"shape_factor", (PyCFunction)(void (*)(void))AccStats_shape_factor, METH_VARARGS | METH_KEYWORDS, 
     "shape_factor(key, m, pooled=False) -> the shape's correction (pooled: its prior centred on the pooled ratio)"},
    {"relax_pooled", (PyCFunction)AccStats_relax_pooled, METH_O,
     "relax_pooled(d): the pooled sums (shape_total) times d, as TokenAcceptance.relax_pooled"},
    {"update", (PyCFunction)(void (*)(void))AccStats_update, METH_VARARGS | METH_KEYWORDS,
     "update(draft, estimates, accepted, pairs=False): as TokenAcceptance.update (pairs must be False)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef AccStats_getset[] = {
    {"stats", (getter)AccStats_get_stats, NULL, "a copy: token id -> [sum of estimates, accepted]", NULL},
    {"shape_stats", (getter)AccStats_get_shape_stats, NULL, "a copy: shape_key -> [sum of estimates, accepted]", NULL},
    {"pair_stats", (getter)AccStats_get_pair_stats, NULL, "always empty (no pair table in C)", NULL},
    {"shape_total", (getter)AccStats_get_shape_total, NULL, "a copy: every shape judgement, [sum of estimates, accepted]", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods AccStats_as_sequence = {.sq_length = (lenfunc)AccStats_len};

static PyTypeObject AccStatsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "samspec_bench.sam._samcore.AcceptanceStats",
    .tp_basicsize = sizeof(AccStats),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The evidence policy's drafter-wide corrections record in C (draft_length.TokenAcceptance "
              "without pairs); len() is the number of token ids recorded.",
    .tp_new = AccStats_new,
    .tp_dealloc = (destructor)AccStats_dealloc,
    .tp_methods = AccStats_methods,
    .tp_getset = AccStats_getset,
    .tp_as_sequence = &AccStats_as_sequence,
};
