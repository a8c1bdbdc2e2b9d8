#pragma once

#include <string>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::serve {

// An invalid request parameter. param() is its OpenAI JSON name (for sampling, also its
// SamplerParams field name), so the CLI can name its flag and the HTTP API its "param".
class ParamError : public Error {
 public:
  ParamError(std::string param, const std::string& message)
      : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

}  // namespace tessera::serve
