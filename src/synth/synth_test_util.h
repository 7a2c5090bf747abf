// Test helper: synthetic models for tests of the layers above synth (engine, pack, server).
// Each model is written once per test binary run into a scratch directory on the build's
// filesystem rather than /tmp (often tmpfs, which refuses O_DIRECT, so stream-mode tests
// would not read the way users do).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
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

  // `preset` at `type` rewritten as dir()/name: its metadata changed by `edit`, the tensors
  // named in `drop` left out (malformed files for load-error tests).
  std::string Rewrite(const std::string& name, const std::string& preset, const std::string& type,
                      const std::function<void(GgufMetadata&)>& edit,
                      const std::vector<std::string>& drop = {}) {
    auto in = GgufModel::Open(Get(preset, type));
    EXPECT_TRUE(in.ok());
    const std::string path = (dir_ / name).string();
    GgufWriter w(path);
    w.metadata() = in->metadata();
    edit(w.metadata());
    std::vector<const GgufTensor*> kept;
    for (const GgufTensor& t : in->tensors()) {
      if (std::find(drop.begin(), drop.end(), t.name) != drop.end()) continue;
      EXPECT_TRUE(w.AddTensor(t.name, t.type, t.shape).ok());
      kept.push_back(&t);
    }
    EXPECT_TRUE(w.Begin().ok());
    for (const GgufTensor* t : kept) EXPECT_TRUE(w.Write({t->data, t->n_bytes}).ok());
    EXPECT_TRUE(w.Finish().ok());
    return path;
  }

 private:
  std::filesystem::path dir_;
  uint64_t seed_;
};

}  // namespace mt::testing_synth
