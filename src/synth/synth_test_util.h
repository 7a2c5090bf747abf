// Test helper: synthetic models for tests of the layers above synth (engine, pack, server).
// Each model is written once per test binary run into a scratch directory on the build's
// filesystem rather than /tmp (often tmpfs, which refuses O_DIRECT, so stream-mode tests
// would not read the way users do).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "synth/synth.h"

namespace mt::testing_synth {

class SynthModels {
 public:
  // Makes <current directory>/<tag>-<pid>/; every model is synthesized with `seed`.
  SynthModels(const std::string& tag, uint64_t seed)
      : dir_(std::filesystem::current_path() / (tag + "-" + std::to_string(getpid()))),
        seed_(seed) {
    std::filesystem::create_directories(dir_);
  }
  ~SynthModels() { std::filesystem::remove_all(dir_); }  // the models and anything else there
  SynthModels(const SynthModels&) = delete;
  SynthModels& operator=(const SynthModels&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  // The path of `preset` at `type` ("q4_k_m", "q8_0", ...), synthesized on first use; a
  // synthesis error fails the calling test.
  std::string Get(const std::string& preset, const std::string& type) {
    const std::string path = (dir_ / (preset + "-" + type + ".gguf")).string();
    if (!std::filesystem::exists(path)) {
      SynthOptions o;
      o.output_path = path;
      o.preset = preset;
      o.file_type = type;
      o.seed = seed_;
      Result<SynthResult> r = Synthesize(o);
      EXPECT_TRUE(r.ok()) << r.status().message();
    }
    return path;
  }

 private:
  std::filesystem::path dir_;
  uint64_t seed_;
};

}  // namespace mt::testing_synth
