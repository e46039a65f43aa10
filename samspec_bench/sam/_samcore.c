/*
 * _samcore: the suffix automaton behind samspec_bench.sam, as a CPython extension.
 *
 * One generalized suffix automaton over one or more documents (token sequences), built
 * online in amortised O(1) per appended token. Documents are either contiguous (appended
 * one after another, separated by -1 in the text: a static corpus or a single dynamic
 * text) or interleaved (several documents growing at once: the responses of one GRPO
 * group), in which case each position links to the next position of its document.
 *
 * Memory is the point (target <= 64 bytes per indexed token), so:
 *   - a state stores len, link, firstpos and one edge word (16 bytes);
 *   - a state with one outgoing edge (about 83% of them on the shared traces) keeps its
 *     target in the edge word, and the token on that edge is not stored: every string of a
 *     state q ends with the same token, text[firstpos[q]];
 *   - states with more edges keep all of them in one open-addressing hash table keyed by
 *     (state, token), with a control byte per slot (see h_probe), threaded into a per-state
 *     list for cloning.
 *
 * The drafting policy is SAM-Decoding's min_endpos: among the occurrences of the longest
 * matching suffix, the earliest one (firstpos), whose continuation is drafted.
 *
 * Evidence for the draft-length policy (sam/draft_length.py), only in cores made with
 * evidence=True (16 bytes per state in a separate array, so State stays 16 bytes and the
 * plain drafter keeps its memory bar): cnt[q], the number of end positions of q's strings,
 * rpos[q], the latest of them before the document's current one, and what the frequent
 * choice reads per draft token, kept so that reading it is O(1) (see count_position):
 * best[q], q's child with the most occurrences, and cont[q], the occurrences of q followed
 * by some token (the sum of its children's cnt). All kept online by walks of at most
 * COUNT_WALK states up the suffix links.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SEP (-1)
#define NONE (-1)
#define MAX_TOKEN 0x7ffffffeLL

/* One state in 16 bytes, so the fields read together share a cache line. */
typedef struct { int32_t len, link, fpos, edge; } State; /* edge: NONE, a target (>=0), or -(slot+2) */
/* A hash slot (12 bytes). The edge's token is the target's, text[firstpos[tgt]]: it is read
 * only when src matches, so it need not be stored. */
typedef struct { int32_t src, tgt, next; } Slot;   /* free or not: see its control byte */

/* A document: the state of its whole text, and its last position (NONE while empty). */
typedef struct { int32_t last, end, prev; } Doc;   /* prev: the state of last's prefix one token shorter */

/* A state's evidence (evidence=True only), one 16-byte record so a walk reads it in one line.
 * best: the child with the highest (cnt, rpos, -fpos), NONE without children, DIRTY when its
 * rpos went down (an interleaved document marked an older end) and it must be found again. */
typedef struct { int32_t cnt, rpos, best, cont; } Ev;
#define DIRTY (-2)

typedef struct {
    PyObject_HEAD
    int32_t *text;   /* token at each position; SEP between contiguous documents */
    int32_t *succ;   /* next position of the same document (interleaved mode only) */
    int64_t n, text_cap;
    State *st;
    Ev *ev;                            /* evidence=True only (see Ev) */
    int64_t ns, state_cap;
    Slot *slot;
    uint8_t *ctrl;                     /* hcap + GROUP control bytes (see h_probe) */
    int64_t hcap, hcount, hlimit; /* hlimit: the most entries at a load of 3/4 */
    int hbits;
    Doc *doc;                          /* per document; a single text uses doc_one (no malloc) */
    Doc doc_one;
    int64_t ndocs, doc_cap;
    int interleaved;
    int evidence;                      /* ev is kept */
} SamCore;

/* ---------- growth ---------- */

static int grow_i32(int32_t **arr, int64_t new_cap) {
    int32_t *p = (int32_t *)realloc(*arr, (size_t)new_cap * sizeof(int32_t));
    if (!p) { PyErr_NoMemory(); return -1; }
    *arr = p;
    return 0;
}

/* x1.25 growth keeps the slack, and so bytes per token, low (12% on average); realloc of
 * large blocks mostly grows in place, so the extra copies cost little. */
static int64_t next_cap(int64_t cap, int64_t need) {
    int64_t c = cap < 16 ? 16 : cap + cap / 4;
    return c < need ? need : c;
}

static int ensure_text(SamCore *s, int64_t extra) {
    int64_t need = s->n + extra;
    if (need <= s->text_cap) return 0;
    if (need > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "suffix automaton: more than 2^31 tokens"); return -1; }
    int64_t cap = next_cap(s->text_cap, need);
    if (cap > INT32_MAX) cap = INT32_MAX;
    if (grow_i32(&s->text, cap)) return -1;
    if (s->interleaved && grow_i32(&s->succ, cap)) return -1;
    s->text_cap = cap;
    return 0;
}

static int ensure_states(SamCore *s, int64_t extra) {
    int64_t need = s->ns + extra;
    if (need <= s->state_cap) return 0;
    if (need > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "suffix automaton: too many states"); return -1; }
    int64_t cap = next_cap(s->state_cap, need);
    if (cap > INT32_MAX) cap = INT32_MAX;
    State *p = (State *)realloc(s->st, (size_t)cap * sizeof(State));
    if (!p) { PyErr_NoMemory(); return -1; }
    s->st = p;
    if (s->evidence) {
        Ev *v = (Ev *)realloc(s->ev, (size_t)cap * sizeof(Ev));
        if (!v) { PyErr_NoMemory(); return -1; }
        s->ev = v;
    }
    s->state_cap = cap;
    return 0;
}

static inline int32_t tok_of(const SamCore *s, int32_t q) { return s->text[s->st[q].fpos]; }

/* Control bytes, one per slot (the SwissTable layout): CTRL_EMPTY, or 7 bits of the entry's
 * hash. A probe reads GROUP of them as one 64-bit word (the first GROUP are mirrored after
 * the end, so a group never wraps) and looks at a slot only where its tag matches: a miss
 * usually costs one word compare instead of a walk along a cluster, slot by slot. */
#define CTRL_EMPTY 0x80
#define GROUP 8
#define LSB 0x0101010101010101ULL
#define MSB 0x8080808080808080ULL

typedef struct { uint64_t home; uint64_t tag; } Hash;

static inline Hash hash_of(const SamCore *s, int32_t p, int32_t c) {
    uint64_t x = (((uint64_t)(uint32_t)p << 32) | (uint32_t)c) * 0x9E3779B97F4A7C15ULL;
    Hash h = {x >> (64 - s->hbits), (x >> (57 - s->hbits)) & 0x7f}; /* the 7 bits below home's */
    return h;
}

static inline uint64_t ctrl_group(const uint8_t *ctrl, uint64_t i) {
    uint64_t g;
    memcpy(&g, ctrl + i, sizeof g);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    g = __builtin_bswap64(g); /* byte k of the group in bits 8k..8k+7, as on little-endian */
#endif
    return g;
}

/* Bytes of g equal to tag (their top bit set in the result; a false hit is possible above a
 * true one, and is weeded out by the slot check). Empty bytes never match: tags are < 0x80. */
static inline uint64_t match_tag(uint64_t g, uint64_t tag) {
    uint64_t x = g ^ (LSB * tag);
    return (x - LSB) & ~x & MSB;
}

static inline void set_ctrl(SamCore *s, uint64_t i, uint64_t tag) {
    s->ctrl[i] = (uint8_t)tag;
    if (i < GROUP) s->ctrl[s->hcap + i] = (uint8_t)tag;
}

/* The slot holding edge (p, c) (*found = 1), or else the free slot where it would go. */
static inline uint64_t h_probe(const SamCore *s, Hash h, int32_t p, int32_t c, int *found) {
    uint64_t mask = (uint64_t)s->hcap - 1;
    for (uint64_t i = h.home;; i = (i + GROUP) & mask) {
        uint64_t g = ctrl_group(s->ctrl, i);
        for (uint64_t m = match_tag(g, h.tag); m; m &= m - 1) {
            uint64_t j = (i + ((uint64_t)__builtin_ctzll(m) >> 3)) & mask;
            if (s->slot[j].src == p && tok_of(s, s->slot[j].tgt) == c) { *found = 1; return j; }
        }
        uint64_t empty = g & MSB;
        if (empty) { *found = 0; return (i + ((uint64_t)__builtin_ctzll(empty) >> 3)) & mask; }
    }
}

static inline void h_put(SamCore *s, uint64_t i, uint64_t tag, int32_t p, int32_t q, int32_t next) {
    set_ctrl(s, i, tag);
    s->slot[i].src = p;
    s->slot[i].tgt = q;
    s->slot[i].next = next;
    s->hcount++;
}

/* Insert an edge known to be absent; returns its slot. Capacity must have been ensured. */
static inline int64_t h_insert(SamCore *s, int32_t p, int32_t q, int32_t c, int32_t next) {
    Hash h = hash_of(s, p, c);
    int found;
    uint64_t i = h_probe(s, h, p, c, &found);
    h_put(s, i, h.tag, p, q, next);
    return (int64_t)i;
}

static inline int64_t h_find(const SamCore *s, int32_t p, int32_t c) {
    int found;
    uint64_t i = h_probe(s, hash_of(s, p, c), p, c, &found);
    return found ? (int64_t)i : -1;
}

/* A table of 2^bits slots, all free (the slots themselves need no clearing). */
static int alloc_hash(SamCore *s, int bits) {
    int64_t cap = (int64_t)1 << bits;
    Slot *slot = (Slot *)malloc((size_t)cap * sizeof(Slot));
    uint8_t *ctrl = (uint8_t *)malloc((size_t)cap + GROUP);
    if (!slot || !ctrl) { free(slot); free(ctrl); PyErr_NoMemory(); return -1; } /* the old table stays */
    memset(ctrl, CTRL_EMPTY, (size_t)cap + GROUP);
    s->slot = slot; s->ctrl = ctrl;
    s->hcap = cap; s->hbits = bits; s->hcount = 0;
    s->hlimit = cap / 4 * 3;
    return 0;
}

/* Double the table until `extra` more entries fit at a load factor of at most 3/4. */
static int grow_hash(SamCore *s, int64_t extra) {
    Slot *old = s->slot;
    uint8_t *old_ctrl = s->ctrl;
    int bits = s->hbits;
    while ((s->hcount + extra) * 4 > ((int64_t)3 << bits)) bits++;
    if (alloc_hash(s, bits)) return -1;
    /* Re-thread each chained state's list into the new table. */
    for (int64_t st = 0; st < s->ns; st++) {
        int32_t e = s->st[st].edge;
        if (e > -2) continue;
        int32_t head = NONE;
        for (int32_t j = -(e + 2); j != NONE; j = old[j].next)
            head = (int32_t)h_insert(s, (int32_t)st, old[j].tgt, tok_of(s, old[j].tgt), head);
        s->st[st].edge = -(head + 2);
    }
    free(old);
    free(old_ctrl);
    return 0;
}

static inline int ensure_hash(SamCore *s, int64_t extra) {
    return s->hcount + extra <= s->hlimit ? 0 : grow_hash(s, extra);
}

/* ---------- transitions ---------- */

static inline int32_t get_trans(const SamCore *s, int32_t p, int32_t c) {
    int32_t e = s->st[p].edge;
    if (e >= 0) return tok_of(s, e) == c ? e : NONE;
    if (e == NONE) return NONE;
    int64_t i = h_find(s, p, c);
    return i < 0 ? NONE : s->slot[i].tgt;
}

/* Add p --c--> q where p has no edge on c yet (c is q's token). */
static int add_edge(SamCore *s, int32_t p, int32_t q, int32_t c) {
    int32_t e = s->st[p].edge;
    if (e == NONE) { s->st[p].edge = q; return 0; }
    if (ensure_hash(s, e >= 0 ? 2 : 1)) return -1;
    int32_t head = NONE;
    if (e >= 0) head = (int32_t)h_insert(s, p, e, tok_of(s, e), NONE); /* the inline edge moves too */
    else head = -(s->st[p].edge + 2); /* re-read: the table may have grown */
    s->st[p].edge = -(int32_t)(h_insert(s, p, q, c, head) + 2);
    return 0;
}

/* The walk up the suffix links: p's target on c if it has one; else add p --c--> cur and
 * return NONE (ERR on failure). For a state with hashed edges the miss and the insertion
 * share one probe: the free slot that ended the search is where the edge goes. */
#define ERR (-2)
static inline int32_t trans_or_add(SamCore *s, int32_t p, int32_t c, int32_t cur) {
    int32_t e = s->st[p].edge;
    if (e == NONE) { s->st[p].edge = cur; return NONE; }
    if (e >= 0) {
        if (tok_of(s, e) == c) return e;
        return add_edge(s, p, cur, c) ? ERR : NONE;
    }
    if (ensure_hash(s, 1)) return ERR;
    e = s->st[p].edge; /* re-read: the table may have grown */
    Hash h = hash_of(s, p, c);
    int found;
    uint64_t i = h_probe(s, h, p, c, &found);
    if (found) return s->slot[i].tgt;
    h_put(s, i, h.tag, p, cur, -(e + 2));
    s->st[p].edge = -(int32_t)(i + 2);
    return NONE;
}

/* If p --c--> q, point that edge at cl and return 1; else return 0. An inline edge needs no
 * token check: an edge into q always carries q's token, c. */
static inline int redirect_edge(SamCore *s, int32_t p, int32_t c, int32_t q, int32_t cl) {
    int32_t e = s->st[p].edge;
    if (e >= 0) {
        if (e != q) return 0;
        s->st[p].edge = cl;
        return 1;
    }
    if (e == NONE) return 0;
    int64_t i = h_find(s, p, c);
    if (i < 0 || s->slot[i].tgt != q) return 0;
    s->slot[i].tgt = cl;
    return 1;
}

static int32_t new_state(SamCore *s, int32_t len, int32_t link, int32_t fpos) {
    if (ensure_states(s, 1)) return -2;
    int32_t id = (int32_t)s->ns++;
    s->st[id].len = len; s->st[id].link = link; s->st[id].fpos = fpos; s->st[id].edge = NONE;
    if (s->evidence) { s->ev[id].cnt = 0; s->ev[id].rpos = NONE; s->ev[id].best = NONE; s->ev[id].cont = 0; }
    return id;
}

/* A copy of q with a shorter len: same edges, same link, same first end position. */
static int32_t clone_state(SamCore *s, int32_t q, int32_t len) {
    int32_t cl = new_state(s, len, s->st[q].link, s->st[q].fpos);
    if (cl < 0) return cl;
    if (s->evidence) s->ev[cl] = s->ev[q]; /* the same end positions (until the walk adds the new one), the same children */
    int32_t e = s->st[q].edge;
    if (e >= NONE) { s->st[cl].edge = e; return cl; }
    int64_t deg = 0;
    for (int32_t j = -(e + 2); j != NONE; j = s->slot[j].next) deg++;
    if (ensure_hash(s, deg)) return -2;
    int32_t head = NONE;
    for (int32_t j = -(s->st[q].edge + 2); j != NONE; j = s->slot[j].next)
        head = (int32_t)h_insert(s, cl, s->slot[j].tgt, tok_of(s, s->slot[j].tgt), head);
    s->st[cl].edge = -(head + 2);
    return cl;
}

/* Redirect the edges on c from p up its suffix links that point at q, to cl. */
static inline void redirect(SamCore *s, int32_t p, int32_t c, int32_t q, int32_t cl) {
    while (p != NONE && redirect_edge(s, p, c, q, cl)) {
        if (s->evidence && s->ev[p].best == q) s->ev[p].best = cl;   /* cl has q's cnt, rpos and fpos */
        p = s->st[p].link;
    }
}

/* best[p] and cont[p] are kept exactly (equal to a scan of p's edges, the Python
 * reference's definition) by following every change of a child's key (cnt, rpos, -fpos):
 *   - a new edge p -> cur (cnt 0): cur may become best (ev_consider);
 *   - a clone cl of q copies q's record (same children); an edge redirected from q to cl
 *     moves best from q to cl (same key: cl has q's cnt, rpos and fpos);
 *   - count_position: cnt[t]++ for the counted states t of the new end's chain. The parents of
 *     such a t are exactly the states p on the previous end's chain (the document's prev) with
 *     len(link(t)) <= len(p) < len(t): both chains are walked together, no edge is read.
 *     Each such p gets cont[p] += 1 and t as best if t's key now beats best[p]'s;
 *   - mark_recent: rpos[t] changes for the marked states t, the same merged walk one position
 *     later. A rise is handled as above; a fall (possible only with interleaved documents,
 *     when one marks an older end than another did) makes best[p] DIRTY if it was t: it is
 *     found again by a scan when read (frequent_child).
 * The root is skipped: no draft reads its children (it has one per token of the vocabulary). */
static inline int ev_better(const SamCore *s, int32_t a, int32_t b) {
    const Ev *x = &s->ev[a], *y = &s->ev[b];
    return x->cnt > y->cnt || (x->cnt == y->cnt && (x->rpos > y->rpos
           || (x->rpos == y->rpos && s->st[a].fpos < s->st[b].fpos)));
}

static inline void ev_consider(SamCore *s, int32_t p, int32_t t) {
    int32_t b = s->ev[p].best;
    if (b == DIRTY || b == t) return;
    if (b == NONE || ev_better(s, t, b)) s->ev[p].best = t;
}

/* The new end position belongs to every state on the suffix-link chain of the document's new
 * last state. The chain is as long as the longest repeated suffix, so an unbounded walk costs
 * O(match length) per token on repetitive text; the first COUNT_WALK states (the longest
 * strings, the ones drafts are read from) are counted, shorter strings beyond them are
 * undercounted. The Python reference walks the same way. p: the previous end's state (the
 * parents' chain, see above). */
#define COUNT_WALK 64
static inline void count_position(SamCore *s, int32_t t, int32_t p) {
    for (int i = 0; i < COUNT_WALK && t > 0; i++) {
        s->ev[t].cnt++;
        int32_t lo = s->st[s->st[t].link].len;
        for (; p > 0 && s->st[p].len >= lo; p = s->st[p].link) {
            s->ev[p].cont++;
            ev_consider(s, p, t);
        }
        t = s->st[t].link;
    }
}

/* rpos lags one position behind: before a document's next token is added, the states of its
 * previous end get that end as their latest occurrence. So after the append, rpos of a state
 * on the current chain is its latest occurrence before the current one (one that has a
 * continuation in its document). p: the parents' chain, as in count_position. */
static inline void mark_recent(SamCore *s, int32_t t, int32_t p, int32_t pos) {
    for (int i = 0; i < COUNT_WALK && t > 0; i++) {
        int32_t old = s->ev[t].rpos;
        s->ev[t].rpos = pos;
        int32_t lo = s->st[s->st[t].link].len;
        for (; p > 0 && s->st[p].len >= lo; p = s->st[p].link) {
            if (pos > old) ev_consider(s, p, t);
            else if (pos < old && s->ev[p].best == t) s->ev[p].best = DIRTY;
        }
        t = s->st[t].link;
    }
}

static int append_token_(SamCore *s, int64_t doc, int32_t c);
static int append_token(SamCore *s, int64_t doc, int32_t c) {
    if (!s->evidence) return append_token_(s, doc, c);
    if (s->doc[doc].end >= 0) mark_recent(s, s->doc[doc].last, s->doc[doc].prev, s->doc[doc].end);
    int32_t before = s->doc[doc].last;
    if (append_token_(s, doc, c)) return -1;
    s->doc[doc].prev = before;
    count_position(s, s->doc[doc].last, before);
    return 0;
}

static int append_token_(SamCore *s, int64_t doc, int32_t c) {
    int32_t pos = (int32_t)s->n;
    s->text[s->n++] = c;
    if (s->interleaved) {
        s->succ[pos] = NONE;
        if (s->doc[doc].end >= 0) s->succ[s->doc[doc].end] = pos;
    }
    s->doc[doc].end = pos;
    int32_t last = s->doc[doc].last;
    int32_t q = get_trans(s, last, c);
    if (q != NONE) {
        /* The document's new prefix already occurs (another document of the group). */
        if (s->st[last].len + 1 == s->st[q].len) { s->doc[doc].last = q; return 0; }
        int32_t cl = clone_state(s, q, s->st[last].len + 1);
        if (cl < 0) return -1;
        redirect(s, last, c, q, cl);
        s->st[q].link = cl;
        s->doc[doc].last = cl;
        return 0;
    }
    int32_t cur = new_state(s, s->st[last].len + 1, 0, pos);
    if (cur < 0) return -1;
    int32_t p = last;
    q = NONE;
    while (p != NONE && (q = trans_or_add(s, p, c, cur)) == NONE) {
        if (s->evidence && p > 0) ev_consider(s, p, cur);
        p = s->st[p].link;
    }
    if (q == ERR) return -1;
    if (p != NONE) {
        if (s->st[p].len + 1 == s->st[q].len) {
            s->st[cur].link = q;
        } else {
            int32_t cl = clone_state(s, q, s->st[p].len + 1);
            if (cl < 0) return -1;
            redirect(s, p, c, q, cl);
            s->st[q].link = cl;
            s->st[cur].link = cl;
        }
    }
    s->doc[doc].last = cur;
    return 0;
}

static inline int32_t succ_of(const SamCore *s, int32_t pos) {
    if (s->interleaved) return s->succ[pos];
    int32_t nx = pos + 1;
    return (nx < s->n && s->text[nx] != SEP) ? nx : NONE;
}

/* min_endpos with a continuation: climb suffix links from `st` past states whose earliest
 * occurrence is `exclude` (the document's own last position) or has nothing after it yet.
 * Returns the state (0 = none) and sets *L to the match length. */
static int32_t usable_state(const SamCore *s, int32_t st, int64_t len, int32_t exclude, int64_t *L) {
    while (st > 0 && (s->st[st].fpos == exclude || succ_of(s, s->st[st].fpos) == NONE)) {
        st = s->st[st].link;
        len = s->st[st].len;
    }
    *L = st > 0 ? len : 0;
    return st;
}

/* ---------- token input ---------- */

/* Calls fn(s, doc, token) for every token of obj (buffer of ints, or any iterable of ints).
 * Validation happens before anything is appended, so bad input leaves the automaton as it was. */
/* Token ids read from Python. A decode step appends a handful of tokens: those stay in the
 * inline buffer, so the per-call path does no malloc. */
typedef struct { int32_t *buf; Py_ssize_t n; int32_t small[16]; } TokenVec;

static int32_t *tv_alloc(TokenVec *tv, Py_ssize_t n) {
    tv->buf = n <= 16 ? tv->small : (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!tv->buf) PyErr_NoMemory();
    return tv->buf;
}

static void tv_free(TokenVec *tv) {
    if (tv->buf != tv->small) free(tv->buf);
    tv->buf = NULL;
}

static int read_tokens_any(PyObject *obj, TokenVec *out);

/* Empty input is an error: it is always a caller's bug (nothing was emitted or tokenized). */
static int read_tokens(PyObject *obj, TokenVec *out) {
    if (read_tokens_any(obj, out)) return -1;
    if (out->n == 0) {
        tv_free(out);
        PyErr_SetString(PyExc_ValueError, "no token ids given (empty input)");
        return -1;
    }
    return 0;
}

static int read_tokens_any(PyObject *obj, TokenVec *out) {
    out->buf = NULL; out->n = 0;
    if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) && !PyByteArray_Check(obj)) {
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_ND | PyBUF_C_CONTIGUOUS) == 0) {
            const char *f = view.format ? view.format : "B";
            if (*f == '<' || *f == '=' || *f == '@' || *f == '!' || *f == '>') f++;
            char code = f[0];
            int is_signed = (code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q');
            int is_unsigned = (code == 'B' || code == 'H' || code == 'I' || code == 'L' || code == 'Q');
            if ((!is_signed && !is_unsigned) || f[1] != '\0' || view.ndim > 1) {
                PyBuffer_Release(&view);
                PyErr_Format(PyExc_ValueError,
                             "token ids must be a 1-D array of integers (got buffer format '%s', ndim %d)",
                             view.format ? view.format : "B", view.ndim);
                return -1;
            }
            Py_ssize_t n = view.itemsize ? view.len / view.itemsize : 0;
            if (!tv_alloc(out, n)) { PyBuffer_Release(&view); return -1; }
            const char *base = (const char *)view.buf;
            /* int32 / int64 arrays (what tokenizers and engines hand over): copy first, check
             * the range once over the whole batch, and find the offending index only on error. */
            if (is_signed && (view.itemsize == 4 || view.itemsize == 8)) {
                int bad = 0;
                if (view.itemsize == 4) {
                    const int32_t *src = (const int32_t *)base;
                    for (Py_ssize_t i = 0; i < n; i++) { out->buf[i] = src[i]; bad |= src[i] < 0; }
                } else {
                    const int64_t *src = (const int64_t *)base;
                    for (Py_ssize_t i = 0; i < n; i++) {
                        out->buf[i] = (int32_t)src[i];
                        bad |= (uint64_t)src[i] > (uint64_t)MAX_TOKEN;
                    }
                }
                if (!bad) { out->n = n; PyBuffer_Release(&view); return 0; }
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                long long v; unsigned long long u;
                const char *ptr = base + i * view.itemsize;
                switch (view.itemsize) {
                case 1: v = is_signed ? *(const int8_t *)ptr : *(const uint8_t *)ptr; break;
                case 2: v = is_signed ? *(const int16_t *)ptr : *(const uint16_t *)ptr; break;
                case 4: v = is_signed ? *(const int32_t *)ptr : (long long)*(const uint32_t *)ptr; break;
                default:
                    if (is_signed) v = *(const int64_t *)ptr;
                    else { u = *(const uint64_t *)ptr; v = u > (unsigned long long)MAX_TOKEN ? MAX_TOKEN + 1 : (long long)u; }
                }
                if (v < 0 || v > MAX_TOKEN) {
                    PyBuffer_Release(&view); tv_free(out);
                    PyErr_Format(PyExc_ValueError, "token id %lld at index %zd is out of range [0, 2^31-2]", v, i);
                    return -1;
                }
                out->buf[i] = (int32_t)v;
            }
            out->n = n;
            PyBuffer_Release(&view);
            return 0;
        }
        PyErr_Clear();
    }
    if (PyLong_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "token ids must be an iterable of ints, not a single int");
        return -1;
    }
    PyObject *seq = PySequence_Fast(obj, "token ids must be an iterable of non-negative ints or a 1-D integer array");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (!tv_alloc(out, n)) { Py_DECREF(seq); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        if (!PyLong_Check(it)) {
            /* numpy integer scalars are not PyLong but implement __index__ */
            if (PyFloat_Check(it) || !PyIndex_Check(it)) {
                PyErr_Format(PyExc_ValueError, "token id at index %zd is %R (%s), not an int", i, it,
                             Py_TYPE(it)->tp_name);
                goto fail;
            }
        }
        long long v = PyLong_AsLongLong(it);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "token id at index %zd is out of range: %R", i, it);
            goto fail;
        }
        if (v < 0 || v > MAX_TOKEN) {
            PyErr_Format(PyExc_ValueError, "token id %lld at index %zd is out of range [0, 2^31-2]", v, i);
            goto fail;
        }
        out->buf[i] = (int32_t)v;
    }
    out->n = n;
    Py_DECREF(seq);
    return 0;
fail:
    tv_free(out);
    Py_DECREF(seq);
    return -1;
}

/* ---------- Python type ---------- */

/* The words for [lo, hi] in an error message (hi = PY_SSIZE_T_MAX: no upper bound). */
static const char *range_text(char *buf, size_t size, Py_ssize_t lo, Py_ssize_t hi) {
    if (hi == PY_SSIZE_T_MAX) PyOS_snprintf(buf, size, ">= %zd", lo);
    else PyOS_snprintf(buf, size, "in [%zd, %zd]", lo, hi);
    return buf;
}

/* An integer argument (k, depth, a document, a state, reserve...) in [lo, hi]: a Python or
 * numpy integer (anything with __index__) is taken alike; a bool, a float or anything else is
 * refused, naming the argument and its range (python_automaton.check_count words it the same). */
static int as_count(PyObject *v, const char *name, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t *out) {
    char range[64];
    if (PyBool_Check(v)) {
        PyErr_Format(PyExc_ValueError, "%s = %R: must be an integer %s, not a bool", name, v,
                     range_text(range, sizeof range, lo, hi));
        return -1;
    }
    if (!PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s = %R (%s): must be an integer %s", name, v, Py_TYPE(v)->tp_name,
                     range_text(range, sizeof range, lo, hi));
        return -1;
    }
    *out = PyNumber_AsSsize_t(v, PyExc_OverflowError);
    if (*out == -1 && PyErr_Occurred()) return -1;
    if (*out < lo || *out > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be %s (got %zd)", name, range_text(range, sizeof range, lo, hi), *out);
        return -1;
    }
    return 0;
}

/* a document index or a state: any integer here, checked against the automaton by the caller */
static int as_index(PyObject *v, const char *name, Py_ssize_t *out) {
    return as_count(v, name, PY_SSIZE_T_MIN, PY_SSIZE_T_MAX, out);
}

static int check_doc(SamCore *s, Py_ssize_t doc) {
    if (doc < 0 || doc >= s->ndocs) {
        PyErr_Format(PyExc_IndexError, "document %zd does not exist (this automaton has %lld)", doc,
                     (long long)s->ndocs);
        return -1;
    }
    return 0;
}

static int core_setup(SamCore *self, int interleaved, Py_ssize_t reserve, int evidence) {
    if (self->st) { PyErr_SetString(PyExc_RuntimeError, "already initialised"); return -1; }
    self->interleaved = interleaved;
    self->evidence = evidence;
    if (ensure_text(self, reserve > 0 ? reserve : 16) || ensure_states(self, reserve > 0 ? reserve + reserve * 5 / 8 : 16))
        return -1;
    /* the edge table sized like reserve_for(): small (16 slots) unless told what is coming */
    int bits = 4;
    while (((int64_t)3 << bits) < (reserve + reserve / 8) * 4) bits++;
    if (alloc_hash(self, bits)) return -1;
    if (new_state(self, 0, NONE, NONE) < 0) return -1; /* the root */
    return 0;
}

/* reserve: the tokens to make room for at once, at most what an automaton holds (2^31-1) */
static int parse_reserve(PyObject *v, Py_ssize_t *reserve) {
    return as_count(v, "reserve", 0, INT32_MAX, reserve);
}

static int SamCore_init(SamCore *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"interleaved", "reserve", "evidence", NULL};
    int interleaved = 0, evidence = 0;
    Py_ssize_t reserve = 0;
    PyObject *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pOp", kwlist, &interleaved, &res, &evidence)
        || (res && parse_reserve(res, &reserve))) return -1;
    return core_setup(self, interleaved, reserve, evidence);
}

static void SamCore_dealloc(SamCore *self) {
    free(self->text); free(self->succ); free(self->st); free(self->ev); free(self->slot); free(self->ctrl);
    if (self->doc != &self->doc_one) free(self->doc);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int64_t add_doc(SamCore *self) {
    if (!self->st) { PyErr_SetString(PyExc_RuntimeError, "not initialised"); return -1; }
    if (self->ndocs == 0) {
        self->doc = &self->doc_one;
        self->doc_cap = 1;
    } else if (self->ndocs >= self->doc_cap) {
        int64_t cap = next_cap(self->doc_cap, self->ndocs + 1);
        Doc *d = (Doc *)(self->doc == &self->doc_one ? malloc((size_t)cap * sizeof(Doc))
                                                     : realloc(self->doc, (size_t)cap * sizeof(Doc)));
        if (!d) { PyErr_NoMemory(); return -1; }
        if (self->doc == &self->doc_one) d[0] = self->doc_one;
        self->doc = d;
        self->doc_cap = cap;
    }
    if (!self->interleaved && self->n > 0) { /* a separator keeps drafts inside their document */
        if (ensure_text(self, 1)) return -1;
        self->text[self->n++] = SEP;
    }
    self->doc[self->ndocs].last = 0;
    self->doc[self->ndocs].end = NONE;
    self->doc[self->ndocs].prev = 0;
    return self->ndocs++;
}

static PyObject *SamCore_new_doc(SamCore *self, PyObject *unused) {
    int64_t doc = add_doc(self);
    return doc < 0 ? NULL : PyLong_FromLongLong(doc);
}

/* Size the state array and the edge table once for a batch of n tokens, instead of growing
 * them step by step inside the loop (on short requests the repeated rehashing was a third
 * of the work). The estimates are what real token streams need: about 1.5 states and 1.1
 * hashed edges per token; a batch that needs more still grows as usual. */
static int reserve_for(SamCore *s, int64_t n) {
    if (n < 8) return 0;
    if (ensure_states(s, n + n * 5 / 8)) return -1;
    return ensure_hash(s, n + n / 8);
}

/* After a batch: give back what the reservation did not use (beyond a sixteenth of slack). */
static void trim_states(SamCore *s) {
    int64_t keep = s->ns + s->ns / 16;
    if (s->state_cap <= keep) return;
    State *p = (State *)realloc(s->st, (size_t)keep * sizeof(State));
    if (!p) return;
    s->st = p;
    if (s->evidence) {   /* a failed shrink keeps the larger block */
        Ev *v = (Ev *)realloc(s->ev, (size_t)keep * sizeof(Ev));
        if (v) s->ev = v;
    }
    s->state_cap = keep;
}

static int append_tokens(SamCore *self, Py_ssize_t doc, const TokenVec *tv) {
    if (ensure_text(self, tv->n) || reserve_for(self, tv->n)) return -1;
    for (Py_ssize_t i = 0; i < tv->n; i++)
        if (append_token(self, doc, tv->buf[i])) return -1;
    if (tv->n >= 8) trim_states(self);
    return 0;
}

static int extend_doc(SamCore *self, PyObject *tokens, Py_ssize_t doc) {
    if (check_doc(self, doc)) return -1;
    if (!self->interleaved && doc != self->ndocs - 1) {
        PyErr_SetString(PyExc_ValueError, "a contiguous automaton only extends its newest document");
        return -1;
    }
    TokenVec tv;
    if (read_tokens(tokens, &tv)) return -1;
    int rc = append_tokens(self, doc, &tv);
    tv_free(&tv);
    return rc;
}

/* extend(tokens, doc=0) */
static PyObject *SamCore_extend(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) { PyErr_SetString(PyExc_TypeError, "extend(tokens, doc=0)"); return NULL; }
    Py_ssize_t doc = 0;
    if (nargs == 2 && as_index(args[1], "doc", &doc)) return NULL;
    if (extend_doc(self, args[0], doc)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *draft_list(SamCore *s, int32_t e, Py_ssize_t k) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    int32_t p = e;
    for (Py_ssize_t i = 0; i < k; i++) {
        p = succ_of(s, p);
        if (p == NONE) break;
        PyObject *v = PyLong_FromLong(s->text[p]);
        if (!v || PyList_Append(out, v)) { Py_XDECREF(v); Py_DECREF(out); return NULL; }
        Py_DECREF(v);
    }
    return out;
}

static int parse_doc_arg(SamCore *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t idx, Py_ssize_t *doc) {
    *doc = 0;
    if (nargs > idx && as_index(args[idx], "doc", doc)) return -1;
    return check_doc(self, *doc);
}

/* The usable state of doc's longest match (0, L = 0 for an empty doc). */
static int32_t doc_match(SamCore *s, Py_ssize_t doc, int64_t *L) {
    *L = 0;
    if (s->doc[doc].end < 0) return 0;
    int32_t last = s->doc[doc].last;
    return usable_state(s, last, s->st[last].len, s->doc[doc].end, L);
}

/* k, the most draft tokens: 0 drafts nothing */
static int parse_k(PyObject *arg, Py_ssize_t *k) {
    return as_count(arg, "k", 0, PY_SSIZE_T_MAX, k);
}

/* (state, length, k) of a lookup: the usable state and its length in *u, *L */
static int parse_lookup(SamCore *s, PyObject *const *args, int32_t *u, int64_t *L, Py_ssize_t *k) {
    Py_ssize_t st, l;
    if (as_index(args[0], "state", &st) || as_index(args[1], "length", &l) || parse_k(args[2], k)) return -1;
    if (st < 0 || st >= s->ns || l < 0) { PyErr_SetString(PyExc_ValueError, "invalid lookup arguments"); return -1; }
    *u = usable_state(s, (int32_t)st, l, NONE, L);
    return 0;
}

/* match(doc=0) -> (match_length, earliest end position or -1) */
static PyObject *SamCore_match(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t doc;
    if (nargs > 1) { PyErr_SetString(PyExc_TypeError, "match(doc=0)"); return NULL; }
    if (parse_doc_arg(self, args, nargs, 0, &doc)) return NULL;
    int64_t L;
    int32_t st = doc_match(self, doc, &L);
    return Py_BuildValue("(Li)", (long long)L, st > 0 ? self->st[st].fpos : -1);
}

/* draft(k, doc=0) -> list of up to k tokens after the earliest earlier occurrence */
static PyObject *SamCore_draft(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) { PyErr_SetString(PyExc_TypeError, "draft(k, doc=0)"); return NULL; }
    Py_ssize_t k, doc;
    if (parse_k(args[0], &k) || parse_doc_arg(self, args, nargs, 1, &doc)) return NULL;
    int64_t L;
    int32_t st = doc_match(self, doc, &L);
    if (st <= 0) return PyList_New(0);
    return draft_list(self, self->st[st].fpos, k);
}

/* match_draft(k, doc=0) -> (match_length, draft): both in one call, for drafters. */
static PyObject *SamCore_match_draft(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) { PyErr_SetString(PyExc_TypeError, "match_draft(k, doc=0)"); return NULL; }
    Py_ssize_t k, doc;
    if (parse_k(args[0], &k) || parse_doc_arg(self, args, nargs, 1, &doc)) return NULL;
    int64_t L;
    int32_t st = doc_match(self, doc, &L);
    PyObject *d = st > 0 ? draft_list(self, self->st[st].fpos, k) : PyList_New(0);
    if (!d) return NULL;
    return Py_BuildValue("(LN)", (long long)L, d);
}

/* ---------- evidence for the draft-length policy ---------- */

/* The child of q with the highest (cnt, rpos, -fpos), by reading all of q's edges. */
static int32_t scan_best(const SamCore *s, int32_t q, int64_t *continued) {
    int32_t e = s->st[q].edge, best = NONE;
    int64_t total = 0;
    if (e >= 0) { *continued = s->ev[e].cnt; return e; }
    for (int32_t j = e == NONE ? NONE : -(e + 2); j != NONE; j = s->slot[j].next) {
        int32_t t = s->slot[j].tgt;
        total += s->ev[t].cnt;
        if (best == NONE || ev_better(s, t, best)) best = t;
    }
    *continued = total;
    return best;
}

/* The child of q seen most often (ties: the latest occurrence, then the earliest first one),
 * NONE without one, and *continued = the occurrences of q followed by a token (the sum of its
 * children's cnt). O(1): both are kept (best, cont; see ev_consider). A best made DIRTY is
 * found again here by a scan of q's edges (as the root's, which is not kept). */
static int32_t frequent_child(SamCore *s, int32_t q, int64_t *continued) {
    int32_t e = s->st[q].edge;
    if (e >= NONE) { *continued = e == NONE ? 0 : s->ev[e].cnt; return e; }   /* one child or none */
    if (q == 0) return scan_best(s, q, continued);
    *continued = s->ev[q].cont;
    if (s->ev[q].best == DIRTY) { int64_t total; s->ev[q].best = scan_best(s, q, &total); }
    return s->ev[q].best;
}

/* Which continuation a draft follows. */
enum { CHOOSE_EARLIEST = 0, CHOOSE_FREQUENT = 1, CHOOSE_RECENT = 2 };

/* (L, draft, counts) from the matched state q: counts[0] = occurrences of the match,
 * counts[i] = occurrences of the match followed by draft[:i]. The draft continues the
 * earliest occurrence (min_endpos), the latest earlier one (recent; the earliest where it has
 * no continuation yet), or takes the most frequent continuation token by token; the frequent
 * choice adds continued[i] = how many occurrences of the match + draft[:i] are followed by
 * some token (the sum over its edges: the current ends of every growing document excluded). */
static PyObject *evidence_from(SamCore *s, int32_t q, int64_t L, Py_ssize_t k, int mode) {
    int frequent = mode == CHOOSE_FREQUENT;
    PyObject *toks = PyList_New(0), *cnts = PyList_New(0), *cont = PyList_New(0);
    if (!toks || !cnts || !cont) goto fail;
    if (q > 0) {
        PyObject *v = PyLong_FromLong(s->ev[q].cnt);
        if (!v || PyList_Append(cnts, v)) { Py_XDECREF(v); goto fail; }
        Py_DECREF(v);
        int32_t p = s->st[q].fpos;
        if (mode == CHOOSE_RECENT && s->ev[q].rpos != NONE && succ_of(s, s->ev[q].rpos) != NONE) p = s->ev[q].rpos;
        for (Py_ssize_t i = 0; i < k; i++) {
            int32_t t, c;
            int64_t continued = -1;
            if (frequent) {
                if ((t = frequent_child(s, q, &continued)) == NONE) break;
                c = tok_of(s, t);
            } else {
                if ((p = succ_of(s, p)) == NONE) break;
                c = s->text[p];
                if ((t = get_trans(s, q, c)) == NONE) break;   /* cannot happen: the string occurs */
            }
            PyObject *a = PyLong_FromLong(c), *b = PyLong_FromLong(s->ev[t].cnt), *d = PyLong_FromLongLong(continued);
            int bad = !a || !b || !d || PyList_Append(toks, a) || PyList_Append(cnts, b) || PyList_Append(cont, d);
            Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(d);
            if (bad) goto fail;
            q = t;
        }
    }
    if (!frequent) { Py_DECREF(cont); return Py_BuildValue("(LNN)", (long long)L, toks, cnts); }
    return Py_BuildValue("(LNNN)", (long long)L, toks, cnts, cont);   /* L is 0 without a match */
fail:
    Py_XDECREF(toks); Py_XDECREF(cnts); Py_XDECREF(cont);
    return NULL;
}

static int check_evidence(SamCore *self) {
    if (self->evidence) return 0;
    PyErr_SetString(PyExc_ValueError, "this automaton keeps no evidence: make it with evidence=True");
    return -1;
}

static int parse_mode(PyObject *arg, int *mode) {
    Py_ssize_t m;
    if (as_index(arg, "choice", &m)) return -1;
    if (m < 0 || m > 2) { PyErr_SetString(PyExc_ValueError, "choice: 0 earliest, 1 frequent, 2 recent"); return -1; }
    *mode = (int)m;
    return 0;
}

/* evidence(k, doc=0, choice=0) -> (match_length, draft, counts) */
static PyObject *SamCore_evidence(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) { PyErr_SetString(PyExc_TypeError, "evidence(k, doc=0, choice=0)"); return NULL; }
    if (check_evidence(self)) return NULL;
    Py_ssize_t k, doc;
    if (parse_k(args[0], &k) || parse_doc_arg(self, args, nargs > 2 ? 2 : nargs, 1, &doc)) return NULL;
    int mode = 0;
    if (nargs > 2 && parse_mode(args[2], &mode)) return NULL;
    int64_t L;
    int32_t st = doc_match(self, doc, &L);
    return evidence_from(self, st, L, k, mode);
}

/* lookup_evidence(state, length, k, choice=0) -> (match_length, draft, counts) */
static PyObject *SamCore_lookup_evidence(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 4) { PyErr_SetString(PyExc_TypeError, "lookup_evidence(state, length, k, choice=0)"); return NULL; }
    if (check_evidence(self)) return NULL;
    int32_t u;
    int64_t L;
    Py_ssize_t k;
    if (parse_lookup(self, args, &u, &L, &k)) return NULL;
    int mode = 0;
    if (nargs > 3 && parse_mode(args[3], &mode)) return NULL;
    return evidence_from(self, u, L, k, mode);
}

/* The match and up to depth-1 shorter matches up its suffix links, each as evidence_from's
 * (L, draft, counts): a shorter match has more occurrences, so better-estimated
 * continuation probabilities (the policy scores each candidate). depth bounds the walk. */
static PyObject *evidence_chain(SamCore *s, int32_t q, int64_t L, Py_ssize_t k, int mode, Py_ssize_t depth) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t d = 0; d < depth && q > 0; d++) {
        PyObject *t = evidence_from(s, q, L, k, mode);
        if (!t || PyList_Append(out, t)) { Py_XDECREF(t); Py_DECREF(out); return NULL; }
        Py_DECREF(t);
        q = s->st[q].link;
        L = s->st[q].len;
    }
    return out;
}

static int parse_depth(PyObject *arg, Py_ssize_t *depth) {
    return as_count(arg, "depth", 1, PY_SSIZE_T_MAX, depth);
}

/* evidence_chain(k, doc, choice, depth) -> [(match_length, draft, counts), ...], longest match first */
static PyObject *SamCore_evidence_chain(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "evidence_chain(k, doc, choice, depth)"); return NULL; }
    if (check_evidence(self)) return NULL;
    Py_ssize_t k, doc, depth;
    int mode;
    if (parse_k(args[0], &k) || parse_doc_arg(self, args, 2, 1, &doc) || parse_mode(args[2], &mode)
        || parse_depth(args[3], &depth)) return NULL;
    int64_t L;
    int32_t st = doc_match(self, doc, &L);
    return evidence_chain(self, st, L, k, mode, depth);
}

/* lookup_evidence_chain(state, length, k, choice, depth) -> as evidence_chain, from a walked state */
static PyObject *SamCore_lookup_evidence_chain(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "lookup_evidence_chain(state, length, k, choice, depth)"); return NULL; }
    if (check_evidence(self)) return NULL;
    int32_t u;
    int64_t L;
    Py_ssize_t k, depth;
    int mode;
    if (parse_lookup(self, args, &u, &L, &k) || parse_mode(args[3], &mode) || parse_depth(args[4], &depth)) return NULL;
    return evidence_chain(self, u, L, k, mode, depth);
}

/* count(state) -> occurrences of the state's strings (0 for the root) */
static PyObject *SamCore_count(SamCore *self, PyObject *arg) {
    Py_ssize_t st;
    if (as_index(arg, "state", &st)) return NULL;
    if (st < 0 || st >= self->ns) { PyErr_SetString(PyExc_ValueError, "no such state"); return NULL; }
    if (check_evidence(self)) return NULL;
    return PyLong_FromLong(st == 0 ? 0 : self->ev[st].cnt);
}

/* frequent(state) -> (child or -1, continued): the kept most frequent child and the
 * occurrences followed by a token (what the frequent choice reads; a DIRTY best is found
 * again first); for the root, from a scan of its edges. */
static PyObject *SamCore_frequent(SamCore *self, PyObject *arg) {
    Py_ssize_t st;
    if (as_index(arg, "state", &st)) return NULL;
    if (st < 0 || st >= self->ns) { PyErr_SetString(PyExc_ValueError, "no such state"); return NULL; }
    if (check_evidence(self)) return NULL;
    int64_t cont;
    int32_t best;
    if (st == 0) best = scan_best(self, 0, &cont);
    else {
        if (self->ev[st].best == DIRTY) self->ev[st].best = scan_best(self, (int32_t)st, &cont);
        best = self->ev[st].best;
        cont = self->ev[st].cont;
    }
    return Py_BuildValue("(iL)", best, (long long)cont);
}

static PyObject *SamCore_get_match_length(SamCore *self, void *closure) {
    if (self->ndocs == 0 || self->doc[0].end < 0) return PyLong_FromLong(0);
    int64_t L;
    usable_state(self, self->doc[0].last, self->st[self->doc[0].last].len, self->doc[0].end, &L);
    return PyLong_FromLongLong(L);
}

/* advance(state, length, tokens) -> (state, length): walk an external context through the
 * automaton, keeping the longest suffix of that context that occurs in the indexed text. */
static PyObject *SamCore_advance(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "advance(state, length, tokens)"); return NULL; }
    Py_ssize_t st, l;
    if (as_index(args[0], "state", &st) || as_index(args[1], "length", &l)) return NULL;
    if (st < 0 || st >= self->ns || l < 0) { PyErr_SetString(PyExc_ValueError, "invalid matcher state"); return NULL; }
    TokenVec tv;
    if (read_tokens(args[2], &tv)) return NULL;
    int32_t p = (int32_t)st;
    for (Py_ssize_t i = 0; i < tv.n; i++) {
        int32_t c = tv.buf[i];
        int32_t t = get_trans(self, p, c);
        while (t == NONE && p != 0) {
            p = self->st[p].link;
            l = self->st[p].len;
            t = get_trans(self, p, c);
        }
        if (t == NONE) { p = 0; l = 0; }
        else { p = t; l += 1; }
    }
    tv_free(&tv);
    return Py_BuildValue("(iL)", p, l);
}

/* lookup(state, length, k) -> (match_length, draft): the draft for a matcher state. */
static PyObject *SamCore_lookup(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "lookup(state, length, k)"); return NULL; }
    int32_t u;
    int64_t L;
    Py_ssize_t k;
    if (parse_lookup(self, args, &u, &L, &k)) return NULL;
    PyObject *d = u > 0 ? draft_list(self, self->st[u].fpos, k) : PyList_New(0);
    if (!d) return NULL;
    return Py_BuildValue("(LN)", (long long)L, d);
}

static PyObject *SamCore_doc_length(SamCore *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t doc;
    if (parse_doc_arg(self, args, nargs, 0, &doc)) return NULL;
    return PyLong_FromLong(self->doc[doc].end < 0 ? 0 : self->st[self->doc[doc].last].len);
}

static PyObject *SamCore_get_num_tokens(SamCore *s, void *c) { return PyLong_FromLongLong(s->n); }
static PyObject *SamCore_get_num_states(SamCore *s, void *c) { return PyLong_FromLongLong(s->ns); }
static PyObject *SamCore_get_num_docs(SamCore *s, void *c) { return PyLong_FromLongLong(s->ndocs); }
static PyObject *SamCore_get_num_edges(SamCore *s, void *c) {
    int64_t single = 0;
    for (int64_t i = 0; i < s->ns; i++) single += s->st[i].edge >= 0;
    return PyLong_FromLongLong(single + s->hcount);
}
/* Bytes held by the automaton's arrays (allocated capacity, not just the used part). */
static PyObject *SamCore_get_memory_bytes(SamCore *s, void *c) {
    int64_t b = s->text_cap * 4 * (s->interleaved ? 2 : 1) + s->state_cap * (int64_t)(sizeof(State) + (s->evidence ? sizeof(Ev) : 0)) + s->hcap * (int64_t)(sizeof(Slot) + 1) + GROUP
        + (s->doc == &s->doc_one ? 0 : s->doc_cap * (int64_t)sizeof(Doc));
    return PyLong_FromLongLong(b + (int64_t)sizeof(SamCore));
}

static PyMethodDef SamCore_methods[] = {
    {"new_doc", (PyCFunction)SamCore_new_doc, METH_NOARGS, "Start a document; returns its id."},
    {"extend", (PyCFunction)(void (*)(void))SamCore_extend, METH_FASTCALL, "extend(tokens, doc=0)"},
    {"match", (PyCFunction)(void (*)(void))SamCore_match, METH_FASTCALL,
     "match(doc=0) -> (match_length, earliest end position or -1)"},
    {"draft", (PyCFunction)(void (*)(void))SamCore_draft, METH_FASTCALL, "draft(k, doc=0) -> list[int]"},
    {"match_draft", (PyCFunction)(void (*)(void))SamCore_match_draft, METH_FASTCALL,
     "match_draft(k, doc=0) -> (match_length, draft)"},
    {"advance", (PyCFunction)(void (*)(void))SamCore_advance, METH_FASTCALL,
     "advance(state, length, tokens) -> (state, length)"},
    {"lookup", (PyCFunction)(void (*)(void))SamCore_lookup, METH_FASTCALL,
     "lookup(state, length, k) -> (match_length, draft)"},
    {"doc_length", (PyCFunction)(void (*)(void))SamCore_doc_length, METH_FASTCALL, "doc_length(doc=0)"},
    {"evidence", (PyCFunction)(void (*)(void))SamCore_evidence, METH_FASTCALL,
     "evidence(k, doc=0, choice=0) -> (match_length, draft, counts): counts[i] = occurrences of the match + draft[:i]; choice 0 earliest, 1 frequent, 2 recent"},
    {"lookup_evidence", (PyCFunction)(void (*)(void))SamCore_lookup_evidence, METH_FASTCALL,
     "lookup_evidence(state, length, k, choice=0) -> (match_length, draft, counts)"},
    {"evidence_chain", (PyCFunction)(void (*)(void))SamCore_evidence_chain, METH_FASTCALL,
     "evidence_chain(k, doc, choice, depth) -> [(match_length, draft, counts), ...]: the match and up to depth-1 shorter ones up its suffix links"},
    {"lookup_evidence_chain", (PyCFunction)(void (*)(void))SamCore_lookup_evidence_chain, METH_FASTCALL,
     "lookup_evidence_chain(state, length, k, choice, depth) -> [(match_length, draft, counts), ...]"},
    {"count", (PyCFunction)SamCore_count, METH_O, "count(state) -> occurrences of the state's strings"},
    {"frequent", (PyCFunction)SamCore_frequent, METH_O,
     "frequent(state) -> (child or -1, continued): the child seen most often and the occurrences followed by a token"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef SamCore_getset[] = {
    {"match_length", (getter)SamCore_get_match_length, NULL, "match length of document 0", NULL},
    {"num_tokens", (getter)SamCore_get_num_tokens, NULL, "positions in the text (separators included)", NULL},
    {"num_states", (getter)SamCore_get_num_states, NULL, "states, the root included", NULL},
    {"num_edges", (getter)SamCore_get_num_edges, NULL, "transitions", NULL},
    {"num_docs", (getter)SamCore_get_num_docs, NULL, "documents", NULL},
    {"memory_bytes", (getter)SamCore_get_memory_bytes, NULL, "bytes allocated for the automaton", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject SamCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "samspec_bench.sam._samcore.SamCore",
    .tp_basicsize = sizeof(SamCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Generalized suffix automaton over token documents (see samspec_bench.sam).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SamCore_init,
    .tp_dealloc = (destructor)SamCore_dealloc,
    .tp_methods = SamCore_methods,
    .tp_getset = SamCore_getset,
};

/* One text, document 0, made in one call: SuffixAutomaton(token_ids=None, *, reserve=0). A
 * request's automaton is created for every request of a rollout, so its constructor stays in C. */
static int SingleCore_init(SamCore *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"token_ids", "reserve", "evidence", NULL};
    int evidence = 0;
    PyObject *tokens = Py_None;
    Py_ssize_t reserve = 0;
    PyObject *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$Op", kwlist, &tokens, &res, &evidence)
        || (res && parse_reserve(res, &reserve))) return -1;
    if (tokens != Py_None && reserve == 0) {   /* size the arrays for the first batch at once */
        Py_ssize_t n = PyObject_Length(tokens);
        if (n < 0) PyErr_Clear(); else reserve = n;
    }
    if (core_setup(self, 0, reserve, evidence) || add_doc(self) < 0) return -1;
    return tokens == Py_None ? 0 : extend_doc(self, tokens, 0);
}

static PyTypeObject SingleCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "samspec_bench.sam._samcore.SingleCore",
    .tp_basicsize = sizeof(SamCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A suffix automaton over one growing text (document 0).",
    .tp_init = (initproc)SingleCore_init,
};

/* ---------- a batch of requests, each with its own automaton ----------
 * The drafter interface of samspec_bench.sam.drafters (start / extend / propose / stop by
 * request id) for the plain configuration: each request drafts from its own prompt and
 * prefix. A decode loop calls extend and propose once per request per step; done here, a
 * call costs a dict lookup instead of a Python frame. */
typedef struct {
    PyObject_HEAD
    PyObject *reqs; /* dict: request id -> SingleCore */
} SamBatch;

static PyObject *batch_lookup(SamBatch *self, PyObject *req_id) {
    PyObject *a = PyDict_GetItemWithError(self->reqs, req_id);  /* borrowed */
    if (!a && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, req_id);
    return a;
}

/* start(req_id, prompt_ids, group=None): group is accepted for the interface and ignored. */
static PyObject *SamBatch_start(SamBatch *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(kwnames, i)) ||
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "group") != 0) {
            PyErr_SetString(PyExc_TypeError, "start(req_id, prompt_ids, group=None)");
            return NULL;
        }
    }
    if (nargs + nkw < 2 || nargs + nkw > 3 || nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "start(req_id, prompt_ids, group=None)");
        return NULL;
    }
    PyObject *req_id = args[0];
    int has = PyDict_Contains(self->reqs, req_id);
    if (has < 0) return NULL;
    if (has) { PyErr_Format(PyExc_ValueError, "request %R already started", req_id); return NULL; }
    TokenVec tv;
    if (read_tokens_any(args[1], &tv)) return NULL;
    SamCore *a = (SamCore *)SingleCoreType.tp_alloc(&SingleCoreType, 0);
    int rc = !a || core_setup(a, 0, tv.n, 0) || add_doc(a) < 0 || (tv.n > 0 && append_tokens(a, 0, &tv))
             || PyDict_SetItem(self->reqs, req_id, (PyObject *)a);
    tv_free(&tv);
    Py_XDECREF(a);
    if (rc) return NULL;
    Py_RETURN_NONE;
}

/* extend(req_id, token_ids) */
static PyObject *SamBatch_extend(SamBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "extend(req_id, token_ids)"); return NULL; }
    PyObject *a = batch_lookup(self, args[0]);
    if (!a || extend_doc((SamCore *)a, args[1], 0)) return NULL;
    Py_RETURN_NONE;
}

/* propose(req_id, k) -> up to k draft tokens (min_endpos), [] without a match */
static PyObject *SamBatch_propose(SamBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "propose(req_id, k)"); return NULL; }
    SamCore *a = (SamCore *)batch_lookup(self, args[0]);
    if (!a) return NULL;
    return SamCore_draft(a, args + 1, 1);
}

/* stop(req_id): free its automaton */
static PyObject *SamBatch_stop(SamBatch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) { PyErr_SetString(PyExc_TypeError, "stop(req_id)"); return NULL; }
    if (PyDict_DelItem(self->reqs, args[0])) return NULL;
    Py_RETURN_NONE;
}

static PyObject *SamBatch_get_requests(SamBatch *self, void *c) { Py_INCREF(self->reqs); return self->reqs; }

static int SamBatch_init(SamBatch *self, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) { PyErr_SetString(PyExc_TypeError, "SamBatch()"); return -1; }
    if (!self->reqs && !(self->reqs = PyDict_New())) return -1;
    return 0;
}

static void SamBatch_dealloc(SamBatch *self) {
    Py_XDECREF(self->reqs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef SamBatch_methods[] = {
    {"start", (PyCFunction)(void (*)(void))SamBatch_start, METH_FASTCALL | METH_KEYWORDS,
     "start(req_id, prompt_ids, group=None): a request joins with its prompt"},
    {"extend", (PyCFunction)(void (*)(void))SamBatch_extend, METH_FASTCALL, "extend(req_id, token_ids)"},
    {"propose", (PyCFunction)(void (*)(void))SamBatch_propose, METH_FASTCALL, "propose(req_id, k) -> list[int]"},
    {"stop", (PyCFunction)(void (*)(void))SamBatch_stop, METH_FASTCALL, "stop(req_id)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef SamBatch_getset[] = {
    {"requests", (getter)SamBatch_get_requests, NULL, "the live requests: id -> automaton", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject SamBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "samspec_bench.sam._samcore.SamBatch",
    .tp_basicsize = sizeof(SamBatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Per-request automata behind the drafter interface (own context only).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SamBatch_init,
    .tp_dealloc = (destructor)SamBatch_dealloc,
    .tp_methods = SamBatch_methods,
    .tp_getset = SamBatch_getset,
};

/* ---------- the evidence policy's per-draft choice (EvidenceBatch) and its corrections' record ---------- */
#include "_acceptance_stats.h"
#include "_evidence_policy.h"

/* ---------- the n-gram baseline (vLLM's semantics) ---------- */

/* ngram_propose(tokens, min_n, max_n, k) -> list: the longest n in [min_n, max_n] such that the
 * last n tokens occur ending earlier, the earliest such occurrence, and up to k tokens after it.
 * A full rescan of the context, O(L * max_n) worst case, as vLLM's drafter rescans every step. */
static PyObject *ngram_propose(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "ngram_propose(tokens, min_n, max_n, k)"); return NULL; }
    Py_ssize_t min_n, max_n, k;
    if (as_count(args[1], "min_n", 1, PY_SSIZE_T_MAX, &min_n) || as_count(args[2], "max_n", 1, PY_SSIZE_T_MAX, &max_n)
        || parse_k(args[3], &k)) return NULL;
    if (max_n < min_n) {
        PyErr_SetString(PyExc_ValueError, "need 1 <= min_n <= max_n and k >= 0");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) return NULL;
    if (view.itemsize != 4 || !view.format || (strcmp(view.format, "i") && strcmp(view.format, "<i") && strcmp(view.format, "=i"))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "ngram_propose needs an int32 array");
        return NULL;
    }
    const int32_t *t = (const int32_t *)view.buf;
    Py_ssize_t n = view.len / 4;
    Py_ssize_t best = 0, best_end = -1;
    if (n >= min_n) {
        int32_t lastc = t[n - 1];
        for (Py_ssize_t j = 0; j + 1 < n; j++) {
            if (t[j] != lastc) continue;
            Py_ssize_t m = 1;
            while (m < max_n && m <= j && t[j - m] == t[n - 1 - m]) m++;
            if (m > best) { best = m; best_end = j; if (best == max_n) break; }
        }
    }
    PyObject *out = PyList_New(0);
    if (out && best >= min_n) {
        for (Py_ssize_t i = best_end + 1; i < n && i <= best_end + k; i++) {
            PyObject *v = PyLong_FromLong(t[i]);
            if (!v || PyList_Append(out, v)) { Py_XDECREF(v); Py_CLEAR(out); break; }
            Py_DECREF(v);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef module_methods[] = {
    {"ngram_propose", (PyCFunction)(void (*)(void))ngram_propose, METH_FASTCALL,
     "ngram_propose(tokens_int32, min_n, max_n, k) -> list[int]"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef samcore_module = {
    PyModuleDef_HEAD_INIT, "_samcore", "Suffix automaton core for samspec_bench.sam", -1, module_methods};

PyMODINIT_FUNC PyInit__samcore(void) {
    SingleCoreType.tp_base = &SamCoreType;
    if (PyType_Ready(&SamCoreType) < 0 || PyType_Ready(&SingleCoreType) < 0 || PyType_Ready(&SamBatchType) < 0
        || PyType_Ready(&EvRequestType) < 0 || PyType_Ready(&EvidenceBatchType) < 0
        || PyType_Ready(&AccStatsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&samcore_module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "SamCore", (PyObject *)&SamCoreType) < 0
        || PyModule_AddObjectRef(m, "SingleCore", (PyObject *)&SingleCoreType) < 0
        || PyModule_AddObjectRef(m, "SamBatch", (PyObject *)&SamBatchType) < 0
        || PyModule_AddObjectRef(m, "EvidenceBatch", (PyObject *)&EvidenceBatchType) < 0
        || PyModule_AddObjectRef(m, "AcceptanceStats", (PyObject *)&AccStatsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
