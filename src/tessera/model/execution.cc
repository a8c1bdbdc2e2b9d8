#include "tessera/model/execution.h"

#include "tessera/core/error.h"

namespace tessera::model {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kF32:
      return "f32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kF16:
      return "f16";
  }
  return "?";
}

Precision precision_from_name(std::string_view name) {
  for (Precision p : {Precision::kF32, Precision::kBf16, Precision::kF16}) {
    if (precision_name(p) == name) return p;
  }
  fail("train.precision must be \"f32\", \"bf16\" or \"f16\", got \"{}\"", name);
}

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Recompute recompute_from_name(std::string_view name) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (recompute_name(r) == name) return r;
  }
  fail("train.recompute must be \"none\", \"selective\" or \"full\", got \"{}\"", name);
}

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
      return "dense";
    case WeightFormat::kInt8:
      return "int8";
  }
  return "?";
}

WeightFormat weight_format_from_name(std::string_view name) {
  for (WeightFormat f : {WeightFormat::kDense, WeightFormat::kInt8}) {
    if (weight_format_name(f) == name) return f;
  }
  fail("the weight format must be \"dense\" or \"int8\", got \"{}\"", name);
}

}  // namespace tessera::model
