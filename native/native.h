/* _diagnoser_native: the package's optional C code (setup.py builds it; where it cannot, the Python paths run).
   Each part registers what it defines on the module. */
#ifndef DIAGNOSER_NATIVE_H
#define DIAGNOSER_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int kineto_scan_register(PyObject *m);  /* kineto_scan.c: Scanner, the PyTorch trace reader's batch scanner */
int replay_periods_register(PyObject *m);  /* replay_periods.c: replay_periods, the step replay's hot loop */
int sorted_search_register(PyObject *m);  /* sorted_search.c: sorted_search, np.searchsorted for sorted queries */

#endif
