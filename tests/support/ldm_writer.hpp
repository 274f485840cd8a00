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

// The structure (UNet, VAE and text configs) of a diffusers pipeline folder of family `f`.
models::LdmStructure folder_structure(const std::filesystem::path& folder, models::ModelFamily f);

// The diffusers pipeline `folder` of family `f` as one LDM file `file`, with its
// tokenizer/ (and SDXL's tokenizer_2/) copied beside it, as users keep them.
void write_ldm_copy(const std::filesystem::path& folder, models::ModelFamily f, const std::filesystem::path& file);

}  // namespace nanscope::test
