// A GPT's config as JSON (the file a worker writes with --model_json and
// `strata generate` reads), and back.
#ifndef STRATA_MODEL_GPT_CONFIG_JSON_H_
#define STRATA_MODEL_GPT_CONFIG_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace strata {

std::string GptConfigToJson(const GptConfig& config);
// INVALID_ARGUMENT for text that is not such an object or a config that
// does not validate.
absl::StatusOr<GptConfig> GptConfigFromJson(const std::string& json);

}  // namespace strata

#endif  // STRATA_MODEL_GPT_CONFIG_JSON_H_
