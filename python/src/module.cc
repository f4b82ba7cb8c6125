// strata._strata: the C++ client of Strata's parameter servers, for the
// Python package in python/strata.
#include <pybind11/pybind11.h>

#include "python/src/bindings.h"
#include "python/src/convert.h"

PYBIND11_MODULE(_strata, m) {
  m.doc() = "Strata's parameter-server client and worker step protocol";
  strata::python::RegisterExceptions(m);
  strata::python::BindClient(m);
  strata::python::BindSession(m);
  strata::python::BindData(m);
}
