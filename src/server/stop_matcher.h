// Stop strings of a generation request: text is passed on as it is generated, except a
// tail that could still turn out to be the start of a stop string, which is held back until
// it cannot. When a stop string appears, it and everything after it are dropped.
// Not thread-safe (one per request).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mt::server {

class StopMatcher {
 public:
  // Empty strings among `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds generated text; returns the text that can be sent now. Sets *stopped (and
  // returns the text before the stop string) when a stop string is complete; the earliest
  // stop string in the text wins.
  std::string Push(std::string_view text, bool* stopped);
  // The held-back tail, for when generation ends for another reason.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text not yet sent: a possible prefix of a stop string
};

}  // namespace mt::server
