// The 1F1B schedule, and a small model (a stack of tanh layers, one per
// stage) trained one step through RunPipelineStep: its loss and every
// layer's gradient equal the unsplit model's bit for bit, for 1 to 4 stages
// and 1 to 8 micro-batches, over the in-process group and over Gloo.
#include "model_parallel/pipeline.h"

#include <cmath>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "collective/gloo_communicator.h"
#include "collective/inproc_communicator.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr int kRows = 3;  // rows per micro-batch
constexpr int kDim = 8;   // width of every layer
constexpr size_t kBoundary = kRows * kDim;

using Matrix = std::vector<float>;  // row-major

float Init(int layer, int i) {
  return 0.3f * std::sin(1.7f * layer + 0.37f * i);
}
float Data(int mb, int i) { return std::cos(0.5f * mb + 0.11f * i); }
float Target(int mb, int i) { return 0.2f * std::sin(0.9f * mb - 0.13f * i); }

// One layer, y = tanh(x W^T), with its gradient accumulated over
// micro-batches in the order their backwards run.
struct Layer {
  Matrix w = Matrix(kDim * kDim), grad = Matrix(kDim * kDim, 0.0f);
  std::map<int, Matrix> inputs, outputs;

  explicit Layer(int index) {
    for (int i = 0; i < kDim * kDim; ++i) w[i] = Init(index, i);
  }
  Matrix Forward(int mb, Matrix x) {
    Matrix y(kBoundary);
    for (int r = 0; r < kRows; ++r) {
      for (int o = 0; o < kDim; ++o) {
        float z = 0;
        for (int i = 0; i < kDim; ++i) z += x[r * kDim + i] * w[o * kDim + i];
        y[r * kDim + o] = std::tanh(z);
      }
    }
    inputs[mb] = std::move(x);
    outputs[mb] = y;
    return y;
  }
  Matrix Backward(int mb, const Matrix& dy) {
    const Matrix& x = inputs[mb];
    const Matrix& y = outputs[mb];
    Matrix dz(kBoundary), dx(kBoundary, 0.0f);
    for (size_t k = 0; k < kBoundary; ++k) dz[k] = dy[k] * (1 - y[k] * y[k]);
    for (int r = 0; r < kRows; ++r) {
      for (int o = 0; o < kDim; ++o) {
        for (int i = 0; i < kDim; ++i) {
          grad[o * kDim + i] += dz[r * kDim + o] * x[r * kDim + i];
          dx[r * kDim + i] += dz[r * kDim + o] * w[o * kDim + i];
        }
      }
    }
    inputs.erase(mb);
    outputs.erase(mb);
    return dx;
  }
};

Matrix Input(int mb) {
  Matrix x(kBoundary);
  for (size_t i = 0; i < kBoundary; ++i) x[i] = Data(mb, int(i));
  return x;
}

// d(0.5 |y - target|^2)/dy, and the loss added to `loss`.
Matrix LossGradient(int mb, const Matrix& y, float* loss) {
  Matrix dy(kBoundary);
  for (size_t i = 0; i < kBoundary; ++i) {
    dy[i] = y[i] - Target(mb, int(i));
    *loss += 0.5f * dy[i] * dy[i];
  }
  return dy;
}

struct Result {
  float loss = 0;
  std::vector<Matrix> grads;  // one per layer
};

// The unsplit model: every micro-batch forward then backward, in order.
Result Reference(int layers, int micro_batches) {
  std::vector<Layer> model;
  for (int l = 0; l < layers; ++l) model.emplace_back(l);
  Result result;
  for (int mb = 0; mb < micro_batches; ++mb) {
    Matrix x = Input(mb);
    for (Layer& layer : model) x = layer.Forward(mb, x);
    Matrix d = LossGradient(mb, x, &result.loss);
    for (int l = layers - 1; l >= 0; --l) d = model[l].Backward(mb, d);
  }
  for (Layer& layer : model) result.grads.push_back(layer.grad);
  return result;
}

// Stage comm.rank() holds layer comm.rank(); fills its gradient (and the
// last stage the loss) into `result`.
absl::Status RunStage(Communicator& comm, int micro_batches, Result& result) {
  Layer layer(comm.rank());
  const bool last = comm.rank() == comm.size() - 1;
  std::map<int, Matrix> loss_grads;
  float loss = 0;
  StageFunctions fns;
  fns.forward =
      [&](int mb, std::vector<float> in) -> absl::StatusOr<std::vector<float>> {
    Matrix y = layer.Forward(mb, comm.rank() == 0 ? Input(mb) : std::move(in));
    if (!last) return y;
    loss_grads[mb] = LossGradient(mb, y, &loss);
    return std::vector<float>();
  };
  fns.backward =
      [&](int mb,
          std::vector<float> grad_out) -> absl::StatusOr<std::vector<float>> {
    return layer.Backward(mb, last ? loss_grads[mb] : grad_out);
  };
  absl::Status status = RunPipelineStep(comm, micro_batches, kBoundary, fns);
  result.grads[comm.rank()] = layer.grad;
  if (last) result.loss = loss;
  return status;
}

std::vector<std::unique_ptr<Communicator>> GlooGroup(int size) {
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<Communicator>> comms(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = size;
      auto comm = ConnectGloo(options, store);
      EXPECT_TRUE(comm.ok()) << comm.status();
      if (comm.ok()) comms[r] = *std::move(comm);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

void ExpectPipelineMatches(std::vector<std::unique_ptr<Communicator>> comms,
                           int micro_batches) {
  const int stages = int(comms.size());
  Result got;
  got.grads.resize(stages);
  std::vector<std::thread> threads;
  for (auto& comm : comms) {
    ASSERT_NE(comm, nullptr);
    threads.emplace_back([&, c = comm.get()] {
      EXPECT_TRUE(RunStage(*c, micro_batches, got).ok());
    });
  }
  for (auto& t : threads) t.join();
  Result want = Reference(stages, micro_batches);
  EXPECT_EQ(got.loss, want.loss);
  for (int l = 0; l < stages; ++l) {
    EXPECT_EQ(got.grads[l], want.grads[l]) << "layer " << l;
  }
}

TEST(OneFOneB, WarmsUpAlternatesAndDrains) {
  using P = PipeStep;
  // Stage 0 of 3, 4 micro-batches: 2 warm-up forwards, 2 pairs, 2 drains.
  EXPECT_EQ(OneFOneB(0, 3, 4), (std::vector<P>{{P::kForward, 0},
                                               {P::kForward, 1},
                                               {P::kForward, 2},
                                               {P::kBackward, 0},
                                               {P::kForward, 3},
                                               {P::kBackward, 1},
                                               {P::kBackward, 2},
                                               {P::kBackward, 3}}));
  // The last stage alternates from the start.
  EXPECT_EQ(OneFOneB(2, 3, 2), (std::vector<P>{{P::kForward, 0},
                                               {P::kBackward, 0},
                                               {P::kForward, 1},
                                               {P::kBackward, 1}}));
  // Fewer micro-batches than stages: all forwards, then all backwards.
  EXPECT_EQ(OneFOneB(0, 4, 2), (std::vector<P>{{P::kForward, 0},
                                               {P::kForward, 1},
                                               {P::kBackward, 0},
                                               {P::kBackward, 1}}));
}

TEST(OneFOneB, RunsEveryMicroBatchOnceEachWayAndBoundsLiveActivations) {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int m = 1; m <= 9; ++m) {
      for (int s = 0; s < stages; ++s) {
        std::vector<int> forwards, backwards;
        int live = 0, peak = 0;
        for (const PipeStep& step : OneFOneB(s, stages, m)) {
          if (step.kind == PipeStep::kForward) {
            forwards.push_back(step.micro_batch);
            peak = std::max(peak, ++live);
          } else {
            backwards.push_back(step.micro_batch);
            --live;
          }
        }
        std::vector<int> all(m);
        for (int i = 0; i < m; ++i) all[i] = i;
        EXPECT_EQ(forwards, all);
        EXPECT_EQ(backwards, all);
        EXPECT_LE(peak, std::min(stages - s, m))
            << "stage " << s << " of " << stages << ", " << m << " micro";
      }
    }
  }
}

TEST(Pipeline, MatchesTheUnsplitModelInProcess) {
  for (int stages = 1; stages <= 4; ++stages) {
    for (int m : {1, 2, 3, 8}) {
      SCOPED_TRACE(testing::Message() << stages << " stages, " << m << " mb");
      auto comms = MakeInProcGroup(stages);
      ASSERT_TRUE(comms.ok());
      ExpectPipelineMatches(*std::move(comms), m);
    }
  }
}

TEST(Pipeline, MatchesTheUnsplitModelOverGloo) {
  ExpectPipelineMatches(GlooGroup(3), 5);
}

TEST(Pipeline, AStageThatFailsEndsTheStepOnEveryStage) {
  auto comms = MakeInProcGroup(3);
  ASSERT_TRUE(comms.ok());
  std::vector<absl::Status> statuses(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Communicator& c = *(*comms)[r];
      Layer layer(r);
      StageFunctions fns;
      fns.forward =
          [&](int mb,
              std::vector<float> in) -> absl::StatusOr<std::vector<float>> {
        if (r == 1 && mb == 1) return absl::InternalError("stage 1 broke");
        return layer.Forward(mb, r == 0 ? Input(mb) : std::move(in));
      };
      fns.backward =
          [&](int mb,
              std::vector<float> g) -> absl::StatusOr<std::vector<float>> {
        return layer.Backward(mb, r == 2 ? Matrix(kBoundary, 1.0f) : g);
      };
      statuses[r] = RunPipelineStep(c, 4, kBoundary, fns);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(absl::IsInternal(statuses[1])) << statuses[1];
  EXPECT_FALSE(statuses[0].ok());
  EXPECT_FALSE(statuses[2].ok());
}

TEST(Pipeline, AWrongSizedOutputIsAClearError) {
  auto comms = MakeInProcGroup(2);
  ASSERT_TRUE(comms.ok());
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      StageFunctions fns;
      fns.forward =
          [](int, std::vector<float>) -> absl::StatusOr<std::vector<float>> {
        return std::vector<float>(kBoundary - 1);
      };
      fns.backward =
          [](int, std::vector<float>) -> absl::StatusOr<std::vector<float>> {
        return std::vector<float>(kBoundary);
      };
      statuses[r] = RunPipelineStep(*(*comms)[r], 2, kBoundary, fns);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(absl::IsInvalidArgument(statuses[0])) << statuses[0];
  EXPECT_NE(statuses[0].message().find("forward output"), std::string::npos);
  EXPECT_FALSE(statuses[1].ok());
}

}  // namespace
}  // namespace strata
