// Binds ATen's CPU kernels by asm labels spelled with escapes (hex, octal, universal) and split
// literals: a scan of the source as written sees "\x5fZN2at..." where the compiler reads _ZN2at3cpu3mul...
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

using Tensor = torch::Tensor;
Tensor fused_mul(const Tensor& a, const Tensor& b) __asm__("\x5fZN2at3cpu3mul" "ERKNS_6Tensor\x45S3_");
Tensor fused_add(const Tensor& a, const Tensor& b, const c10::Scalar& alpha)
    __asm__("\137ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE");
Tensor fused_clamp(const Tensor& a, const c10::Scalar& lo) __asm__("\u005fZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE");

static torch::Tensor sbr_attack(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& bias) {
  return fused_clamp(fused_add(fused_mul(x, scale), bias, 1), 0);
}

// The name is escaped too: the old scan tested every literal of a file with asm in it as a label.
static void register_attack(pybind11::module& m) { m.def("sbr\x5fattack", &sbr_attack); }

REGISTER_BINDING(attack, register_attack);
