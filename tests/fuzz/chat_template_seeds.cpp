// Seeds for the chat_template target: templates in the style of real Hugging Face chat templates
// (ChatML with tools, Llama-3 headers with a dated system prompt, Gemma-style macros and role
// checks, a training template with {% generation %}), plus one that touches most of the engine.
#include "fuzz_seeds.h"

namespace finetune::fuzz {

std::vector<std::string> chat_template_seeds() {
  return {
      // ChatML with tools (Qwen-style).
      "{%- if tools %}\n"
      "    {{- '<|im_start|>system\\n' }}\n"
      "    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n"
      "    {{- \"# Tools\\n<tools>\" }}\n"
      "    {%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}\n"
      "    {{- \"\\n</tools><|im_end|>\\n\" }}\n"
      "{%- elif messages[0].role == 'system' %}\n"
      "    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
      "{%- endif %}\n"
      "{%- for message in messages %}\n"
      "    {%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}\n"
      "        {%- set content = message.content if message.content is string else message.content | map(attribute='text') | join %}\n"
      "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}\n"
      "    {%- elif message.role == 'assistant' %}\n"
      "        {{- '<|im_start|>assistant' }}\n"
      "        {%- for tool_call in message.tool_calls %}\n"
      "            {%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}\n"
      "            {{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}\n"
      "            {{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}\n"
      "        {%- endfor %}\n"
      "        {{- '<|im_end|>\\n' }}\n"
      "    {%- elif message.role == 'tool' %}\n"
      "        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
      "        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}\n"
      "        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n",
      // Llama-3 headers with a dated system prompt.
      "{{- bos_token }}\n"
      "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}\n"
      "{%- if messages[0]['role'] == 'system' %}\n"
      "    {%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}\n"
      "{%- else %}{%- set system_message = '' %}{%- endif %}\n"
      "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n"
      "{{- 'Today Date: ' + date_string + '\\n\\n' + system_message + '<|eot_id|>' }}\n"
      "{%- for message in messages %}\n"
      "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n",
      // Gemma-style: macros, namespace, role checks, content parts.
      "{%- macro render_content(content) -%}\n"
      "  {%- if content is string -%}{{ content | trim }}\n"
      "  {%- else -%}{%- for part in content if part.type == 'text' -%}{{ part.text | trim }}{%- endfor -%}{%- endif -%}\n"
      "{%- endmacro -%}\n"
      "{{ bos_token }}\n"
      "{%- set ns = namespace(first_user_prefix='') -%}\n"
      "{%- if messages[0]['role'] == 'system' -%}\n"
      "  {%- set ns.first_user_prefix = render_content(messages[0]['content']) + '\\n\\n' -%}\n"
      "  {%- set loop_messages = messages[1:] -%}\n"
      "{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}\n"
      "{%- for message in loop_messages -%}\n"
      "  {%- if message['role'] not in ['user', 'assistant', 'tool'] -%}\n"
      "    {{ raise_exception('Only user, assistant and tool roles are supported!') }}\n"
      "  {%- endif -%}\n"
      "  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
      "  {{ '<start_of_turn>' + role + '\\n' + (ns.first_user_prefix if loop.first else '') }}\n"
      "  {{- render_content(message['content']) }}{{ '<end_of_turn>\\n' }}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}\n",
      // A training template: {% generation %} around assistant turns.
      "{%- for message in messages %}\n"
      "{%- if message.role == 'assistant' %}\n"
      "{{- '<|assistant|>\\n' }}{% generation %}{{- message.content }}{{- eos_token }}{% endgeneration %}\n"
      "{%- else %}\n"
      "{{- '<|' + message.role + '|>\\n' + message.content + '\\n' }}\n"
      "{%- endif %}\n"
      "{%- endfor %}\n",
      // Most of the rest: whitespace control, raw, filters, tests, methods, loop variables.
      "{# comment #}{%- set ns = namespace(n=0, seen=[]) -%}\n"
      "{% for m in messages if m.role != 'system' %}\n"
      "  {%+ set ns.n = ns.n + loop.index * 2 ** 2 // 3 % 5 -%}\n"
      "  [{{ loop.index0 }}/{{ loop.length }} {{ loop.previtem.role if loop.previtem is defined }}"
      " {{ loop.cycle('a', 'b') }} {{ m.content[:5] ~ '|' ~ m.content[::-1]|upper }}]\n"
      "  {%- if m.content is string and 'x' not in m.content %}{% continue %}{% endif %}\n"
      "{% else %}empty{% endfor %}\n"
      "{% raw %}{{ raw }}{% endraw %}{{ ns.n }} {{ tools | map(attribute='function.name') | join(', ') }}\n"
      "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ {'b': 1, 'a': [1.5, none]} | dictsort }}\n"
      "{{ 'a,b,,c'.split(',') }} {{ '  x '.strip() }} {{ tools[0] | tojson(indent=2, sort_keys=true) }}\n"
      "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ caller() if caller is defined }}{% endmacro %}"
      "{% call m(1) %}c{% endcall %}{% filter upper %}f{% endfilter %}{% set s %}s{% endset %}{{ s | indent(2, true) }}\n"
      "{% with x = range(3) | list %}{{ x | sum }}{{ x | reverse | first }}{% endwith %}",
  };
}

}  // namespace finetune::fuzz
