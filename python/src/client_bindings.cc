// strata._strata.Client: the parameter-server client for numpy arrays
// (and CPU torch tensors, through their numpy views): register named
// tensors, push gradients and pull weights asynchronously, with no copy on
// the Python side.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "cluster/worker_session.h"
#include "python/src/bindings.h"
#include "python/src/convert.h"

namespace strata::python {
namespace {

// The outcome of one push or pull of a whole tensor (one op per chunk).
// It holds the array until the ops are done; dropping it unfinished waits.
class Handle {
 public:
  Handle(std::vector<OpHandle> ops, py::object array)
      : ops_(std::move(ops)), array_(std::move(array)) {}
  Handle(Handle&&) = default;
  ~Handle() {
    if (array_ && !ops_.empty()) {
      py::gil_scoped_release release;
      (void)WaitAll(ops_);
    }
  }
  // The ops' first error as an exception; the smallest chunk version.
  uint64_t Wait() {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = WaitAll(ops_);
    }
    Check(s);
    uint64_t version = UINT64_MAX;
    for (const OpHandle& op : ops_) version = std::min(version, op.version());
    return version;
  }
  bool Done() const {
    for (const OpHandle& op : ops_) {
      if (!op.done()) return false;
    }
    return true;
  }

 private:
  std::vector<OpHandle> ops_;
  py::object array_;
};

class Client {
 public:
  explicit Client(const ConnectOptions& o) {
    SchedulerClientOptions so;
    PsClientOptions po;
    ClientOptions(o, &so, &po);
    py::gil_scoped_release release;
    scheduler_ = Take(SchedulerClient::Connect(so));
    ps_ = Take(PsClient::Create(po, scheduler_.get()));
  }
  ~Client() {
    py::gil_scoped_release release;
    ps_.reset();
    scheduler_.reset();
  }

  void Register(const py::list& tensors, const py::list& groups,
                uint64_t chunk_bytes) {
    ModelSpec model = ParseModel(tensors, groups, chunk_bytes);
    py::gil_scoped_release release;
    Check(ps_->RegisterModel(model));
  }

  // The index of tensor `key` (a name or an index); KeyError otherwise.
  int Index(const py::object& key) const {
    const std::vector<TensorSpec>& tensors = ps_->plan().tensors;
    if (py::isinstance<py::int_>(key)) {
      const int i = key.cast<int>();
      if (i >= 0 && i < static_cast<int>(tensors.size())) return i;
    } else if (py::isinstance<py::str>(key)) {
      const std::string name = key.cast<std::string>();
      for (size_t i = 0; i < tensors.size(); ++i) {
        if (tensors[i].name == name) return static_cast<int>(i);
      }
    }
    throw StatusError(absl::NotFoundError(absl::StrCat(
        "no tensor ", std::string(py::repr(key)), " is registered")));
  }

  Handle Push(const py::object& key, const py::array& grad, int64_t step,
              uint64_t samples, int priority) {
    const int i = Index(key);
    const TensorSpec& t = ps_->plan().tensors[i];
    const float* data = FloatBuffer(grad, t.numel(), t.name, false);
    std::vector<OpHandle> ops;
    {
      py::gil_scoped_release release;
      ops = ps_->PushTensorAsync(i, data, step, samples, priority);
    }
    return Handle(std::move(ops), grad);
  }

  Handle Pull(const py::object& key, const py::array& dst, int64_t clock,
              uint64_t min_version, int priority) {
    const int i = Index(key);
    const TensorSpec& t = ps_->plan().tensors[i];
    float* data = FloatBuffer(dst, t.numel(), t.name, true);
    std::vector<OpHandle> ops;
    {
      py::gil_scoped_release release;
      ops = ps_->PullTensorAsync(i, data, clock, min_version, priority);
    }
    return Handle(std::move(ops), dst);
  }

  // PsClient::ReduceStep.
  void Reduce(int64_t step) {
    py::gil_scoped_release release;
    Check(ps_->ReduceStep(step));
  }

  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const TensorSpec& t : ps_->plan().tensors) names.push_back(t.name);
    return names;
  }
  int Chunks() const { return static_cast<int>(ps_->plan().chunks.size()); }
  std::string Consistency() const {
    return scheduler_->view().consistency().empty()
               ? "bsp"
               : scheduler_->view().consistency();
  }

 private:
  std::unique_ptr<SchedulerClient> scheduler_;
  std::unique_ptr<PsClient> ps_;
};

}  // namespace

void BindClient(py::module_& m) {
  py::class_<Handle>(m, "Handle",
                     "A push or pull in flight; holds its array until done.")
      .def("wait", &Handle::Wait,
           "Waits; raises the first chunk's error. Returns the smallest "
           "chunk version the servers reported.")
      .def("done", &Handle::Done);
  py::class_<Client>(m, "Client",
                     "The parameter-server client (no step protocol: see "
                     "Session). It joins the cluster as a worker: under BSP "
                     "and SSP a job's steps wait for every live worker, so "
                     "use it on servers of its own or under ASP.")
      .def(py::init([](std::string scheduler, std::string tls_cert,
                       std::string tls_key, std::string tls_ca,
                       std::string push_dtype, std::string pull_dtype,
                       bool shared_memory, double timeout) {
             return std::make_unique<Client>(ConnectOptions{
                 scheduler, tls_cert, tls_key, tls_ca, push_dtype, pull_dtype,
                 shared_memory, timeout});
           }),
           py::arg("scheduler"), py::arg("tls_cert") = "",
           py::arg("tls_key") = "", py::arg("tls_ca") = "",
           py::arg("push_dtype") = "f32", py::arg("pull_dtype") = "f32",
           py::arg("shared_memory") = true, py::arg("timeout") = 60.0)
      .def("register", &Client::Register, py::arg("tensors"), py::arg("groups"),
           py::arg("chunk_bytes") = kDefaultChunkBytes)
      .def("push", &Client::Push, py::arg("tensor"), py::arg("grad"),
           py::arg("step"), py::arg("samples") = 1, py::arg("priority") = 0)
      .def("pull", &Client::Pull, py::arg("tensor"), py::arg("dst"),
           py::arg("clock") = -1, py::arg("min_version") = 0,
           py::arg("priority") = 0)
      .def("reduce", &Client::Reduce, py::arg("step"),
           "Under BSP with LAMB or Adafactor: drives the step's sums over "
           "tensors cut into several chunks, so that its update applies "
           "(a pull of the next version waits for it).")
      .def("index", &Client::Index)
      .def_property_readonly("names", &Client::Names)
      .def_property_readonly("chunks", &Client::Chunks)
      .def_property_readonly("consistency", &Client::Consistency);
}

}  // namespace strata::python
