#include "grammar/chat_answer.h"

#include <utility>

namespace mt::grammar {
namespace {

// Where a thinking model's reasoning is: the block it may open, or the one its prompt opened.
LazyStart ReasoningBlock(const ChatPrompt& prompt) {
  LazyStart start;
  if (prompt.thinking_open || prompt.may_think) {
    start.block_open = kThinkOpen;
    start.block_close = kThinkClose;
    start.in_block = prompt.thinking_open;
  }
  return start;
}

}  // namespace

Result<StartedGrammar> AnswerGrammar(std::string_view gbnf, const ChatPrompt& prompt) {
  StartedGrammar out;
  out.start = ReasoningBlock(prompt);
  // After a block the model writes "\n\n" before its answer: a few spaces and newlines
  // first (bounded, so that a weak model cannot fill its budget with them).
  const bool after_block = !out.start.block_close.empty();
  out.grammar = MT_TRY(
      after_block ? Grammar::Parse(std::string(gbnf) + "\nmoetier-answer ::= [ \\n]{0,4} root\n",
                                   "moetier-answer")
                  : Grammar::Parse(gbnf));
  return out;
}

Result<StartedGrammar> LazyAnswerGrammar(std::string_view gbnf, std::string trigger,
                                         const ChatPrompt& prompt) {
  StartedGrammar out;
  out.start = ReasoningBlock(prompt);
  out.start.trigger = std::move(trigger);
  out.grammar = MT_TRY(Grammar::Parse(gbnf));
  return out;
}

}  // namespace mt::grammar
