#include "server/reasoning.h"

#include <utility>

#include "server/tag_scan.h"
#include "tokenizer/chat_template.h"

namespace mt::server {
namespace {

constexpr std::string_view kOpen = kThinkOpen;
constexpr std::string_view kClose = kThinkClose;

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

ReasoningOutput SplitReasoning(std::string_view text, bool open) {
  const std::string_view rest = TrimLeft(text);
  if (!open && rest.substr(0, kOpen.size()) != kOpen) return {"", std::string(text), false};
  const std::string_view inside = open ? rest : rest.substr(kOpen.size());
  const size_t close = inside.find(kClose);
  if (close == std::string_view::npos) {
    return {std::string(TrimRight(TrimLeft(inside))), "", true};
  }
  return {std::string(TrimRight(TrimLeft(inside.substr(0, close)))),
          std::string(TrimLeft(inside.substr(close + kClose.size()))), true};
}

ReasoningOutput ReasoningSplitter::Push(std::string_view text) {
  held_ += text;
  return Drain(/*final=*/false);
}

ReasoningOutput ReasoningSplitter::Finish() { return Drain(/*final=*/true); }

ReasoningOutput ReasoningSplitter::Drain(bool final) {
  ReasoningOutput out;
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // Leading whitespace, then "<think>" or not.
        const std::string_view rest = TrimLeft(held_);
        if (rest.size() >= kOpen.size() || final || rest != kOpen.substr(0, rest.size())) {
          if (rest.substr(0, kOpen.size()) == kOpen) {
            thought_ = true;
            held_ = std::string(rest.substr(kOpen.size()));
            state_ = State::kReasoning;
          } else {
            state_ = State::kContent;  // all content, whitespace included
          }
          continue;
        }
        out.thought = thought_;
        return out;  // still undecided
      }
      case State::kReasoning: {
        if (!sent_reasoning_) held_ = std::string(TrimLeft(held_));  // before the reasoning
        if (const size_t close = held_.find(kClose); close != std::string::npos) {
          out.reasoning += TrimRight(std::string_view(held_).substr(0, close));
          held_.erase(0, close + kClose.size());
          state_ = State::kContentStart;
          continue;
        }
        if (final) {
          out.reasoning += TrimRight(held_);
          held_.clear();
          out.thought = thought_;
          return out;
        }
        // Hold a tag cut short and trailing whitespace (dropped if </think> follows).
        size_t keep = PartialTagLength(held_, kClose);
        const std::string_view body = std::string_view(held_).substr(0, held_.size() - keep);
        keep += body.size() - TrimRight(body).size();
        const size_t send = held_.size() - keep;
        if (send > 0) sent_reasoning_ = true;
        out.reasoning += held_.substr(0, send);
        held_.erase(0, send);
        out.thought = thought_;
        return out;
      }
      case State::kContentStart:
        held_ = std::string(TrimLeft(held_));
        if (held_.empty()) {
          out.thought = thought_;
          return out;
        }
        state_ = State::kContent;
        continue;
      case State::kContent:
        out.content += std::exchange(held_, "");
        out.thought = thought_;
        return out;
    }
  }
}

}  // namespace mt::server
