#include "grammar/chat_answer.h"

#include <utility>

namespace mt::grammar {

Result<StartedGrammar> AnswerGrammar(std::string_view gbnf, const ChatPrompt& prompt) {
  StartedGrammar out;
  const bool after_block = prompt.thinking_open || prompt.may_think;
  // After a block the model writes "\n\n" before its answer: a few spaces and newlines
  // first (bounded, so that a weak model cannot fill its budget with them).
  Result<std::shared_ptr<const Grammar>> compiled =
      after_block
          ? Grammar::Parse(std::string(gbnf) + "\nmoetier-answer ::= [ \\n]{0,4} root\n",
                           "moetier-answer")
                  : Grammar::Parse(gbnf);
  if (!compiled.ok()) return compiled.status();
  out.grammar = std::move(compiled).value();
  if (after_block) {
    out.start.block_open = kThinkOpen;
    out.start.block_close = kThinkClose;
    out.start.in_block = prompt.thinking_open;
  }
  return out;
}

Result<StartedGrammar> LazyAnswerGrammar(std::string_view gbnf, std::string trigger,
                                         const ChatPrompt& prompt) {
  StartedGrammar out;
  Result<std::shared_ptr<const Grammar>> compiled = Grammar::Parse(gbnf);
  if (!compiled.ok()) return compiled.status();
  out.grammar = std::move(compiled).value();
  out.start.trigger = std::move(trigger);
  if (prompt.thinking_open || prompt.may_think) {
    out.start.block_open = kThinkOpen;
    out.start.block_close = kThinkClose;
    out.start.in_block = prompt.thinking_open;
  }
  return out;
}

}  // namespace mt::grammar
