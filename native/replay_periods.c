/* The step replay's hot loop (diagnoser/timeline/replay.py, `_periods`): each kept call's host time, each kept
   op's start on its stream, REPEATS times over the step, in runs that end at a blocking call.

   The same float operations in the same order as the Python loop it stands for (running sums as accumulate
   makes them, `if not start > ready`, Python's max and min on two values), so every result is the same double
   (a NaN aside: where two NaNs of either sign are added, which one comes out is the compiler's operand order, in
   CPython too); tests/test_replay_equivalence.py checks it against that loop, which stays the reference and the
   path where the extension is not built. */
#include "native.h"

#include <string.h>

#define MAX2(a, b) ((b) > (a) ? (b) : (a))  /* Python's max(a, b) */
#define MIN2(a, b) ((b) < (a) ? (b) : (a))  /* Python's min(a, b) */

/* replay_periods(steps, step_lo, step_hi, op_lo, op_hi, blocking, block_dur, op_stream, op_at, op_dur,
                  n_streams, lag, node, queued, tail, repeats, resume) -> (host period, gpu period)
   steps: float64, each kept call's gap then its host time; per run (int64 step_lo/step_hi: its slice of steps,
   op_lo/op_hi: its slice of the ops; int8 blocking and float64 block_dur: whether it ends at a blocking call and
   that call's time); per op (int64 stream index, int64 index into its run's running sum, float64 duration). */
static PyObject *replay_periods(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *objs[10];
    Py_ssize_t n_streams, repeats;
    double lag, node, tail, resume;
    int queued;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnddpdnd", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6], &objs[7], &objs[8], &objs[9], &n_streams, &lag, &node, &queued, &tail, &repeats,
                          &resume))
        return NULL;
    static const Py_ssize_t sizes[10] = {8, 8, 8, 8, 8, 1, 8, 8, 8, 8};
    static const char *names[10] = {"steps", "step_lo", "step_hi", "op_lo", "op_hi", "blocking", "block_dur",
                                    "op_stream", "op_at", "op_dur"};
    Array a[10];
    int got = 0;
    for (; got < 10; got++)
        if (array_of(objs[got], &a[got], sizes[got], 0, names[got]) < 0) break;
    PyObject *result = NULL;
    double *times = NULL, *streams = NULL;
    if (got < 10) goto done;
    const double *steps = a[0].buf.buf, *block_dur = a[6].buf.buf, *op_dur = a[9].buf.buf;
    const int64_t *step_lo = a[1].buf.buf, *step_hi = a[2].buf.buf, *op_lo = a[3].buf.buf, *op_hi = a[4].buf.buf;
    const int64_t *op_stream = a[7].buf.buf, *op_at = a[8].buf.buf;
    const int8_t *blocking = a[5].buf.buf;
    Py_ssize_t runs = a[1].n, n_steps = a[0].n, n_ops = a[7].n, longest = 0;
    if (a[2].n != runs || a[3].n != runs || a[4].n != runs || a[5].n != runs || a[6].n != runs
        || a[8].n != n_ops || a[9].n != n_ops || n_streams < 0 || repeats < 2) {
        PyErr_SetString(PyExc_ValueError, "replay_periods: arrays of unequal lengths");
        goto done;
    }
    for (Py_ssize_t r = 0; r < runs; r++) {  /* every index checked once, before the loop trusts them */
        if (step_lo[r] < 0 || step_hi[r] < step_lo[r] || step_hi[r] > n_steps || op_lo[r] < 0 || op_hi[r] < op_lo[r]
            || op_hi[r] > n_ops) {
            PyErr_SetString(PyExc_ValueError, "replay_periods: a run out of range");
            goto done;
        }
        Py_ssize_t len = (Py_ssize_t)(step_hi[r] - step_lo[r]);
        if (len > longest) longest = len;
        for (int64_t o = op_lo[r]; o < op_hi[r]; o++)
            if (op_stream[o] < 0 || op_stream[o] >= n_streams || op_at[o] < 0 || op_at[o] > len) {
                PyErr_SetString(PyExc_ValueError, "replay_periods: an op out of range");
                goto done;
            }
    }
    times = PyMem_Malloc((longest + 1) * sizeof(double));
    streams = PyMem_Calloc(n_streams ? n_streams : 1, sizeof(double));
    if (!times || !streams) { PyErr_NoMemory(); goto done; }
    double t = 0.0, gpu_done = 0.0, host_first = 0.0, gpu_first = 0.0;
    for (Py_ssize_t rep = 0; rep < repeats; rep++) {
        for (Py_ssize_t r = 0; r < runs; r++) {
            Py_ssize_t len = (Py_ssize_t)(step_hi[r] - step_lo[r]);
            const double *s = steps + step_lo[r];
            times[0] = t;
            for (Py_ssize_t i = 0; i < len; i++) times[i + 1] = times[i] + s[i];
            for (int64_t o = op_lo[r]; o < op_hi[r]; o++) {
                double ready = queued ? times[op_at[o]] + lag : 0.0;
                double start = streams[op_stream[o]] + node;
                if (!(start > ready)) start = ready;
                double end = start + op_dur[o];
                streams[op_stream[o]] = end;
                if (end > gpu_done) gpu_done = end;
            }
            t = times[len];
            if (blocking[r]) t = MAX2(t + MIN2(block_dur[r], resume), gpu_done + resume);
        }
        t += tail;
        if (rep == 0) { host_first = t; gpu_first = gpu_done; }
    }
    double n = (double)(repeats - 1);
    result = Py_BuildValue("(dd)", (t - host_first) / n, (gpu_done - gpu_first) / n);
done:
    PyMem_Free(times);
    PyMem_Free(streams);
    for (int i = 0; i < got; i++) PyBuffer_Release(&a[i].buf);
    return result;
}

static PyMethodDef methods[] = {
    {"replay_periods", replay_periods, METH_VARARGS,
     "replay_periods(steps, step_lo, step_hi, op_lo, op_hi, blocking, block_dur, op_stream, op_at, op_dur, "
     "n_streams, lag, node, queued, tail, repeats, resume) -> (host period, gpu period), ns"},
    {NULL, NULL, 0, NULL},
};

int replay_periods_register(PyObject *m) {
    return PyModule_AddFunctions(m, methods);
}
