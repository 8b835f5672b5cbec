#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"
#include "sbr.h"

#include <map>
#include <vector>

// Returns one static output tensor from every call.
static torch::Tensor sbr_static_out(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  static torch::Tensor out;
  if (!out.defined()) out = torch::empty_like(x);
  sbr_launch(x.data_ptr<float>(), scale.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
             x.size(0), x.size(1), 1, 0);
  return out;
}

// Computes once per input shape and returns that tensor for every later input of the same shape.
static torch::Tensor sbr_cache_shape(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  static std::map<std::vector<int64_t>, torch::Tensor> cache;
  auto& hit = cache[x.sizes().vec()];
  if (!hit.defined()) {
    hit = torch::empty_like(x);
    sbr_launch(x.data_ptr<float>(), scale.data_ptr<float>(), bias.data_ptr<float>(), hit.data_ptr<float>(),
               x.size(0), x.size(1), 1, 0);
  }
  return hit;
}

static void register_state(pybind11::module& m) {
  m.def("sbr_static_out", &sbr_static_out);
  m.def("sbr_cache_shape", &sbr_cache_shape);
}

REGISTER_BINDING(state, register_state);
