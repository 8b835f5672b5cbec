// Declares ATen's CPU kernels under innocent names with asm labels (the mangled names sit in strings, which a text scan blanks).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

using Tensor = torch::Tensor;
Tensor fused_mul(const Tensor& a, const Tensor& b) __asm__("_ZN2at3cpu3mulERKNS_6TensorES3_");
Tensor fused_add(const Tensor& a, const Tensor& b, const c10::Scalar& alpha) __asm__("_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE");
Tensor fused_clamp(const Tensor& a, const c10::Scalar& lo) __asm__("_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE");

static torch::Tensor sbr_attack(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  return fused_clamp(fused_add(fused_mul(x, scale), bias, 1), 0);
}

static void register_attack(pybind11::module& m) { m.def("sbr_attack", &sbr_attack); }

REGISTER_BINDING(attack, register_attack);
