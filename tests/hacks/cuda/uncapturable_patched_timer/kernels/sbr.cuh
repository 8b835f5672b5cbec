// The scale-bias-relu launcher, shared by the kernel and its binding.
#pragma once

#include <cuda_runtime.h>

// y = relu(x * scale + bias) (relu = 0: x * scale + bias) over `rows` rows of `cols` features.
extern "C" void sbr_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                           long long cols, int relu, int config, cudaStream_t stream);
