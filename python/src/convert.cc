#include "python/src/convert.h"

#include <pybind11/stl.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "security/role_check.h"

namespace strata::python {
namespace {

template <typename T>
T Get(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : fallback;
}

v1::DType ParseDType(const std::string& name) {
  if (name == "f32" || name == "float32") return v1::DTYPE_F32;
  if (name == "bf16" || name == "bfloat16") return v1::DTYPE_BF16;
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat("dtype '", name, "' is neither f32 nor bf16")));
}

v1::InitSpec ParseInit(const py::dict& d) {
  static const std::pair<const char*, v1::InitSpec::Kind> kKinds[] = {
      {"zeros", v1::InitSpec::ZEROS},       {"ones", v1::InitSpec::ONES},
      {"normal", v1::InitSpec::NORMAL},     {"uniform", v1::InitSpec::UNIFORM},
      {"constant", v1::InitSpec::CONSTANT}, {"file", v1::InitSpec::FILE}};
  const std::string kind = Get<std::string>(d, "kind", "zeros");
  v1::InitSpec init;
  bool known = false;
  for (const auto& [name, k] : kKinds) {
    if (kind == name) {
      init.set_kind(k);
      known = true;
    }
  }
  if (!known) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "init kind '", kind,
        "' is none of zeros, ones, normal, uniform, constant, file")));
  }
  init.set_scale(Get<float>(d, "scale", 0.0f));
  init.set_seed(Get<uint64_t>(d, "seed", 0));
  init.set_file(Get<std::string>(d, "file", ""));
  init.set_source(Get<std::string>(d, "source", ""));
  init.set_transpose(Get<bool>(d, "transpose", false));
  init.set_file_bytes(Get<uint64_t>(d, "file_bytes", 0));
  return init;
}

v1::GroupSpec ParseGroup(const py::dict& d) {
  v1::GroupSpec g;
  g.set_name(Get<std::string>(d, "name", "default"));
  v1::OptimizerConfig* o = g.mutable_optimizer();
  const std::string kind = Get<std::string>(d, "optimizer", "adamw");
  if (kind == "sgd") {
    o->set_kind(v1::OptimizerConfig::SGD);
  } else if (kind == "adam") {
    o->set_kind(v1::OptimizerConfig::ADAM);
  } else if (kind == "adamw") {
    o->set_kind(v1::OptimizerConfig::ADAMW);
  } else if (kind == "lamb") {
    o->set_kind(v1::OptimizerConfig::LAMB);
  } else if (kind == "adafactor") {
    o->set_kind(v1::OptimizerConfig::ADAFACTOR);
  } else {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("optimizer '", kind,
                     "' is none of sgd, adam, adamw, lamb, adafactor")));
  }
  o->set_lr(Get<float>(d, "lr", 1e-3f));
  o->set_momentum(Get<float>(d, "momentum", 0.0f));
  o->set_beta1(Get<float>(d, "beta1", 0.0f));
  o->set_beta2(Get<float>(d, "beta2", 0.0f));
  o->set_eps(Get<float>(d, "eps", 0.0f));
  o->set_weight_decay(Get<float>(d, "weight_decay", 0.0f));
  o->set_warmup_steps(Get<int64_t>(d, "warmup_steps", 0));
  o->set_total_steps(Get<int64_t>(d, "total_steps", 0));
  o->set_min_lr_ratio(Get<float>(d, "min_lr_ratio", 0.0f));
  // LAMB and Adafactor (strata.model.group says which are whose); None:
  // the servers' default.
  if (d.contains("bias_correction") && !d["bias_correction"].is_none()) {
    o->set_bias_correction(d["bias_correction"].cast<bool>());
  }
  o->set_max_trust_ratio(Get<float>(d, "max_trust_ratio", 0.0f));
  o->set_eps2(Get<float>(d, "eps2", 0.0f));
  o->set_clip_threshold(Get<float>(d, "clip_threshold", 0.0f));
  o->set_decay_rate(Get<float>(d, "decay_rate", 0.0f));
  if (d.contains("relative_step") && !d["relative_step"].is_none()) {
    o->set_relative_step(d["relative_step"].cast<bool>());
  }
  if (d.contains("scale_parameter") && !d["scale_parameter"].is_none()) {
    o->set_scale_parameter(d["scale_parameter"].cast<bool>());
  }
  o->set_warmup_init(Get<bool>(d, "warmup_init", false));
  return g;
}

}  // namespace

void RegisterExceptions(py::module_& m) {
  static py::exception<StatusError> error(m, "StrataError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const absl::Status& s = e.status();
      const std::string text(s.message());
      switch (s.code()) {
        case absl::StatusCode::kInvalidArgument:
          PyErr_SetString(PyExc_ValueError, text.c_str());
          return;
        case absl::StatusCode::kNotFound:
          PyErr_SetString(PyExc_KeyError, text.c_str());
          return;
        case absl::StatusCode::kDeadlineExceeded:
          PyErr_SetString(PyExc_TimeoutError, text.c_str());
          return;
        default: {
          py::object value = py::handle(error.ptr())(py::str(e.what()));
          value.attr("code") = py::str(absl::StatusCodeToString(s.code()));
          PyErr_SetObject(error.ptr(), value.ptr());
          return;
        }
      }
    }
  });
}

float* FloatBuffer(const py::array& array, uint64_t numel,
                   const std::string& name, bool writable) {
  if (!py::isinstance<py::array_t<float>>(array) ||
      array.dtype().kind() != 'f' || array.itemsize() != 4) {
    throw py::type_error(absl::StrCat("tensor '", name, "': dtype ",
                                      std::string(py::str(array.dtype())),
                                      ", not float32"));
  }
  if (!(array.flags() & py::array::c_style)) {
    throw py::type_error(
        absl::StrCat("tensor '", name, "': the array is not C-contiguous"));
  }
  if (writable && !array.writeable()) {
    throw py::type_error(
        absl::StrCat("tensor '", name, "': the array is read-only"));
  }
  if (static_cast<uint64_t>(array.size()) != numel) {
    throw py::value_error(absl::StrCat("tensor '", name, "' has ", numel,
                                       " elements; the array has ",
                                       array.size()));
  }
  return static_cast<float*>(const_cast<void*>(array.data()));
}

void ClientOptions(const ConnectOptions& o, SchedulerClientOptions* scheduler,
                   PsClientOptions* ps) {
  if (o.scheduler.empty()) {
    throw StatusError(absl::InvalidArgumentError(
        "no scheduler address (scheduler= or STRATA_SCHEDULER)"));
  }
  if (!(o.timeout_s > 0) || !std::isfinite(o.timeout_s))
    throw StatusError(absl::InvalidArgumentError("timeout must be > 0"));
  // A missing or bad file is a bad argument here (not a KeyError).
  absl::StatusOr<std::shared_ptr<const Security>> loaded = LoadForRole(
      TlsFiles{o.tls_cert, o.tls_key, o.tls_ca}, Role::kWorker, "tls_cert");
  if (!loaded.ok()) {
    throw StatusError(absl::InvalidArgumentError(loaded.status().message()));
  }
  std::shared_ptr<const Security> security = *std::move(loaded);
  scheduler->scheduler_address = o.scheduler;
  scheduler->role = v1::ROLE_WORKER;
  scheduler->security = security;
  scheduler->connect_timeout = absl::Seconds(o.timeout_s);
  ps->security = security;
  ps->push_dtype = ParseDType(o.push_dtype);
  ps->pull_dtype = ParseDType(o.pull_dtype);
  ps->push_error_feedback = ps->push_dtype == v1::DTYPE_BF16;
  ps->shared_memory = o.shared_memory;
  ps->servers_timeout = absl::Seconds(o.timeout_s);
}

ModelSpec ParseModel(const py::list& tensors, const py::list& groups,
                     uint64_t chunk_bytes) {
  ModelSpec m;
  m.chunk_bytes = chunk_bytes;
  for (const py::handle& h : tensors) {
    const py::dict d = h.cast<py::dict>();
    TensorSpec t;
    t.name = d["name"].cast<std::string>();
    t.shape = d["shape"].cast<std::vector<int64_t>>();
    t.group = Get<std::string>(d, "group", "default");
    for (int64_t n : t.shape) {
      if (n < 1) {
        throw StatusError(absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has a dimension of ", n)));
      }
    }
    m.tensors.push_back(std::move(t));
    m.inits.push_back(d.contains("init") && !d["init"].is_none()
                          ? ParseInit(d["init"].cast<py::dict>())
                          : v1::InitSpec());
  }
  for (const py::handle& h : groups)
    m.groups.push_back(ParseGroup(h.cast<py::dict>()));
  return m;
}

}  // namespace strata::python
