#include "model/gpt_config_json.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace strata {

std::string GptConfigToJson(const GptConfig& c) {
  nlohmann::json j = {{"vocab", c.vocab},
                      {"context", c.context},
                      {"layers", c.layers},
                      {"heads", c.heads},
                      {"width", c.width}};
  if (c.experts > 0) {
    j["moe"] = {{"experts", c.experts},     {"top_k", c.top_k},
                {"moe_every", c.moe_every}, {"expert_hidden", c.expert_hidden},
                {"capacity", c.capacity},   {"aux_loss", c.aux_loss}};
  }
  return j.dump();
}

absl::StatusOr<GptConfig> GptConfigFromJson(const std::string& text) {
  nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError("model config is not a JSON object");
  GptConfig c;
  for (auto [key, field] : {std::pair{"vocab", &c.vocab},
                            {"context", &c.context},
                            {"layers", &c.layers},
                            {"heads", &c.heads},
                            {"width", &c.width}}) {
    if (!j.contains(key) || !j[key].is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config lacks integer '", key, "'"));
    }
    *field = j[key].get<int>();
  }
  if (j.contains("moe")) {
    const nlohmann::json& m = j["moe"];
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          "model config's 'moe' is not an object");
    }
    for (auto [key, field] : {std::pair{"experts", &c.experts},
                              {"top_k", &c.top_k},
                              {"moe_every", &c.moe_every}}) {
      if (!m.contains(key) || !m[key].is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model config's 'moe' lacks integer '", key, "'"));
      }
      *field = m[key].get<int>();
    }
    // Optional: 0 (the dense MLP's width) when absent.
    if (m.contains("expert_hidden")) {
      if (!m["expert_hidden"].is_number_integer()) {
        return absl::InvalidArgumentError(
            "model config's 'moe' has a non-integer 'expert_hidden'");
      }
      c.expert_hidden = m["expert_hidden"].get<int>();
    }
    for (auto [key, field] :
         {std::pair{"capacity", &c.capacity}, {"aux_loss", &c.aux_loss}}) {
      if (!m.contains(key) || !m[key].is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model config's 'moe' lacks number '", key, "'"));
      }
      *field = m[key].get<float>();
    }
  }
  STRATA_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace strata
