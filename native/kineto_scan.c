/* The Kineto batch scanner of _diagnoser_native (module.c): read a batch of Kineto trace events straight into
   columns.

   The PyTorch trace reader (diagnoser/ingest/torch_trace.py) cuts the traceEvents array into batches
   of whole events, "[{...}, {...}]". msgspec decodes each batch into small Python objects that are then
   read back field by field into numpy columns; most of the reader's time goes to making those objects
   and to the cache misses of reading them again. This scanner parses the same batch once and writes the
   fields the timeline tables read into flat arrays, with no Python object per event.

   It only reads what it is sure of: strict JSON (RFC 8259, valid UTF-8), each field the tables read in
   its plain shape (integers for ids, numbers for times, lists of integers for grid and block). Anything
   else (a malformed byte, a number written as text, a float id, an escaped key, deep nesting, a duplicate
   key) makes `scan` return None and the reader decodes that batch with msgspec, as it always did: what
   the tables hold, and every error message, never depend on which path read a batch. What a value means
   (a device taken from the pid when args lack one, defaults, which events are kept) stays in Python
   (torch_tables.py); this file only parses. tests/test_kineto_scan.py checks both paths give the same
   tables on every fixture and on hostile batches.

   Scanner(cat_buckets): cat_buckets maps each category's bytes to its bucket (kineto_events.BUCKET_OF_CAT).
   Scanner.scan(batch) -> None, or a tuple:
     (elements, new_names, new_args, has_dims, kind, name, ts, dur, ints, args)
     elements   number of array elements in the batch (every event, kept or not)
     new_names  the raw JSON text (bytes, escapes not undone) of each name first met in this batch, in the
                order of their codes (a name's code is its index in all new_names lists so far)
     new_args   likewise each op's recorded arguments first met: its name's code (int32, native order) then
                the raw JSON of args' Input Dims, Input type, Concrete Inputs, Input Strides joined by NUL
                (an absent one empty)
     has_dims   some cpu_op-bucket event carries args["Input Dims"] other than null
     kind       int8 per kept event: its bucket, or MEMORY for a "[memory]" instant with args
     name       int32 per kept event: its name's code
     ts, dur    float64 per kept event (ts NaN when absent, dur 0.0 when absent)
     ints       int64 per kept event x N_INTS (the INT_* slots below), NONE where absent or null
     args       int32 per op-bucket event: the code of its recorded arguments, -1 where it has no Input Dims
                or they are null
*/
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "native.h"

#define NONE INT64_MIN /* absent or null; a real INT64_MIN reads as odd */
#define MAX_DEPTH 64   /* deeper nesting: left to msgspec */
#define MAX_CATS 64

enum { B_KERNEL, B_MEMCPY, B_MEMSET, B_RUNTIME, B_ANNOTATION, B_OP, B_PYTHON, B_MEMORY, N_BUCKETS_KNOWN = 7 };

/* the int64 slots of a kept event */
enum { INT_PID, INT_TID, INT_CORRELATION, INT_DEVICE, INT_STREAM, INT_BYTES, INT_GRID, INT_BLOCK,
       INT_MEM_BYTES, INT_TOTAL_ALLOCATED, INT_TOTAL_RESERVED, INT_DEVICE_ID, INT_DEVICE_TYPE, N_INTS };
/* the raw spans of an op's arguments */
enum { RAW_DIMS, RAW_TYPES, RAW_CONCRETE, RAW_STRIDES, N_RAWS };

typedef const unsigned char *ptr;

/* ---------- growable byte buffers (one per output column) ---------- */

typedef struct { char *data; Py_ssize_t len, cap; } Buf;

static inline int buf_grow(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1 << 14;
    while (cap < b->len + extra) cap *= 2;
    char *d = PyMem_Realloc(b->data, cap);
    if (!d) { PyErr_NoMemory(); return -1; }
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_grow(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* ---------- the names table: raw name bytes -> code, kept across batches ---------- */

typedef struct { uint64_t hash; Py_ssize_t off, len; } Entry;

/* an interning table: distinct byte strings -> codes 0, 1, ... in the order first met */
typedef struct {
    int32_t *slots;     /* index into entries, -1 empty; size a power of two */
    Py_ssize_t nslots;
    Entry *entries;     /* by code */
    Py_ssize_t nentries, entries_cap;
    Buf arena;          /* the strings' bytes */
} Intern;

typedef struct {
    PyObject_HEAD
    Intern names;       /* event names, as raw JSON string contents */
    Intern args;        /* an op's name code (4 bytes) + its four raw argument values joined by NUL */
    Buf key;            /* scratch for an args key */
    int ncats;
    Py_ssize_t cat_len[MAX_CATS];
    char cat_text[MAX_CATS][64];
    int cat_bucket[MAX_CATS];
} Scanner;

static uint64_t hash_bytes(ptr s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h;
}

static int intern_rehash(Intern *t, Py_ssize_t nslots) {
    int32_t *slots = PyMem_Malloc(nslots * sizeof(int32_t));
    if (!slots) { PyErr_NoMemory(); return -1; }
    memset(slots, 0xFF, nslots * sizeof(int32_t));
    /* inserted in code order: a probe chain never passes a later code before an earlier one, so the
       newest codes can be removed again (intern_truncate) without breaking the chains of older ones */
    for (Py_ssize_t c = 0; c < t->nentries; c++) {
        Py_ssize_t i = (Py_ssize_t)(t->entries[c].hash & (uint64_t)(nslots - 1));
        while (slots[i] >= 0) i = (i + 1) & (nslots - 1);
        slots[i] = (int32_t)c;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
}

static void intern_free(Intern *t) {
    PyMem_Free(t->slots);
    PyMem_Free(t->entries);
    PyMem_Free(t->arena.data);
    memset(t, 0, sizeof *t);
}

/* the code of s[0:n], added when new; -1 on error */
static Py_ssize_t intern_code(Intern *t, ptr s, Py_ssize_t n) {
    if (!t->slots && intern_rehash(t, 1 << 12) < 0) return -1;
    uint64_t h = hash_bytes(s, n);
    Py_ssize_t mask = t->nslots - 1;
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)mask);
    for (;;) {
        int32_t c = t->slots[i];
        if (c < 0) break;
        Entry *e = &t->entries[c];
        if (e->hash == h && e->len == n && memcmp(t->arena.data + e->off, s, (size_t)n) == 0) return c;
        i = (i + 1) & mask;
    }
    if (t->nentries >= INT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct names");
        return -1;
    }
    if (t->nentries == t->entries_cap) {
        Py_ssize_t cap = t->entries_cap ? t->entries_cap * 2 : 1024;
        Entry *entries = PyMem_Realloc(t->entries, cap * sizeof(Entry));
        if (!entries) { PyErr_NoMemory(); return -1; }
        t->entries = entries;
        t->entries_cap = cap;
    }
    Py_ssize_t off = t->arena.len;
    if (buf_put(&t->arena, s, n) < 0) return -1;
    Py_ssize_t code = t->nentries++;
    Entry *e = &t->entries[code];
    e->hash = h;
    e->off = off;
    e->len = n;
    t->slots[i] = (int32_t)code;
    if (t->nentries * 2 > t->nslots && intern_rehash(t, t->nslots * 2) < 0) return -1;
    return code;
}

/* forget the codes from `keep` on (a batch left to msgspec must not leave codes behind) */
static void intern_truncate(Intern *t, Py_ssize_t keep) {
    Py_ssize_t mask = t->nslots - 1;
    for (Py_ssize_t c = t->nentries - 1; c >= keep; c--) {
        Py_ssize_t i = (Py_ssize_t)(t->entries[c].hash & (uint64_t)mask);
        while (t->slots[i] != (int32_t)c) i = (i + 1) & mask;
        t->slots[i] = -1;
    }
    if (keep < t->nentries) {
        t->arena.len = t->entries[keep].off;
        t->nentries = keep;
    }
}

/* the codes from `first` on, as a list of bytes */
static PyObject *intern_list(Intern *t, Py_ssize_t first) {
    PyObject *list = PyList_New(t->nentries - first);
    if (!list) return NULL;
    for (Py_ssize_t c = first; c < t->nentries; c++) {
        PyObject *b = PyBytes_FromStringAndSize(t->arena.data + t->entries[c].off, t->entries[c].len);
        if (!b) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, c - first, b);
    }
    return list;
}

/* ---------- strict JSON scanning ---------- */

/* 1 for the bytes a string's plain run stops at: '"', '\\', control bytes and non-ASCII */
static unsigned char STOP[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) STOP[c] = (c < 0x20 || c == '"' || c == '\\' || c >= 0x80);
}

/* the high bit of each of eight bytes that is '"', '\\', below 0x20 or 0x80 and above, and maybe of some bytes
   after the first such one (a borrow); the lowest bit set is always exact */
static inline uint64_t stop_mask(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    return (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | ((w - ones * 0x20) & ~w) | w) & high;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
#define FAST_RUNS 1  /* the first differing byte of a word found by counting trailing zero bits */
#else
#define FAST_RUNS 0
#endif

static inline ptr skip_ws(ptr p, ptr end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* length of the valid UTF-8 sequence at p (p[0] >= 0x80), or -1 (Python's strict decoder's rules) */
static inline int utf8_seq(ptr p, ptr end) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return -1;
    if (end - p < n) return -1;
    if (p[1] < lo || p[1] > hi) return -1;
    for (int k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xBF) return -1;
    return n;
}

/* *pp at the opening quote; on success *pp is past the closing quote, the contents are [*s, *s + *n)
   and *escaped says whether they hold a backslash escape. Escapes of UTF-16 surrogates are refused. */
static int scan_string(ptr *pp, ptr end, ptr *s, Py_ssize_t *n, int *escaped) {
    ptr p = *pp + 1, start = p;
    int esc = 0;
    for (;;) {
        while (end - p >= 8) {  /* eight bytes at a time while none of them stops the run */
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t m = stop_mask(w);
            if (m) {
#if FAST_RUNS
                p += __builtin_ctzll(m) >> 3;  /* the first byte that stops it (the lowest bit is exact) */
#endif
                break;
            }
            p += 8;
        }
        while (p < end && !STOP[*p]) p++;
        if (p >= end) return -1;
        unsigned char c = *p;
        if (c == '"') break;
        if (c == '\\') {
            if (p + 1 >= end) return -1;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) return -1;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[k]);
                    if (h < 0) return -1;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return -1;
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else {
                return -1;
            }
            esc = 1;
            continue;
        }
        if (c < 0x20) return -1;
        int k = utf8_seq(p, end);
        if (k < 0) return -1;
        p += k;
    }
    *s = start;
    *n = p - start;
    *escaped = esc;
    *pp = p + 1;
    return 0;
}

enum { NUM_INT, NUM_FLOAT, NUM_ODD };

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a JSON number at *pp. NUM_INT: an integer literal in int64 (not INT64_MIN), in *iv and *dv;
   NUM_FLOAT: a number with a fraction or exponent, in *dv, finite; NUM_ODD: an integer beyond int64;
   -1: not a JSON number, or a float beyond double's range or too long to convert here (msgspec decides). */
static int scan_number(ptr *pp, ptr end, int64_t *iv, double *dv) {
    ptr p = *pp, start = p;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return -1;
    uint64_t mant = 0;
    int digits = 0;  /* significant digits read into mant (leading zeros of the integer part do not count) */
    int big = 0;     /* more digits than mant holds exactly */
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) mant = mant * 10 + (uint64_t)(*p - '0');
            else big = 1;
            digits++;
            p++;
        }
    }
    int frac_digits = 0, is_float = 0;
    if (p < end && *p == '.') {
        is_float = 1;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) { mant = mant * 10 + (uint64_t)(*p - '0'); frac_digits++; if (mant) digits++; }
            else big = 1;
            p++;
        }
    }
    int exp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_float = 1;
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (exp < 100000) exp = exp * 10 + (*p - '0');
            p++;
        }
        if (eneg) exp = -exp;
    }
    *pp = p;
    if (!is_float) {
        if (big || digits > 19) return NUM_ODD;
        if (neg) {
            if (mant > (uint64_t)INT64_MAX) return NUM_ODD;  /* INT64_MIN itself is the NONE mark */
            *iv = -(int64_t)mant;
        } else {
            if (mant > (uint64_t)INT64_MAX) return NUM_ODD;
            *iv = (int64_t)mant;
        }
        *dv = (double)*iv;
        return NUM_INT;
    }
    /* exact fast path: mantissa and power of ten both exact doubles, one correctly rounded operation */
    int e10 = exp - frac_digits;
    if (!big && mant < (1ull << 53) && e10 >= -22 && e10 <= 22) {
        double v = (double)mant;
        v = e10 < 0 ? v / POW10[-e10] : v * POW10[e10];
        *dv = neg ? -v : v;
        return NUM_FLOAT;
    }
    /* otherwise Python's own correctly rounded, locale-independent conversion */
    Py_ssize_t len = p - start;
    char tmp[128];
    if (len >= (Py_ssize_t)sizeof tmp) return -1;
    memcpy(tmp, start, (size_t)len);
    tmp[len] = 0;
    char *stop = NULL;
    double v = PyOS_string_to_double(tmp, &stop, NULL);
    if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    if (stop != tmp + len || !isfinite(v)) return -1;  /* msgspec: "Number out of range" where it decodes it */
    *dv = v;
    return NUM_FLOAT;
}

/* skip_value's strict: the value is decoded by msgspec (an `Any` field): every number in it must be a plain int64
   or a finite double, else the batch goes to msgspec (which may refuse it: "Number out of range") */

/* past a JSON number, its value not read; -1 when it is not one */
static int skip_number(ptr *pp, ptr end) {
    ptr p = *pp;
    if (p < end && *p == '-') p++;
    if (p >= end || *p < '0' || *p > '9') return -1;
    if (*p == '0') p++;
    else while (p < end && *p >= '0' && *p <= '9') p++;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *pp = p;
    return 0;
}

static int scan_literal(ptr *pp, ptr end, const char *word, Py_ssize_t n) {
    if (end - *pp < n || memcmp(*pp, word, (size_t)n) != 0) return -1;
    *pp += n;
    return 0;
}

/* the kinds of JSON value, as the first byte tells */
enum { V_OBJECT, V_ARRAY, V_STRING, V_NUMBER, V_TRUE, V_FALSE, V_NULL, V_BAD };

static inline int value_kind(ptr p, ptr end) {
    if (p >= end) return V_BAD;
    switch (*p) {
    case '{': return V_OBJECT;
    case '[': return V_ARRAY;
    case '"': return V_STRING;
    case 't': return V_TRUE;
    case 'f': return V_FALSE;
    case 'n': return V_NULL;
    default: return (*p == '-' || (*p >= '0' && *p <= '9')) ? V_NUMBER : V_BAD;
    }
}

/* past one JSON value (checked, not read); iterative: a stack of the open containers' closing bytes */
static int skip_value(ptr *pp, ptr end, int depth, int strict) {
    unsigned char open[MAX_DEPTH];
    int top = 0;
    ptr p = *pp, s;
    Py_ssize_t n;
    int esc;
    int64_t iv;
    double dv;
    for (;;) {
        /* at a value */
        if (p >= end) return -1;
        switch (value_kind(p, end)) {
        case V_OBJECT:
        case V_ARRAY: {
            unsigned char close = *p == '{' ? '}' : ']';
            if (depth + top >= MAX_DEPTH) return -1;
            p = skip_ws(p + 1, end);
            if (p < end && *p == close) { p++; break; }
            open[top++] = close;
            if (close == '}') goto key;
            continue;
        }
        case V_STRING:
            if (scan_string(&p, end, &s, &n, &esc) < 0) return -1;
            break;
        case V_NUMBER:
            if (!strict) {
                if (skip_number(&p, end) < 0) return -1;
            } else {
                int t = scan_number(&p, end, &iv, &dv);
                if (t != NUM_INT && t != NUM_FLOAT) return -1;
            }
            break;
        case V_TRUE: if (scan_literal(&p, end, "true", 4) < 0) return -1; break;
        case V_FALSE: if (scan_literal(&p, end, "false", 5) < 0) return -1; break;
        case V_NULL: if (scan_literal(&p, end, "null", 4) < 0) return -1; break;
        default: return -1;
        }
        /* after a value: the end, the next element, or the close of its container (and of those it ends) */
        for (;;) {
            if (top == 0) { *pp = p; return 0; }
            p = skip_ws(p, end);
            if (p >= end) return -1;
            if (*p == open[top - 1]) { p++; top--; continue; }
            if (*p != ',') return -1;
            p = skip_ws(p + 1, end);
            break;
        }
        if (open[top - 1] == ']') continue;
    key:
        if (p >= end || *p != '"' || scan_string(&p, end, &s, &n, &esc) < 0) return -1;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return -1;
        p = skip_ws(p + 1, end);
    }
}

/* ---------- one event ---------- */

typedef struct {
    int64_t ints[N_INTS];
    signed char odd[N_INTS];    /* 1 where the value was of another shape */
    Py_ssize_t raw_off[N_RAWS], raw_len[N_RAWS];
    double ts, dur;
    ptr cat, name;
    Py_ssize_t cat_len, name_len;
    int has_cat, has_name, name_escaped, args_object;  /* a null cat reads as none */
} Event;

/* an integer field of args (any JSON value is allowed there): int, NONE for null, odd otherwise */
static int read_any_int(ptr *pp, ptr end, int64_t *out, signed char *odd, int depth) {
    int k = value_kind(*pp, end);
    if (k == V_NUMBER) {
        int64_t iv;
        double dv;
        int t = scan_number(pp, end, &iv, &dv);
        if (t < 0) return -1;
        if (t == NUM_INT) { *out = iv; *odd = 0; }
        else *odd = 1;
        return 0;
    }
    if (k == V_NULL) { *out = NONE; *odd = 0; return scan_literal(pp, end, "null", 4); }
    *odd = 1;
    return skip_value(pp, end, depth, 1);
}

/* grid / block: the product of a list of non-negative integers (0 for an empty list, a negative entry or a
   product of 2**62 or more), NONE for null; odd for any other value or entry */
static int read_dims(ptr *pp, ptr end, int64_t *out, signed char *odd, int depth) {
    int k = value_kind(*pp, end);
    if (k == V_NULL) { *out = NONE; *odd = 0; return scan_literal(pp, end, "null", 4); }
    if (k != V_ARRAY) { *odd = 1; return skip_value(pp, end, depth, 1); }
    ptr p = skip_ws(*pp + 1, end);
    *odd = 0;
    if (p < end && *p == ']') { *pp = p + 1; *out = 0; return 0; }
    int negative = 0, zero = 0, over = 0;
    uint64_t prod = 1;
    for (;;) {
        if (value_kind(p, end) == V_NUMBER) {
            int64_t iv;
            double dv;
            int t = scan_number(&p, end, &iv, &dv);
            if (t < 0) return -1;
            if (t != NUM_INT) *odd = 1;
            else if (iv < 0) negative = 1;
            else if (iv == 0) zero = 1;
            else if (!over) {
                if ((uint64_t)iv >= (1ull << 62) || prod > ((1ull << 62) - 1) / (uint64_t)iv) over = 1;
                else prod *= (uint64_t)iv;
            }
        } else {
            *odd = 1;
            if (skip_value(&p, end, depth + 1, 1) < 0) return -1;
        }
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p == ']') break;
        return -1;
    }
    *pp = p + 1;
    *out = (negative || zero || over || prod >= (1ull << 62)) ? 0 : (int64_t)prod;
    return 0;
}

#define key_is(s, n, word) ((n) == (Py_ssize_t)sizeof(word) - 1 && memcmp((s), (word), sizeof(word) - 1) == 0)

/* walking an object whose members are read: *pp at its '{'; 1 when a member follows (*pp at its key), 0 when
   it is empty (*pp past it) */
static inline int object_open(ptr *pp, ptr end) {
    ptr p = skip_ws(*pp + 1, end);
    if (p < end && *p == '}') { *pp = p + 1; return 0; }
    *pp = p;
    return 1;
}

/* a member's key (an escaped key is left to msgspec: -1); *pp past the ':' after it */
static inline int object_key(ptr *pp, ptr end, ptr *s, Py_ssize_t *n) {
    ptr p = *pp;
    int esc;
    if (p >= end || *p != '"' || scan_string(&p, end, s, n, &esc) < 0 || esc) return -1;
    p = skip_ws(p, end);
    if (p >= end || *p != ':') return -1;
    *pp = skip_ws(p + 1, end);
    return 0;
}

/* after a member's value: 1 when another follows (*pp at its key), 0 at the object's end (*pp past it), -1 */
static inline int object_next(ptr *pp, ptr end) {
    ptr p = skip_ws(*pp, end);
    if (p >= end) return -1;
    if (*p == ',') { *pp = skip_ws(p + 1, end); return 1; }
    if (*p == '}') { *pp = p + 1; return 0; }
    return -1;
}

/* the args object; *pp at its '{' */
static int read_args(ptr *pp, ptr end, ptr base, Event *ev) {
    ptr p = *pp;
    unsigned seen = 0;
    for (int more = object_open(&p, end); more; more = object_next(&p, end)) {
        ptr s;
        Py_ssize_t n;
        if (more < 0 || object_key(&p, end, &s, &n) < 0) return -1;
        int slot = -1, raw = -1, dims = 0;
        if (key_is(s, n, "correlation")) slot = INT_CORRELATION;
        else if (key_is(s, n, "device")) slot = INT_DEVICE;
        else if (key_is(s, n, "stream")) slot = INT_STREAM;
        else if (key_is(s, n, "bytes")) slot = INT_BYTES;
        else if (key_is(s, n, "grid")) { slot = INT_GRID; dims = 1; }
        else if (key_is(s, n, "block")) { slot = INT_BLOCK; dims = 1; }
        else if (key_is(s, n, "Bytes")) slot = INT_MEM_BYTES;
        else if (key_is(s, n, "Total Allocated")) slot = INT_TOTAL_ALLOCATED;
        else if (key_is(s, n, "Total Reserved")) slot = INT_TOTAL_RESERVED;
        else if (key_is(s, n, "Device Id")) slot = INT_DEVICE_ID;
        else if (key_is(s, n, "Device Type")) slot = INT_DEVICE_TYPE;
        else if (key_is(s, n, "Input Dims")) raw = RAW_DIMS;
        else if (key_is(s, n, "Input type")) raw = RAW_TYPES;
        else if (key_is(s, n, "Concrete Inputs")) raw = RAW_CONCRETE;
        else if (key_is(s, n, "Input Strides")) raw = RAW_STRIDES;
        if (slot >= 0) {
            if (seen & (1u << slot)) return -1;  /* a duplicate key: left to msgspec */
            seen |= 1u << slot;
            if ((dims ? read_dims : read_any_int)(&p, end, &ev->ints[slot], &ev->odd[slot], 2) < 0) return -1;
        } else if (raw >= 0) {
            if (seen & (1u << (N_INTS + raw))) return -1;
            seen |= 1u << (N_INTS + raw);
            ptr v = p;
            if (skip_value(&p, end, 2, 0) < 0) return -1;
            ev->raw_off[raw] = v - base;
            ev->raw_len[raw] = p - v;
        } else if (skip_value(&p, end, 2, 0) < 0) {
            return -1;
        }
    }
    *pp = p;
    return 0;
}

/* pid / tid: int | float | str | None in the schema; int or null read, float and text odd, other shapes refused */
static int read_id(ptr *pp, ptr end, int64_t *out, signed char *odd) {
    int k = value_kind(*pp, end);
    if (k == V_NUMBER || k == V_NULL) return read_any_int(pp, end, out, odd, 1);
    if (k == V_STRING) {
        ptr s;
        Py_ssize_t n;
        int esc;
        *odd = 1;
        return scan_string(pp, end, &s, &n, &esc);
    }
    return -1;
}

enum { K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS };

/* one element of traceEvents; *pp at its '{' */
static int read_event(ptr *pp, ptr end, ptr base, Event *ev) {
    for (int i = 0; i < N_INTS; i++) { ev->ints[i] = NONE; ev->odd[i] = 0; }
    for (int i = 0; i < N_RAWS; i++) { ev->raw_off[i] = 0; ev->raw_len[i] = 0; }
    ev->ts = NAN;
    ev->dur = 0.0;
    ev->has_cat = ev->has_name = ev->name_escaped = ev->args_object = 0;
    ev->cat_len = ev->name_len = 0;
    ptr p = *pp;
    unsigned seen = 0;
    for (int more = object_open(&p, end); more; more = object_next(&p, end)) {
        ptr s;
        Py_ssize_t n;
        int esc;
        if (more < 0 || object_key(&p, end, &s, &n) < 0) return -1;
        int key = -1;
        if (n == 2 && s[0] == 't' && s[1] == 's') key = K_TS;
        else if (n == 3) {
            if (key_is(s, n, "cat")) key = K_CAT;
            else if (key_is(s, n, "pid")) key = K_PID;
            else if (key_is(s, n, "tid")) key = K_TID;
            else if (key_is(s, n, "dur")) key = K_DUR;
        } else if (n == 4) {
            if (key_is(s, n, "name")) key = K_NAME;
            else if (key_is(s, n, "args")) key = K_ARGS;
        }
        if (key >= 0) {
            if (seen & (1u << key)) return -1;
            seen |= 1u << key;
        }
        int k = value_kind(p, end);
        switch (key) {
        case K_CAT:
            if (k == V_NULL) { if (scan_literal(&p, end, "null", 4) < 0) return -1; }
            else if (k != V_STRING || scan_string(&p, end, &ev->cat, &ev->cat_len, &esc) < 0 || esc) return -1;
            else ev->has_cat = 1;
            break;
        case K_NAME:
            if (k != V_STRING || scan_string(&p, end, &ev->name, &ev->name_len, &ev->name_escaped) < 0) return -1;
            ev->has_name = 1;
            break;
        case K_PID:
            if (read_id(&p, end, &ev->ints[INT_PID], &ev->odd[INT_PID]) < 0) return -1;
            break;
        case K_TID:
            if (read_id(&p, end, &ev->ints[INT_TID], &ev->odd[INT_TID]) < 0) return -1;
            break;
        case K_TS:
        case K_DUR: {
            int64_t iv;
            double dv;
            if (k != V_NUMBER) return -1;  /* msgspec refuses a time that is not a number */
            int t = scan_number(&p, end, &iv, &dv);
            if (t != NUM_INT && t != NUM_FLOAT) return -1;
            if (key == K_TS) ev->ts = dv;
            else ev->dur = dv;
            break;
        }
        case K_ARGS:
            if (k == V_NULL) { if (scan_literal(&p, end, "null", 4) < 0) return -1; }
            else if (k != V_OBJECT || read_args(&p, end, base, ev) < 0) return -1;
            else ev->args_object = 1;
            break;
        default:
            if (skip_value(&p, end, 1, 0) < 0) return -1;
        }
    }
    *pp = p;
    return 0;
}

/* ---------- the batch ---------- */

typedef struct { Buf kind, name, ts, dur, ints, args; } Columns;

static void columns_free(Columns *c) {
    PyMem_Free(c->kind.data);
    PyMem_Free(c->name.data);
    PyMem_Free(c->ts.data);
    PyMem_Free(c->dur.data);
    PyMem_Free(c->ints.data);
    PyMem_Free(c->args.data);
}

/* the bucket of an event's category, -1 for none */
static int bucket_of(Scanner *self, const Event *ev) {
    if (!ev->has_cat) return -1;
    for (int i = 0; i < self->ncats; i++)
        if (self->cat_len[i] == ev->cat_len && memcmp(self->cat_text[i], ev->cat, (size_t)ev->cat_len) == 0)
            return self->cat_bucket[i];
    return -1;
}

/* an op's recorded arguments: the code of (its name's code, the four raw values joined by NUL), -1 where
   it has no Input Dims or they are null; *has_dims set when it has them */
static Py_ssize_t op_args_code(Scanner *self, const Event *ev, int32_t name, ptr base, int *has_dims) {
    Py_ssize_t n = ev->raw_len[RAW_DIMS];
    if (n == 0 || (n == 4 && memcmp(base + ev->raw_off[RAW_DIMS], "null", 4) == 0)) return -1;
    *has_dims = 1;
    Buf *key = &self->key;
    key->len = 0;
    if (buf_put(key, &name, 4) < 0) return -2;
    for (int i = 0; i < N_RAWS; i++) {
        if (i && buf_put(key, "", 1) < 0) return -2;
        if (buf_put(key, base + ev->raw_off[i], ev->raw_len[i]) < 0) return -2;
    }
    Py_ssize_t code = intern_code(&self->args, (ptr)key->data, key->len);
    return code < 0 ? -2 : code;
}

/* 1: kept and written; 0: not kept; -1: a field the tables read has another shape (the batch goes to
   msgspec); -2: error */
static int keep_event(Scanner *self, const Event *ev, ptr base, Columns *out, int *has_dims) {
    int bucket = bucket_of(self, ev);
    const signed char *odd = ev->odd;
    if (bucket < 0) {
        if (!ev->args_object || !ev->has_name) return 0;
        if (ev->name_escaped) return -1;  /* might spell "[memory]" */
        if (!(ev->name_len == 8 && memcmp(ev->name, "[memory]", 8) == 0)) return 0;
        for (int i = INT_MEM_BYTES; i <= INT_DEVICE_TYPE; i++)
            if (odd[i]) return -1;
        bucket = B_MEMORY;
    } else if (bucket <= B_MEMSET) {
        if (odd[INT_CORRELATION] || odd[INT_DEVICE] || odd[INT_STREAM]) return -1;
        if ((ev->ints[INT_DEVICE] == NONE && odd[INT_PID]) || (ev->ints[INT_STREAM] == NONE && odd[INT_TID])) return -1;
        if (bucket == B_KERNEL ? (odd[INT_GRID] || odd[INT_BLOCK]) : odd[INT_BYTES]) return -1;
    } else {
        if (odd[INT_TID]) return -1;
        if (bucket == B_RUNTIME && odd[INT_CORRELATION]) return -1;
    }
    Py_ssize_t code = ev->has_name ? intern_code(&self->names, ev->name, ev->name_len) : intern_code(&self->names, (ptr)"", 0);
    if (code < 0) return -2;
    int8_t k = (int8_t)bucket;
    int32_t c = (int32_t)code;
    if (buf_put(&out->kind, &k, 1) < 0 || buf_put(&out->name, &c, 4) < 0 || buf_put(&out->ts, &ev->ts, 8) < 0
        || buf_put(&out->dur, &ev->dur, 8) < 0 || buf_put(&out->ints, ev->ints, sizeof ev->ints) < 0)
        return -2;
    if (bucket == B_OP) {
        Py_ssize_t a = op_args_code(self, ev, c, base, has_dims);
        if (a == -2) return -2;
        int32_t a32 = (int32_t)a;
        if (buf_put(&out->args, &a32, 4) < 0) return -2;
    }
    return 1;
}

/* 1 read, 0 left to msgspec, -1 error */
static int scan_batch(Scanner *self, ptr base, ptr end, Columns *out, Py_ssize_t *elements, int *has_dims) {
    ptr p = skip_ws(base, end);
    if (p >= end || *p != '[') return 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p >= end || *p != '{') return 0;
            Event ev;
            if (read_event(&p, end, base, &ev) < 0) return PyErr_Occurred() ? -1 : 0;
            ++*elements;
            int r = keep_event(self, &ev, base, out, has_dims);
            if (r == -2) return -1;
            if (r == -1) return 0;
            p = skip_ws(p, end);
            if (p >= end) return 0;
            if (*p == ',') { p = skip_ws(p + 1, end); continue; }
            if (*p == ']') { p++; break; }
            return 0;
        }
    }
    return skip_ws(p, end) == end;
}

static PyObject *bytes_of(Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len); }

static PyObject *Scanner_scan(Scanner *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    ptr base = (ptr)view.buf;
    Columns out;
    memset(&out, 0, sizeof out);
    Py_ssize_t names_before = self->names.nentries, args_before = self->args.nentries, elements = 0;
    int has_dims = 0;
    int r = scan_batch(self, base, base + view.len, &out, &elements, &has_dims);
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (r == 1) {
        PyObject *names = intern_list(&self->names, names_before);
        PyObject *args = names ? intern_list(&self->args, args_before) : NULL;
        if (args)
            result = Py_BuildValue("(nNNONNNNNN)", elements, names, args, has_dims ? Py_True : Py_False,
                                   bytes_of(&out.kind), bytes_of(&out.name), bytes_of(&out.ts), bytes_of(&out.dur),
                                   bytes_of(&out.ints), bytes_of(&out.args));
        else
            Py_XDECREF(names);
    }
    if (!result) {  /* a batch left to msgspec leaves no codes behind */
        intern_truncate(&self->names, names_before);
        intern_truncate(&self->args, args_before);
    }
    columns_free(&out);
    if (r == 0) Py_RETURN_NONE;
    return result;
}

static PyObject *Scanner_name_count(Scanner *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(self->names.nentries);
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kwds) {
    PyObject *cats;
    static char *kwlist[] = {"cat_buckets", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyDict_Type, &cats)) return -1;
    if (PyDict_GET_SIZE(cats) > MAX_CATS) {
        PyErr_SetString(PyExc_ValueError, "too many categories");
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    self->ncats = 0;
    while (PyDict_Next(cats, &pos, &key, &value)) {
        char *text;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(key, &text, &n) < 0) return -1;
        long bucket = PyLong_AsLong(value);
        if (bucket == -1 && PyErr_Occurred()) return -1;
        if (n >= 64 || bucket < 0 || bucket >= N_BUCKETS_KNOWN) {
            PyErr_SetString(PyExc_ValueError, "a category longer than 63 bytes or a bucket out of range");
            return -1;
        }
        memcpy(self->cat_text[self->ncats], text, (size_t)n);
        self->cat_len[self->ncats] = n;
        self->cat_bucket[self->ncats] = (int)bucket;
        self->ncats++;
    }
    return 0;
}

static void Scanner_dealloc(Scanner *self) {
    intern_free(&self->names);
    intern_free(&self->args);
    PyMem_Free(self->key.data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(batch) -> None, or (elements, new_names, new_args, has_dims, kind, name, ts, dur, ints, args)"},
    {"name_count", (PyCFunction)Scanner_name_count, METH_NOARGS, "the number of distinct names coded so far"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_diagnoser_native.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(cat_buckets): Kineto event batches -> columns (see the module's source for the layout)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

/* registers Scanner and the layout constants on the module (module.c) */
int kineto_scan_register(PyObject *m) {
    init_tables();
    if (PyType_Ready(&ScannerType) < 0) return -1;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        return -1;
    }
    if (PyModule_AddIntConstant(m, "N_INTS", N_INTS) < 0 || PyModule_AddIntConstant(m, "MEMORY", B_MEMORY) < 0)
        return -1;
    return 0;
}
