#include "trainer/server_model.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "formats/safetensors.h"
#include "model/hf_gpt2.h"

namespace strata {

namespace {

// How the servers draw parameter `p`'s initial values.
v1::InitSpec DrawnInit(const ParamInfo& p, uint64_t seed) {
  v1::InitSpec init;
  switch (p.init) {
    case ParamInfo::kNormal:
      init.set_kind(v1::InitSpec::NORMAL);
      init.set_scale(p.init_scale);
      break;
    case ParamInfo::kOnes:
      init.set_kind(v1::InitSpec::ONES);
      break;
    case ParamInfo::kZeros:
      init.set_kind(v1::InitSpec::ZEROS);
      break;
  }
  init.set_seed(seed);
  return init;
}

// The settings of optimizer `name` for GPT training: AdamW's and Adam's
// betas as GPT-2 reproductions use them (0.9, 0.95); SGD with momentum
// 0.9; LAMB as its paper (0.9, 0.999, eps 1e-6); Adafactor with the
// trainer's scheduled lr rather than its relative step (so --lr and
// --warmup mean what they do for the others), without parameter scaling
// or a first moment, as T5 fine-tuning runs it.
absl::Status SetOptimizer(const std::string& name, v1::OptimizerConfig* opt) {
  if (name == "adamw" || name == "adam") {
    opt->set_kind(name == "adamw" ? v1::OptimizerConfig::ADAMW
                                  : v1::OptimizerConfig::ADAM);
    opt->set_beta1(0.9f);
    opt->set_beta2(0.95f);
    opt->set_eps(1e-8f);
  } else if (name == "sgd") {
    opt->set_kind(v1::OptimizerConfig::SGD);
    opt->set_momentum(kSgdMomentum);
  } else if (name == "lamb") {
    opt->set_kind(v1::OptimizerConfig::LAMB);
    opt->set_beta1(0.9f);
    opt->set_beta2(0.999f);
    opt->set_eps(1e-6f);
  } else if (name == "adafactor") {
    opt->set_kind(v1::OptimizerConfig::ADAFACTOR);
    opt->set_relative_step(false);
    opt->set_scale_parameter(false);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer '", name,
                     "' (adamw, adam, sgd, lamb or adafactor)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PushCompression> ParseCompression(const std::string& text) {
  PushCompression c;
  if (text == "none") return c;
  if (text == "onebit") {
    c.dtype = v1::DTYPE_ONEBIT;
    return c;
  }
  if (absl::StartsWith(text, "topk:") &&
      absl::SimpleAtod(text.substr(5), &c.ratio) && c.ratio > 0 &&
      c.ratio <= 1) {
    c.dtype = v1::DTYPE_TOPK;
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--compress ", text, ": none, onebit, or topk:R with R in (0, 1]"));
}

bool MomentumCorrection(const TrainerOptions& o) {
  absl::StatusOr<PushCompression> c = ParseCompression(o.compress);
  return o.momentum_correction && o.sync == SyncMode::kPs &&
         o.optimizer == "sgd" && c.ok() && c->dtype == v1::DTYPE_TOPK;
}

int64_t CompressFromStep(const TrainerOptions& o) {
  if (MomentumCorrection(o)) return 0;
  return o.compress_from >= 0 ? o.compress_from : o.warmup_steps;
}

absl::StatusOr<ModelSpec> ServerModel(const std::vector<ParamInfo>& params,
                                      const TrainerOptions& o) {
  STRATA_ASSIGN_OR_RETURN(const PushCompression compression,
                          ParseCompression(o.compress));
  const bool freeze = o.compress_freeze_variance && o.sync == SyncMode::kPs &&
                      compression.dtype == v1::DTYPE_ONEBIT &&
                      (o.optimizer == "adam" || o.optimizer == "adamw" ||
                       o.optimizer == "lamb");
  if (freeze && CompressFromStep(o) < 1) {
    return absl::InvalidArgumentError(
        "--compress_freeze_variance freezes the second moment when "
        "compression starts: it needs steps at full precision first "
        "(--compress_from N or --warmup N, N >= 1)");
  }
  ModelSpec m;
  m.chunk_bytes = o.chunk_bytes;
  for (const ParamInfo& p : params) m.tensors.push_back(p.spec);
  if (o.init_from.empty()) {
    for (const ParamInfo& p : params) m.inits.push_back(DrawnInit(p, o.seed));
  } else {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                            SafetensorsFile::Open(o.init_from));
    STRATA_ASSIGN_OR_RETURN(m.inits,
                            HfGpt2InitSpecs(*file, o.init_from, params));
  }
  for (const char* group : {"decay", "no_decay"}) {
    v1::GroupSpec g;
    g.set_name(group);
    v1::OptimizerConfig* opt = g.mutable_optimizer();
    STRATA_RETURN_IF_ERROR(SetOptimizer(o.optimizer, opt));
    opt->set_lr(o.lr);
    opt->set_weight_decay(std::string(group) == "decay" ? o.weight_decay
                                                        : 0.0f);
    opt->set_warmup_steps(o.warmup_steps);
    opt->set_total_steps(o.steps);
    opt->set_min_lr_ratio(o.min_lr_ratio);
    if (freeze) opt->set_freeze_variance_after(CompressFromStep(o));
    // DGC: the momentum is the worker's.
    if (MomentumCorrection(o)) opt->set_momentum(0);
    m.groups.push_back(g);
  }
  return m;
}

}  // namespace strata
