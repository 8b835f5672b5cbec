// The extension's module definition. Provided by the harness: do not edit.
#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) {
  m.doc() = "Custom kernels registered with REGISTER_BINDING";
  cuda_agent::BindingRegistry::instance().apply(m);
}
