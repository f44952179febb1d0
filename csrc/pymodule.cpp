// A minimal Python extension module, so that setuptools' build_ext builds the lane allocator and puts it
// inside the package as fluidsalus/gpu/_lane_allocator*.so. Python code does not call into this module:
// fluidsalus/gpu/allocator.py loads the same file with ctypes.CDLL and calls the extern "C" functions of
// lane_allocator.h (ctypes releases the GIL during those calls).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace {

PyModuleDef lane_allocator_module = {
    PyModuleDef_HEAD_INIT,
    "_lane_allocator",                                                          // m_name
    "fluidsalus lane allocator (C ABI, loaded with ctypes by fluidsalus.gpu.allocator).",  // m_doc
    0,                                                                          // m_size
    nullptr,                                                                    // m_methods
    nullptr,                                                                    // m_slots
    nullptr,                                                                    // m_traverse
    nullptr,                                                                    // m_clear
    nullptr,                                                                    // m_free
};

}  // namespace

PyMODINIT_FUNC PyInit__lane_allocator(void) { return PyModule_Create(&lane_allocator_module); }
