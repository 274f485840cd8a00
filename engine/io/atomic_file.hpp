#pragma once
// Whole-file writes that never leave a half-written file behind: the bytes go
// to a new temporary file in the target's folder (so rename() stays on one
// file system), are flushed to disk, and the temporary is renamed over the
// target. On any failure the temporary is removed and an existing target is
// left as it was.

#include <filesystem>
#include <string_view>

namespace nanscope::io {

// Throws FileError naming `path`, the step that failed and the system's reason.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace nanscope::io
