/* np.searchsorted's answer for sorted queries (diagnoser/timeline/intervals.py, `searchsorted`): each query is
   found by galloping from the previous query's answer, so a run of sorted queries over a sorted array reads it
   forwards, a few neighbouring items a query, where a binary search over what is left of the array touches
   ~20 far-apart items per query (cache misses that grow with the array: the analyses' interval queries were
   their steepest stage per doubling). Both arrays int64, the values sorted (np.searchsorted's own condition),
   the queries non-decreasing (the caller checks); the same positions as np.searchsorted, which stays the path
   for any other input and where the extension is not built. */
#include "native.h"

#include <stdint.h>

static int int64_buffer(PyObject *obj, Py_buffer *b, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (b->itemsize != 8 || b->len % 8) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_TypeError, "%s: expected int64 items", what);
        return -1;
    }
    return 0;
}

/* sorted_search(values, queries, out, right): out[i] = np.searchsorted(values, queries[i], "right" if right else
   "left"); queries non-decreasing. */
static PyObject *sorted_search(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *vo, *qo, *oo;
    int right;
    if (!PyArg_ParseTuple(args, "OOOp", &vo, &qo, &oo, &right)) return NULL;
    Py_buffer vb, qb, ob;
    if (int64_buffer(vo, &vb, 0, "values") < 0) return NULL;
    if (int64_buffer(qo, &qb, 0, "queries") < 0) {
        PyBuffer_Release(&vb);
        return NULL;
    }
    if (int64_buffer(oo, &ob, 1, "out") < 0) {
        PyBuffer_Release(&vb);
        PyBuffer_Release(&qb);
        return NULL;
    }
    PyObject *result = NULL;
    if (ob.len != qb.len) {
        PyErr_SetString(PyExc_ValueError, "out: expected as many items as queries");
        goto done;
    }
    const int64_t *v = vb.buf, *q = qb.buf;
    int64_t *out = ob.buf;
    const Py_ssize_t n = vb.len / 8, m = qb.len / 8;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t j = 0;  /* the previous query's answer: no later answer is smaller */
    for (Py_ssize_t i = 0; i < m; i++) {
        const int64_t x = q[i];
#define BEFORE(k) (right ? v[k] <= x : v[k] < x)  /* item k lies before x's position */
        if (j < n && BEFORE(j)) {
            Py_ssize_t lo = j, hi, step = 1;  /* lo: before x; the answer is in (lo, hi] */
            for (;;) {
                hi = lo + step;
                if (hi >= n) {
                    hi = n;
                    break;
                }
                if (!BEFORE(hi)) break;
                lo = hi;
                step <<= 1;
            }
            lo++;
            while (lo < hi) {
                const Py_ssize_t mid = lo + (hi - lo) / 2;
                if (BEFORE(mid)) lo = mid + 1;
                else hi = mid;
            }
            j = lo;
        }
#undef BEFORE
        out[i] = j;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&vb);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&ob);
    return result;
}

static PyMethodDef methods[] = {
    {"sorted_search", sorted_search, METH_VARARGS,
     "sorted_search(values, queries, out, right): np.searchsorted(values, queries, side) into out, for int64 "
     "values sorted and int64 queries non-decreasing"},
    {NULL, NULL, 0, NULL},
};

int sorted_search_register(PyObject *m) {
    return PyModule_AddFunctions(m, methods);
}
