// Grammars for a chat model's answer that leave its reasoning free: a thinking model (Qwen3)
// writes a <think> block before the answer a response format or a tool call constrains.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/token_filter.h"
#include "tokenizer/chat_template.h"

namespace mt::grammar {

// A grammar and where it starts applying.
struct StartedGrammar {
  std::shared_ptr<const Grammar> grammar;
  LazyStart start;
};

// The answer after `prompt` (a default ChatPrompt for plain text) constrained by `gbnf`
// (start rule root). The reasoning stays free: when the prompt opened <think>, or the model
// may open it (ChatPrompt::may_think), the grammar applies after "</think>" and up to four
// spaces or newlines (from the start, the same, when the model does not open a block);
// otherwise from the first token. Errors: the grammar's.
Result<StartedGrammar> AnswerGrammar(std::string_view gbnf, const ChatPrompt& prompt);

// A lazy grammar (`gbnf` for what follows `trigger`, e.g. "<tool_call>") whose trigger counts
// only outside the reasoning, so the call syntax written while thinking stays free text.
Result<StartedGrammar> LazyAnswerGrammar(std::string_view gbnf, std::string trigger,
                                         const ChatPrompt& prompt);

}  // namespace mt::grammar
