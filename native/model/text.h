// What a model does with text outside a session: chats through its own Jinja
// template and replies parsed back (chat_jinja.cpp), GBNF grammars checked
// (grammar_check.cpp), JSON schemas made grammars (json_schema.cpp). Their C
// ABI is abi/text_abi.cpp.
#pragma once

#include "abi/spec_actor.h"

#include <string>

struct llama_model;

namespace sa {

// The chat that the JSON request (messages, tools, template, ...) renders to
// with model's template, as JSON; bad input throws std::exception with a
// message that says what was wrong.
std::string jinja_render(const llama_model * model, const char * request);

// The reply text parsed back (content, reasoning, tool calls) for the chat
// that jinja_render returned, as JSON; is_partial: the reply may end early.
// Bad input throws as jinja_render does.
std::string jinja_parse(const char * text, bool is_partial, const char * chat);

// SA_OK, or SA_ERR_GRAMMAR naming where grammar breaks GBNF or exceeds
// bounds (depth, rules, alternatives, repetition), in time linear in its length.
sa_status check_grammar(const char * grammar, const sa_grammar_limits & bounds);

// The GBNF grammar of a JSON schema, by llama.cpp's converter, into grammar;
// SA_ERR_GRAMMAR naming the part of the schema it could not convert.
sa_status json_schema_grammar(const char * schema, std::string & grammar);

}  // namespace sa
