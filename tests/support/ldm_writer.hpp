#pragma once
// Test support: writes LDM single-file checkpoints (the product reads them;
// only the tests write them).

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "models/ldm_checkpoint.hpp"

namespace nanscope::test {

// Writes diffusers-named component tensors ("unet.conv_in.weight", ...) as an
// LDM single file with this family's table: 1x1 convs for the VAE attention,
// fused OpenCLIP in_proj, transposed text_projection, and for SD 2.x the
// unused last text layer (a copy of the last one) that original files carry.
// Throws FileError for a tensor no row covers.
void write_ldm_checkpoint(const std::filesystem::path& path, const models::LdmNameMap& names,
                          const std::vector<std::pair<std::string, HostTensor>>& diffusers_tensors);

}  // namespace nanscope::test
