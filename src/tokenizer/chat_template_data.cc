// Built-in copies of chat templates that synth writes into tokenizer.chat_template.
#include "tokenizer/chat_template.h"

namespace mt {

std::string_view DeepseekR1ChatTemplate() {
  // deepseek-ai/DeepSeek-R1's tokenizer_config.json "chat_template" (the 2025 revision whose
  // generation prompt opens "<think>\n"), verbatim; Jinja's '\n' escapes written as they
  // are in the decoded JSON. It is DeepSeek-V3's template with R1's reasoning rules.
  static constexpr std::string_view kTemplate =
      R"({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %})"
      R"({% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true)"
      R"(, system_prompt='', is_first_sp=true) %}{%- for message in messages %})"
      R"({%- if message['role'] == 'system' %}{%- if ns.is_first_sp %})"
      R"({% set ns.system_prompt = ns.system_prompt + message['content'] %})"
      R"({% set ns.is_first_sp = false %}{%- else %})"
      R"({% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %})"
      R"({%- endif %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }})"
      R"({%- for message in messages %}{%- if message['role'] == 'user' %})"
      R"({%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %})"
      R"({%- if message['role'] == 'assistant' and 'tool_calls' in message %})"
      R"({%- set ns.is_tool = false -%}{%- for tool in message['tool_calls'] %})"
      R"({%- if not ns.is_first %}{%- if message['content'] is none %})"
      R"({{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜)"
      R"(tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function'])"
      R"(['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- else %})"
      R"({{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin)"
      R"(｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json')"
      R"( + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}})"
      R"({%- endif %}{%- set ns.is_first = true -%}{%- else %})"
      R"({{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function')"
      R"(]['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' +)"
      R"( '<｜tool▁call▁end｜>'}}{%- endif %}{%- endfor %})"
      R"({{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %})"
      R"({%- if message['role'] == 'assistant' and 'tool_calls' not in message %})"
      R"({%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sen)"
      R"(tence｜>'}}{%- set ns.is_tool = false -%}{%- else %})"
      R"({% set content = message['content'] %}{% if '</think>' in content %})"
      R"({% set content = content.split('</think>')[-1] %}{% endif %})"
      R"({{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %})"
      R"({%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%})"
      R"({%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + me)"
      R"(ssage['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %})"
      R"({%- else %}{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>)"
      R"('}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %})"
      R"({{'<｜tool▁outputs▁end｜>'}}{% endif %})"
      R"({% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}})"
      R"({% endif %})";
  return kTemplate;
}

}  // namespace mt
