// A GPT's config checks and its parameter list (names, shapes, groups,
// inits), shared by every backend through Gpt.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/gpt.h"

namespace strata {

absl::Status GptConfig::Validate() const {
  if (vocab < 1 || vocab > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab must be in [1, 65536], got ", vocab));
  }
  if (context < 1 || layers < 1 || heads < 1 || width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("context, layers, heads and width must be positive, got ",
                     context, ", ", layers, ", ", heads, ", ", width));
  }
  if (width % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heads (", heads, ") must divide width (", width, ")"));
  }
  if (experts < 0 || experts > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("experts must be in [0, 1024], got ", experts));
  }
  if (experts == 0) return absl::OkStatus();
  if ((top_k != 1 && top_k != 2) || top_k > experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be 1 or 2 and at most experts (", experts,
                     "), got ", top_k));
  }
  if (moe_every < 1 || moe_every > layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_every must be in [1, layers (", layers, ")], got ", moe_every));
  }
  if (expert_hidden < 0 || expert_hidden > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert_hidden must be in [0, 2^20], got ", expert_hidden));
  }
  if (!(capacity > 0) || !std::isfinite(capacity) || !(aux_loss >= 0) ||
      !std::isfinite(aux_loss)) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity must be > 0 and aux_loss >= 0, got ", capacity,
                     " and ", aux_loss));
  }
  return absl::OkStatus();
}

std::vector<ParamInfo> GptParams(const GptConfig& config) {
  std::vector<ParamInfo> params;
  const int64_t V = config.vocab, C = config.width, L = config.layers;
  const float std_dev = 0.02f;
  const float proj_std = std_dev / std::sqrt(2.0f * L);
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay,
                 ParamInfo::Init init, float scale) {
    ParamInfo p;
    p.spec.name = std::move(name);
    p.spec.shape = std::move(shape);
    p.spec.group = decay ? "decay" : "no_decay";
    p.init = init;
    p.init_scale = scale;
    params.push_back(std::move(p));
  };
  add("wte", {V, C}, true, ParamInfo::kNormal, std_dev);
  add("wpe", {config.context, C}, false, ParamInfo::kNormal, std_dev);
  for (int l = 0; l < L; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    add(h + "ln1.weight", {C}, false, ParamInfo::kOnes, 0);
    add(h + "ln1.bias", {C}, false, ParamInfo::kZeros, 0);
    add(h + "attn.qkv.weight", {3 * C, C}, true, ParamInfo::kNormal, std_dev);
    add(h + "attn.qkv.bias", {3 * C}, false, ParamInfo::kZeros, 0);
    add(h + "attn.proj.weight", {C, C}, true, ParamInfo::kNormal, proj_std);
    add(h + "attn.proj.bias", {C}, false, ParamInfo::kZeros, 0);
    add(h + "ln2.weight", {C}, false, ParamInfo::kOnes, 0);
    add(h + "ln2.bias", {C}, false, ParamInfo::kZeros, 0);
    std::vector<std::string> mlps = {h + "mlp."};
    int64_t hidden = 4 * C;
    if (config.IsMoeLayer(l)) {
      hidden = config.ExpertHidden();
      add(h + "moe.router.weight", {config.experts, C}, true,
          ParamInfo::kNormal, std_dev);
      mlps.clear();
      for (int e = 0; e < config.experts; ++e) {
        mlps.push_back(absl::StrCat(h, "moe.experts.", e, "."));
      }
    }
    for (const std::string& m : mlps) {
      add(m + "fc.weight", {hidden, C}, true, ParamInfo::kNormal, std_dev);
      add(m + "fc.bias", {hidden}, false, ParamInfo::kZeros, 0);
      add(m + "proj.weight", {C, hidden}, true, ParamInfo::kNormal, proj_std);
      add(m + "proj.bias", {C}, false, ParamInfo::kZeros, 0);
    }
  }
  add("lnf.weight", {C}, false, ParamInfo::kOnes, 0);
  add("lnf.bias", {C}, false, ParamInfo::kZeros, 0);
  return params;
}

}  // namespace strata
