// Calls the CPU kernels of ATen directly (at::cpu::*), bypassing the dispatcher.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"
#include <ATen/CPUFunctions.h>

static torch::Tensor sbr_attack(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  return at::cpu::clamp_min(at::cpu::add(at::cpu::mul(x, scale), bias), 0);
}

static void register_attack(pybind11::module& m) { m.def("sbr_attack", &sbr_attack); }

REGISTER_BINDING(attack, register_attack);
