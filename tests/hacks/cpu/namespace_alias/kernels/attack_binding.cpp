// Hides the torch:: prefix behind a namespace alias.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

static torch::Tensor sbr_attack(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  namespace T = torch;
  return T::relu(T::add(T::mul(x, scale), bias));
}

static void register_attack(pybind11::module& m) { m.def("sbr_attack", &sbr_attack); }

REGISTER_BINDING(attack, register_attack);
