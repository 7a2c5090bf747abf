#include "server/harmony.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/json_depth.h"
#include "server/tag_scan.h"
#include "tokenizer/chat_template.h"

namespace mt::server {
namespace {

// What a message's header may start with: the first message (after the prompt's
// "<|start|>assistant") starts with its channel or its recipient, later ones with <|start|>.
constexpr std::string_view kHeaderStarts[] = {kHarmonyChannel, kHarmonyStart, " to=", "to="};
// A header longer than this without its <|message|> is not one: the text is content.
constexpr size_t kMaxHeader = 1024;

bool CouldBeHeader(std::string_view s) {
  return std::any_of(std::begin(kHeaderStarts), std::end(kHeaderStarts), [&](std::string_view t) {
    const size_t n = std::min(s.size(), t.size());
    return s.substr(0, n) == t.substr(0, n);
  });
}

// The word after `key` in `header`, up to a space or the next tag; empty when there is none.
std::string_view WordAfter(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + key.size());
  const size_t end = std::min(rest.find(' '), rest.find("<|"));
  return rest.substr(0, end);
}

// A call's arguments: compact JSON when the body is JSON, else the body as written.
std::string Arguments(std::string_view body) {
  const auto j = ParseJsonWithinDepth<nlohmann::ordered_json>(body);
  if (j.is_discarded()) return std::string(body);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

HarmonyOutput ParseHarmony(std::string_view text, bool reasoning_in_content) {
  HarmonySplitter splitter(reasoning_in_content);
  ReasoningOutput first = splitter.Push(text);
  HarmonyOutput out = splitter.Finish();
  out.reasoning.insert(0, first.reasoning);
  out.content.insert(0, first.content);
  return out;
}

ReasoningOutput HarmonySplitter::Push(std::string_view text) {
  held_ += text;
  return Drain(/*final=*/false);
}

HarmonyOutput HarmonySplitter::Finish() {
  ReasoningOutput rest = Drain(/*final=*/true);
  return {std::move(rest.reasoning), std::move(rest.content), std::exchange(calls_, {}), thought_};
}

void HarmonySplitter::EndBody() {
  if (channel_ == Channel::kCall) {
    calls_.push_back({"", std::exchange(call_name_, ""), Arguments(call_body_)});
    call_body_.clear();
  }
  channel_ = Channel::kContent;
}

ReasoningOutput HarmonySplitter::Drain(bool final) {
  ReasoningOutput out;
  for (;;) {
    switch (state_) {
      case State::kHeader: {
        // (The start is checked first, so that text arriving in pieces is judged as the whole;
        // so is a <|message|> cut short at the end: the whole text may have it there.)
        const size_t message = held_.find(kHarmonyMessage);
        const size_t earliest = message != std::string::npos
                                    ? message
                                    : held_.size() - PartialTagLength(held_, kHarmonyMessage);
        if (!CouldBeHeader(held_) || earliest > kMaxHeader) {
          state_ = State::kPlain;
          continue;
        }
        if (message == std::string::npos) {
          if (final) held_.clear();  // a header cut short: nothing of it is said
          out.thought = thought_;
          return out;
        }
        const std::string header = held_.substr(0, message);
        held_.erase(0, message + kHarmonyMessage.size());
        const std::string_view channel = WordAfter(header, kHarmonyChannel);
        const std::string_view recipient = WordAfter(header, "to=");
        if (!recipient.empty() && recipient != "assistant" && recipient != "user") {
          channel_ = Channel::kCall;
          call_name_ = recipient.substr(0, 10) == "functions." ? recipient.substr(10) : recipient;
        } else if (channel == "analysis") {
          channel_ = Channel::kAnalysis;
          thought_ = true;
          if (reasoning_in_content_) out.content += header + std::string(kHarmonyMessage);
        } else {
          channel_ = Channel::kContent;
        }
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        const size_t end = held_.find(kHarmonyEnd);
        // Up to <|end|>, or what cannot be the start of one.
        const size_t take = end != std::string::npos ? end
                            : final                  ? held_.size()
                                    : held_.size() - PartialTagLength(held_, kHarmonyEnd);
        const std::string_view body = std::string_view(held_).substr(0, take);
        switch (channel_) {
          case Channel::kAnalysis:
            (reasoning_in_content_ ? out.content : out.reasoning) += body;
            if (reasoning_in_content_ && end != std::string::npos) out.content += kHarmonyEnd;
            break;
          case Channel::kContent:
            out.content += body;
            break;
          case Channel::kCall:
            call_body_ += body;
            break;
        }
        if (end != std::string::npos) {
          held_.erase(0, end + kHarmonyEnd.size());
          EndBody();
          state_ = State::kHeader;
          continue;
        }
        held_.erase(0, take);
        if (final) EndBody();
        out.thought = thought_;
        return out;
      }
      case State::kPlain:
        out.content += std::exchange(held_, "");
        out.thought = thought_;
        return out;
    }
  }
}

}  // namespace mt::server
