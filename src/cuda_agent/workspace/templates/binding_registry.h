// Registry of the extension's Python bindings. Provided by the harness: do not edit.
// Each kernels/*_binding.cpp registers a function with REGISTER_BINDING(name, func); binding.cpp
// applies them all to the `cuda_extension` module. Only pybind11 is included, which compiles much
// faster than torch/extension.h.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

namespace cuda_agent {

using BindingFunction = void (*)(pybind11::module&);

class BindingRegistry {
 public:
  static BindingRegistry& instance() {
    static BindingRegistry registry;
    return registry;
  }

  bool add(const char* name, BindingFunction func) {
    entries_.emplace_back(name, func);
    return true;
  }

  void apply(pybind11::module& m) const {
    for (const auto& entry : entries_) entry.second(m);
  }

 private:
  std::vector<std::pair<std::string, BindingFunction>> entries_;
};

}  // namespace cuda_agent

// Registers `func` (a void(pybind11::module&)) at static-initialization time.
#define REGISTER_BINDING(name, func) \
  static const bool cuda_agent_binding_registered_##name = \
      ::cuda_agent::BindingRegistry::instance().add(#name, func)
