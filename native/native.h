/* _diagnoser_native: the package's optional C code (setup.py builds it; where it cannot, the Python paths run).
   Each part registers what it defines on the module. */
#ifndef DIAGNOSER_NATIVE_H
#define DIAGNOSER_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A C-contiguous buffer of `itemsize`-byte items (writable when asked) and its item count; module.c. On failure:
   -1 with TypeError (or the buffer protocol's own error) set, nothing held. */
typedef struct {
    Py_buffer buf;
    Py_ssize_t n;
} Array;
int array_of(PyObject *obj, Array *a, Py_ssize_t itemsize, int writable, const char *what);

int kineto_scan_register(PyObject *m);  /* kineto_scan.c: Scanner, the PyTorch trace reader's batch scanner */
int replay_periods_register(PyObject *m);  /* replay_periods.c: replay_periods, the step replay's hot loop */
int sorted_search_register(PyObject *m);  /* sorted_search.c: sorted_search, np.searchsorted for sorted queries */

#endif
