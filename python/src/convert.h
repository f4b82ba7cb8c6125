// What the Python bindings share: absl::Status as Python exceptions, numpy
// buffers checked against a tensor, and a model given as Python dicts.
#ifndef STRATA_PYTHON_SRC_CONVERT_H_
#define STRATA_PYTHON_SRC_CONVERT_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "security/tls.h"

namespace strata::python {

namespace py = pybind11;

// A failed absl::Status on its way to Python (RegisterExceptions maps it:
// INVALID_ARGUMENT to ValueError, NOT_FOUND to KeyError,
// DEADLINE_EXCEEDED to TimeoutError, the rest to strata.StrataError with
// the code's name in `.code`).
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status s)
      : status_(std::move(s)), what_(status_.ToString()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  std::string what_;
};

void RegisterExceptions(py::module_& m);

inline void Check(const absl::Status& s) {
  if (!s.ok()) throw StatusError(s);
}
template <typename T>
T Take(absl::StatusOr<T> v) {
  if (!v.ok()) throw StatusError(v.status());
  return *std::move(v);
}

// The float32 buffer of `array` for tensor `name` of `numel` elements:
// TypeError unless it is a C-contiguous float32 numpy array (writable when
// `writable`), ValueError unless it holds exactly `numel` elements.
float* FloatBuffer(const py::array& array, uint64_t numel,
                   const std::string& name, bool writable);

// The connection options every binding takes from Python keywords.
struct ConnectOptions {
  std::string scheduler;
  std::string tls_cert, tls_key, tls_ca;
  std::string push_dtype = "f32", pull_dtype = "f32";
  bool shared_memory = true;
  double timeout_s = 60;
};
// The scheduler and servers' client options for `o` (TLS loaded and
// checked to be a worker's certificate).
void ClientOptions(const ConnectOptions& o, SchedulerClientOptions* scheduler,
                   PsClientOptions* ps);

// A model from Python: `tensors` a list of dicts {name, shape, group,
// init}, `groups` a list of dicts {name, optimizer, lr, ...} (see
// python/strata/model.py, which builds them).
ModelSpec ParseModel(const py::list& tensors, const py::list& groups,
                     uint64_t chunk_bytes);

}  // namespace strata::python

#endif  // STRATA_PYTHON_SRC_CONVERT_H_
