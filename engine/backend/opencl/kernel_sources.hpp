#pragma once
// kernels/*.cl embedded at build time (see cmake/embed_kernels.cmake).

#include <string>
#include <vector>

namespace nanscope::opencl {

struct KernelSource {
  std::string name;    // file name without .cl, e.g. "group_norm"
  std::string source;  // the file's text
};

// Every kernel file, sorted by name. "common" is prepended to every other
// program when it is built, so it is not a program of its own.
const std::vector<KernelSource>& kernel_sources();

}  // namespace nanscope::opencl
