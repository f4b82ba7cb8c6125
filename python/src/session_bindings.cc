// strata._strata.Session: a worker's step protocol (cluster/step_session.h)
// for Python: begin a step (pull the weights into the caller's arrays,
// lease the samples), push each gradient as it is ready, end the step.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/step_session.h"
#include "common/shm_region.h"
#include "data/dataset.h"
#include "python/src/bindings.h"
#include "python/src/convert.h"

namespace strata::python {
namespace {

// What Session.begin returns: the step and this worker's part of it.
struct Step {
  int64_t step = 0;
  int rank = 0;
  int workers = 1;
  uint64_t epoch = 0;       // the view's
  uint64_t generation = 0;  // the rollback generation
  int64_t samples = 0;
  std::vector<std::pair<int64_t, int64_t>> units;  // (first, count)
};

class Session {
 public:
  Session(const ConnectOptions& connect, const py::list& tensors,
          const py::list& groups, uint64_t chunk_bytes, int min_workers,
          float grad_clip, const std::string& async_lr) {
    if (async_lr != "full" && async_lr != "share") {
      throw py::value_error("async_lr is 'full' or 'share', not '" + async_lr +
                            "'");
    }
    StepSessionOptions o;
    o.async_lr_share = async_lr == "share";
    ClientOptions(connect, &o.scheduler, &o.ps);
    o.model = ParseModel(tensors, groups, chunk_bytes);
    o.min_workers = min_workers;
    o.grad_clip = grad_clip;
    o.join_timeout = o.timeout = absl::Seconds(connect.timeout_s);
    py::gil_scoped_release release;
    session_ = Take(StepSession::Create(std::move(o)));
  }
  ~Session() {
    py::gil_scoped_release release;
    session_.reset();
  }

  void SetJob(int64_t steps, int64_t batch, int64_t samples_per_epoch,
              uint64_t seed) {
    Check(session_->SetJob({steps, batch, samples_per_epoch, seed}));
  }

  std::optional<Step> Begin(const std::vector<py::array>& weights,
                            const std::vector<int>& skip) {
    const std::vector<TensorSpec>& specs = session_->model().tensors;
    if (weights.size() != specs.size()) {
      throw py::value_error("begin takes one array per registered tensor");
    }
    std::vector<float*> buffers;
    for (size_t i = 0; i < specs.size(); ++i) {
      buffers.push_back(
          FloatBuffer(weights[i], specs[i].numel(), specs[i].name, true));
    }
    absl::StatusOr<std::optional<StepWork>> work;
    {
      py::gil_scoped_release release;
      work = session_->Begin(buffers, skip);
    }
    begun_ = true;
    std::optional<StepWork> w = Take(std::move(work));
    if (!w) return std::nullopt;
    Step s{session_->step(),
           w->view.rank,
           w->view.workers,
           w->view.epoch,
           w->view.generation,
           w->samples,
           {}};
    for (const v1::WorkUnit& u : w->units)
      s.units.emplace_back(u.first(), u.count());
    return s;
  }

  void Pull(const std::vector<int>& tensors,
            const std::vector<py::array>& weights) {
    const std::vector<TensorSpec>& specs = session_->model().tensors;
    if (weights.size() != tensors.size()) {
      throw py::value_error("pull takes one array per tensor named");
    }
    std::vector<float*> buffers;
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (tensors[k] < 0 || tensors[k] >= static_cast<int>(specs.size())) {
        throw StatusError(absl::NotFoundError("no such tensor index"));
      }
      const TensorSpec& spec = specs[tensors[k]];
      buffers.push_back(FloatBuffer(weights[k], spec.numel(), spec.name, true));
    }
    absl::Status pulled;
    {
      py::gil_scoped_release release;
      pulled = session_->PullMore(tensors, buffers);
    }
    Check(pulled);
  }

  void Push(int tensor, const py::array& grad, int priority) {
    const std::vector<TensorSpec>& specs = session_->model().tensors;
    if (tensor < 0 || tensor >= static_cast<int>(specs.size())) {
      throw StatusError(absl::NotFoundError("no such tensor index"));
    }
    const float* data =
        FloatBuffer(grad, specs[tensor].numel(), specs[tensor].name, false);
    absl::Status pushed;
    {
      py::gil_scoped_release release;
      pushed = session_->Push(tensor, data, priority);
    }
    Check(pushed);
    keep_.push_back(grad);  // until end()
  }

  void PushZero(int tensor, int priority) {
    absl::Status pushed;
    {
      py::gil_scoped_release release;
      pushed = session_->PushZero(tensor, priority);
    }
    Check(pushed);
  }

  void Abandon() {
    {
      py::gil_scoped_release release;
      session_->Abandon();
    }
    keep_.clear();
  }

  bool End() {
    absl::StatusOr<bool> applied;
    {
      py::gil_scoped_release release;
      applied = session_->End();
    }
    keep_.clear();
    return Take(std::move(applied));
  }

  // A region the servers on this host map, of `floats` floats, as a numpy
  // array that keeps it alive: weights and gradients placed in it are
  // pulled and pushed in place (PsClient::ShareTensors). Once, before the
  // first begin.
  py::array ShareTensors(uint64_t floats) {
    if (shared_ || begun_) {
      throw StatusError(absl::FailedPreconditionError(
          "share_tensors comes once, before the first begin"));
    }
    const uint64_t bytes = (floats * sizeof(float) + 4095) / 4096 * 4096;
    if (floats == 0 || bytes > ShmRegion::kMaxBytes - ShmRegion::kHeaderBytes) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          "a shared region of ", floats, " floats is outside (0, ",
          (ShmRegion::kMaxBytes - ShmRegion::kHeaderBytes) / 4, "]")));
    }
    std::shared_ptr<ShmRegion> region =
        Take(ShmRegion::Create(ShmRegion::kHeaderBytes + bytes));
    session_->ps().ShareTensors(region);
    shared_ = true;
    float* data =
        reinterpret_cast<float*>(region->data() + ShmRegion::kHeaderBytes);
    auto* owner = new std::shared_ptr<ShmRegion>(std::move(region));
    py::capsule keep(owner, [](void* p) {
      delete static_cast<std::shared_ptr<ShmRegion>*>(p);
    });
    return py::array_t<float>({static_cast<py::ssize_t>(floats)}, data, keep);
  }

  void Leave() {
    py::gil_scoped_release release;
    Check(session_->Leave());
  }

  std::string Consistency() const { return session_->consistency().ToString(); }
  int64_t StepIndex() const { return session_->step(); }
  double GradNorm() const { return session_->last_grad_norm(); }
  int JoinRank() const { return session_->join_rank(); }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const TensorSpec& t : session_->model().tensors)
      names.push_back(t.name);
    return names;
  }

 private:
  std::unique_ptr<StepSession> session_;
  std::vector<py::object> keep_;  // the arrays pushes read, until End
  bool shared_ = false;           // ShareTensors was called
  bool begun_ = false;            // Begin was called
};

}  // namespace

void BindSession(py::module_& m) {
  py::class_<Step>(m, "Step", "A step handed out by Session.begin.")
      .def_readonly("step", &Step::step)
      .def_readonly("rank", &Step::rank)
      .def_readonly("workers", &Step::workers)
      .def_readonly("epoch", &Step::epoch)
      .def_readonly("generation", &Step::generation)
      .def_readonly("samples", &Step::samples)
      .def_readonly("units", &Step::units,
                    "(first global sample, count) runs of this worker's "
                    "samples");
  py::class_<Session>(m, "Session",
                      "A worker's step protocol: joins the job and registers "
                      "the model at construction.")
      .def(py::init([](std::string scheduler, py::list tensors, py::list groups,
                       uint64_t chunk_bytes, int min_workers, float grad_clip,
                       std::string tls_cert, std::string tls_key,
                       std::string tls_ca, std::string push_dtype,
                       std::string pull_dtype, bool shared_memory,
                       double timeout, std::string async_lr) {
             return std::make_unique<Session>(
                 ConnectOptions{scheduler, tls_cert, tls_key, tls_ca,
                                push_dtype, pull_dtype, shared_memory, timeout},
                 tensors, groups, chunk_bytes, min_workers, grad_clip,
                 async_lr);
           }),
           py::arg("scheduler"), py::arg("tensors"), py::arg("groups"),
           py::arg("chunk_bytes") = kDefaultChunkBytes,
           py::arg("min_workers") = 1, py::arg("grad_clip") = 0.0f,
           py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("tls_ca") = "", py::arg("push_dtype") = "f32",
           py::arg("pull_dtype") = "f32", py::arg("shared_memory") = true,
           py::arg("timeout") = 60.0, py::arg("async_lr") = "full")
      .def("set_job", &Session::SetJob, py::arg("steps"), py::arg("batch"),
           py::arg("samples_per_epoch"), py::arg("seed") = 0)
      .def("begin", &Session::Begin, py::arg("weights"),
           py::arg("skip") = std::vector<int>(),
           "Pulls the weights into `weights` (one float32 array per tensor; "
           "not those whose indices are in `skip`, unless these are the "
           "final weights) and leases this worker's samples; None once the "
           "job is over.")
      .def("pull", &Session::Pull, py::arg("tensors"), py::arg("weights"),
           "Pulls tensors begin skipped into `weights` (an array each) for "
           "the step under way, as begin's pulls went. An error means the "
           "step must be abandoned, its gradients not pushed.")
      .def("push", &Session::Push, py::arg("tensor"), py::arg("grad"),
           py::arg("priority") = 0)
      .def("push_zero", &Session::PushZero, py::arg("tensor"),
           py::arg("priority") = 0,
           "Pushes tensor `tensor`'s gradient as zero without sending it "
           "(nothing of the step reached it: an idle expert). Under BSP a "
           "step that reached a chunk on no worker leaves its weights and "
           "optimizer state as they were.")
      .def("abandon", &Session::Abandon,
           "Gives up the step under way: waits for its pushes sent; the "
           "next begin hands the same step out (under BSP it does not "
           "close without this worker: leave if it will not be computed).")
      .def("end", &Session::End,
           "Waits for the step's pushes; False when the step is to be "
           "computed again (the next begin hands it out). True: pushed; "
           "a later begin may still hand it out again if the servers did "
           "not close it (a membership change).")
      .def("share_tensors", &Session::ShareTensors, py::arg("floats"),
           "A float32 array in a region the servers on this host map: "
           "weights and gradients placed in it move in place. Once, before "
           "the first begin.")
      .def("leave", &Session::Leave)
      .def_property_readonly("consistency", &Session::Consistency)
      .def_property_readonly("step", &Session::StepIndex)
      .def_property_readonly("grad_norm", &Session::GradNorm)
      .def_property_readonly("join_rank", &Session::JoinRank)
      .def_property_readonly("names", &Session::Names);
  m.def(
      "shuffled_index",
      [](int64_t sample, int64_t n, uint64_t seed) {
        if (n < 1 || sample < 0)
          throw py::value_error("need n >= 1, sample >= 0");
        return ShuffledIndex(sample, n, seed);
      },
      py::arg("sample"), py::arg("n"), py::arg("seed"),
      "The item of a set of n that global sample `sample` is under `seed` "
      "(each epoch its own permutation), as Strata's own data loader reads.");
}

}  // namespace strata::python
