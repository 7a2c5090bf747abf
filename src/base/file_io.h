// Whole small files in and out: prompts, JSON statistics, logit dumps. Large model files go
// through io/ (mapped or direct reads) and gguf/ (the writer), not here.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace mt {

// The bytes of the file at `path`. NotFound if it does not exist; IoError with the OS's
// reason otherwise.
Result<std::string> ReadWholeFile(const std::string& path);

// Writes `contents` to `path` atomically: to path + ".tmp", fsync, then rename over `path`.
// On any error the temporary file is removed, so a failed write never leaves a partial file
// behind, and an existing `path` is unchanged. Errors name the file and the OS's reason.
Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace mt
