// GptStage's mixture-of-experts blocks (model/gpt_stage.h): the router
// and experts whole on every rank of the tensor group, a MoeLayer per
// micro-batch in flight (MoeOf, beside the slots in gpt_stage.cc), and
// the routing counted over the step.
#include <vector>

#include "model/gpt_layout.h"
#include "model/gpt_stage.h"

namespace strata {

using namespace ::strata::gpt_layout;  // NOLINT: the shared parameter layout

void GptStage::LoadMoe(Model& host, int j, bool lead) {
  MoeParams& m = moe_[j];
  const int first = FirstParam(j) + kMoeRouter;
  const int n = ParamsInLayer(true, config_.experts) - kMoeRouter;
  m.params.resize(n);
  m.w = {};
  m.g = {};
  for (int k = 0; k < n; ++k) {
    Param& p = m.params[k];
    p.UseWhole(host.param_data(first + k), host.grad_data(first + k),
               host.params()[first + k].spec.numel(), lead);
    if (k == 0) {
      m.w.router = p.w;
      m.g.router = p.g;
      continue;
    }
    // Each expert's fc.weight, fc.bias, proj.weight, proj.bias.
    const int which = (k - 1) % kParamsPerExpert;
    auto& w = which == 0   ? m.w.fc_w
              : which == 1 ? m.w.fc_b
              : which == 2 ? m.w.proj_w
                           : m.w.proj_b;
    auto& g = which == 0   ? m.g.fc_w
              : which == 1 ? m.g.fc_b
              : which == 2 ? m.g.proj_w
                           : m.g.proj_b;
    w.push_back(p.w);
    g.push_back(p.g);
  }
  m.load.assign(config_.experts, 0);
  m.dropped = m.assignments = 0;
  m.aux_weighted = 0;
}

MoeStats GptStage::moe_stats() const {
  MoeStats s;
  for (int j = 0; j < place_.layers; ++j) {
    if (!IsMoe(j)) continue;
    const MoeParams& m = moe_[j];
    s.dropped += m.dropped;
    s.assignments += m.assignments;
    s.load.push_back(m.load);
    const int64_t tokens = m.assignments / config_.top_k;
    if (tokens > 0) s.aux_loss += m.aux_weighted / tokens;
  }
  return s;
}

}  // namespace strata
