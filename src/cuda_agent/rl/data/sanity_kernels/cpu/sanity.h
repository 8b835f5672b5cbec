// The sanity family's launcher: y = f(x * scale + bias) over `rows` rows of `cols` features.
#pragma once

extern "C" void sanity_launch(const float* x, const float* scale, const float* bias, float* y, long long rows,
                              long long cols, int config);
