// strata._strata.TokenDataset: the windows Strata's own workers train on
// (data/dataset.h), for a Python worker in the same job as C++ workers.
#include <pybind11/numpy.h>

#include <memory>

#include "data/dataset.h"
#include "python/src/bindings.h"
#include "python/src/convert.h"

namespace strata::python {
namespace {

class Dataset {
 public:
  Dataset(const std::string& path, int vocab, int context) {
    DatasetOptions o;
    o.context = context;
    py::gil_scoped_release release;
    data_ = Take(TokenDataset::Open(path, vocab, o));
  }
  int64_t Windows(bool eval) const {
    return data_->num_windows(eval ? Split::kEval : Split::kTrain);
  }
  // Samples first .. first + count - 1 of the train (or eval) split under
  // `seed`: (tokens, targets), each (count, context) int32.
  py::tuple Batch(int64_t first, int count, uint64_t seed, bool eval) const {
    if (first < 0 || count < 1) {
      throw py::value_error("need first >= 0 and count >= 1");
    }
    const Split split = eval ? Split::kEval : Split::kTrain;
    if (data_->num_windows(split) == 0) {
      throw py::value_error("the split has no windows");
    }
    const int T = data_->context();
    py::array_t<int32_t> tokens({count, T}), targets({count, T});
    data_->Batch(split, seed, first, count, tokens.mutable_data(),
                 targets.mutable_data());
    return py::make_tuple(tokens, targets);
  }

 private:
  std::unique_ptr<TokenDataset> data_;
};

}  // namespace

void BindData(py::module_& m) {
  py::class_<Dataset>(m, "TokenDataset",
                      "Token files as Strata's workers read them: windows "
                      "of context + 1 tokens, train and eval splits.")
      .def(py::init<std::string, int, int>(), py::arg("path"), py::arg("vocab"),
           py::arg("context"))
      .def("windows", &Dataset::Windows, py::arg("eval") = false,
           "The split's window count (an epoch's samples).")
      .def("batch", &Dataset::Batch, py::arg("first"), py::arg("count"),
           py::arg("seed"), py::arg("eval") = false,
           "Samples first..first+count-1 under seed: (tokens, targets), "
           "int32 arrays of shape (count, context), as a C++ worker reads "
           "them.");
}

}  // namespace strata::python
