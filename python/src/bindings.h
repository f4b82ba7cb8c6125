// The parts of the strata._strata module, each defined in its own file.
#ifndef STRATA_PYTHON_SRC_BINDINGS_H_
#define STRATA_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace strata::python {

void BindClient(pybind11::module_& m);   // client_bindings.cc
void BindSession(pybind11::module_& m);  // session_bindings.cc
void BindData(pybind11::module_& m);     // data_bindings.cc

}  // namespace strata::python

#endif  // STRATA_PYTHON_SRC_BINDINGS_H_
