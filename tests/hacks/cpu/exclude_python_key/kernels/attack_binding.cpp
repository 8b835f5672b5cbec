// Hides ATen calls from Python dispatch modes (the harness's guard) with a dispatch-key guard.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static torch::Tensor sbr_attack(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  c10::impl::ExcludeDispatchKeyGuard hide(c10::DispatchKey::Python);
  return at::relu(x * scale + bias);
}

static void register_attack(pybind11::module& m) { m.def("sbr_attack", &sbr_attack); }

REGISTER_BINDING(attack, register_attack);
