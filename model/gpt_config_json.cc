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
  STRATA_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace strata
