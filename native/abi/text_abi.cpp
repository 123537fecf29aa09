// The C ABI of text: chats rendered with a chat template (llama.cpp's fixed
// list, or the model's own Jinja template) and replies parsed back, GBNF
// grammars checked, JSON schemas made grammars (see spec_actor.h).
#include "model/text.h"
#include "support/shim_internal.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sa;

namespace {

// Runs fn, turning the exceptions of bad input into SA_ERR_INVALID_ARG with their message.
template <typename Fn>
sa_status checked(const char * what, Fn && fn) {
    return guarded(what, [&]() -> sa_status {
        try {
            return fn();
        } catch (const std::bad_alloc &) {
            throw;
        } catch (const std::exception & e) {
            return fail(SA_ERR_INVALID_ARG, e.what());  // the Python side names what failed
        }
    });
}

}  // namespace

extern "C" {

sa_status sa_chat_apply_template(const char * tmpl, const char * const * roles, const char * const * contents,
                                 int32_t n_messages, int32_t add_generation_prompt, char * buf, int32_t cap,
                                 int32_t * n_out) {
    if (tmpl == nullptr || n_out == nullptr || n_messages < 0 ||
        (n_messages > 0 && (roles == nullptr || contents == nullptr))) {
        return fail(SA_ERR_INVALID_ARG, "sa_chat_apply_template: null argument or negative message count");
    }
    return guarded("chat template", [&]() -> sa_status {
        std::vector<llama_chat_message> chat((size_t) n_messages);
        size_t total = 0;
        for (int32_t i = 0; i < n_messages; ++i) {
            if (roles[i] == nullptr || contents[i] == nullptr) {
                return fail(SA_ERR_INVALID_ARG, "message " + std::to_string(i) + " has no role or no content");
            }
            chat[(size_t) i] = {roles[i], contents[i]};
            total += std::char_traits<char>::length(roles[i]) + std::char_traits<char>::length(contents[i]);
        }
        // llama.cpp recommends twice the message text; grow once if it asks for more.
        std::string out(2 * total + 256, '\0');
        int32_t n = llama_chat_apply_template(tmpl, chat.data(), chat.size(), add_generation_prompt != 0,
                                              out.data(), (int32_t) out.size());
        if (n > (int32_t) out.size()) {
            out.resize((size_t) n);
            n = llama_chat_apply_template(tmpl, chat.data(), chat.size(), add_generation_prompt != 0,
                                          out.data(), (int32_t) out.size());
        }
        if (n < 0) {
            return fail(SA_ERR_INVALID_ARG,
                        "llama.cpp does not support this chat template (it knows a fixed list of formats: "
                        "chatml, llama3, gemma, mistral, phi3, ...); pass template= with a supported template "
                        "name or format the prompt yourself");
        }
        *n_out = n;
        if (buf == nullptr || cap < n + 1) return fail(SA_ERR_BUFFER, "buffer too small");
        std::memcpy(buf, out.data(), (size_t) n);
        buf[n] = '\0';
        return SA_OK;
    });
}

sa_status sa_chat_builtin_templates(char * buf, int32_t cap, int32_t * n_out) {
    if (n_out == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_chat_builtin_templates: null argument");
    return guarded("chat template names", [&]() -> sa_status {
        std::vector<const char *> names((size_t) llama_chat_builtin_templates(nullptr, 0));
        llama_chat_builtin_templates(names.data(), names.size());
        std::string joined;
        for (const char * name : names) joined += (joined.empty() ? "" : "\n") + std::string(name);
        *n_out = (int32_t) joined.size();
        if (buf == nullptr || cap < *n_out + 1) return fail(SA_ERR_BUFFER, "buffer too small");
        std::memcpy(buf, joined.data(), joined.size() + 1);
        return SA_OK;
    });
}

sa_status sa_chat_jinja_apply(const sa_model * model, const char * request, char * buf, int32_t cap,
                              int32_t * n_out) {
    if (model == nullptr || request == nullptr || n_out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_chat_jinja_apply: null argument");
    }
    return checked("chat template", [&]() -> sa_status {
        return copy_out(jinja_render(model->model, request), buf, cap, n_out);
    });
}

sa_status sa_chat_jinja_parse(const char * text, int32_t is_partial, const char * chat, char * buf, int32_t cap,
                              int32_t * n_out) {
    if (text == nullptr || chat == nullptr || n_out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_chat_jinja_parse: null argument");
    }
    return checked("parsing the reply", [&]() -> sa_status {
        return copy_out(jinja_parse(text, is_partial != 0, chat), buf, cap, n_out);
    });
}

sa_status sa_grammar_check(const char * grammar, const sa_grammar_limits * limits) {
    if (grammar == nullptr) return fail(SA_ERR_INVALID_ARG, "sa_grammar_check: null grammar");
    sa_grammar_limits bounds = {SA_GRAMMAR_DEPTH_CEILING, INT32_MAX, INT32_MAX, INT32_MAX};
    if (limits != nullptr) {
        if (limits->max_depth < 1 || limits->max_rules < 1 || limits->max_alternatives < 1 ||
            limits->max_repetition < 1) {
            return fail(SA_ERR_INVALID_ARG, "sa_grammar_check: every limit must be at least 1");
        }
        bounds = *limits;
        if (bounds.max_depth > SA_GRAMMAR_DEPTH_CEILING) bounds.max_depth = SA_GRAMMAR_DEPTH_CEILING;
    }
    return check_grammar(grammar, bounds);
}

sa_status sa_json_schema_to_grammar(const char * schema, char * buf, int32_t cap, int32_t * n_out) {
    if (schema == nullptr || n_out == nullptr) {
        return fail(SA_ERR_INVALID_ARG, "sa_json_schema_to_grammar: null argument");
    }
    return guarded("converting the JSON schema", [&]() -> sa_status {
        std::string grammar;
        const sa_status st = json_schema_grammar(schema, grammar);
        return st != SA_OK ? st : copy_out(grammar, buf, cap, n_out);
    });
}

}  // extern "C"
