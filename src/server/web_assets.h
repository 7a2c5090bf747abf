// The chat page's files (src/server/web/), built into the binary: cmake/embed_web.cmake
// turns them into byte arrays in the build tree at build time.
#pragma once

#include <span>
#include <string_view>

namespace mt::server {

struct WebAsset {
  std::string_view name;   // the file name, e.g. "chat.js"
  std::string_view bytes;  // its contents
};

// Every file of src/server/web/, sorted by name. Static storage; never empty in a build.
std::span<const WebAsset> WebAssets();

}  // namespace mt::server
