/* np.searchsorted's answer for sorted queries (diagnoser/timeline/intervals.py, `searchsorted`): each query is
   found by galloping from the previous query's answer, so a run of sorted queries over a sorted array reads it
   forwards, a few neighbouring items a query, where a binary search over what is left of the array touches
   ~20 far-apart items per query (cache misses that grow with the array: the analyses' interval queries were
   their steepest stage per doubling). Both arrays int64, the values sorted (np.searchsorted's own condition),
   the queries non-decreasing (the caller checks); the same positions as np.searchsorted, which stays the path
   for any other input and where the extension is not built. */
#include "native.h"

#include <stdint.h>

/* sorted_search(values, queries, out, right): out[i] = np.searchsorted(values, queries[i], "right" if right else
   "left"); queries non-decreasing. */
static PyObject *sorted_search(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *vo, *qo, *oo;
    int right;
    if (!PyArg_ParseTuple(args, "OOOp", &vo, &qo, &oo, &right)) return NULL;
    Array v, q, o;
    if (array_of(vo, &v, 8, 0, "values") < 0) return NULL;
    if (array_of(qo, &q, 8, 0, "queries") < 0) {
        PyBuffer_Release(&v.buf);
        return NULL;
    }
    if (array_of(oo, &o, 8, 1, "out") < 0) {
        PyBuffer_Release(&v.buf);
        PyBuffer_Release(&q.buf);
        return NULL;
    }
    PyObject *result = NULL;
    if (o.n != q.n) {
        PyErr_SetString(PyExc_ValueError, "out: expected as many items as queries");
        goto done;
    }
    const int64_t *values = v.buf.buf, *queries = q.buf.buf;
    int64_t *out = o.buf.buf;
    const Py_ssize_t n = v.n, m = q.n;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t j = 0;  /* the previous query's answer: no later answer is smaller */
    for (Py_ssize_t i = 0; i < m; i++) {
        const int64_t x = queries[i];
#define BEFORE(k) (right ? values[k] <= x : values[k] < x)  /* item k lies before x's position */
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
    PyBuffer_Release(&v.buf);
    PyBuffer_Release(&q.buf);
    PyBuffer_Release(&o.buf);
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
