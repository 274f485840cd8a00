#pragma once
// Checking OpenCL calls: NS_CL_CHECK throws ClError naming the call and the
// status (e.g. "CL_OUT_OF_RESOURCES in clEnqueueNDRangeKernel"); its twin
// NS_CL_CHECK_NOTHROW only logs (for destructors).

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <string>

namespace nanscope::opencl {

const char* cl_status_name(cl_int status);
[[noreturn]] void throw_cl_error(cl_int status, const char* call, const std::string& context = {});
void log_cl_error(cl_int status, const char* call);

}  // namespace nanscope::opencl

#define NS_CL_CHECK(call)                                                                \
  do {                                                                                   \
    const cl_int ns_status_ = (call);                                                    \
    if (ns_status_ != CL_SUCCESS) ::nanscope::opencl::throw_cl_error(ns_status_, #call); \
  } while (0)

#define NS_CL_CHECK_NOTHROW(call)                                                      \
  do {                                                                                 \
    const cl_int ns_status_ = (call);                                                  \
    if (ns_status_ != CL_SUCCESS) ::nanscope::opencl::log_cl_error(ns_status_, #call); \
  } while (0)
