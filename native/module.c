/* _diagnoser_native: the module; each part (native.h) adds its own types and functions. */
#include "native.h"

int array_of(PyObject *obj, Array *a, Py_ssize_t itemsize, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, &a->buf, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (a->buf.itemsize != itemsize || a->buf.len % itemsize) {
        PyBuffer_Release(&a->buf);
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes", what, itemsize);
        return -1;
    }
    a->n = a->buf.len / itemsize;
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_diagnoser_native",
    .m_doc = "diagnoser's optional C code: the Kineto trace reader's batch scanner, the step replay's hot loop, "
             "searches of sorted queries.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__diagnoser_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    /* the layout of what the parts take and give (diagnoser/native.py expects the same number) */
    if (PyModule_AddIntConstant(m, "LAYOUT_VERSION", 3) < 0 || kineto_scan_register(m) < 0
        || replay_periods_register(m) < 0 || sorted_search_register(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
