// Chats rendered with the model's own Jinja template and tool calls parsed
// back, through llama.cpp's common/chat (what llama-server does by default).
// Requests and results are JSON text; bad input throws, and the ABI
// (abi/text_abi.cpp) makes that an SA_ERR_INVALID_ARG naming what was wrong.
#include "engine/sampler.h"
#include "model/text.h"
#include "support/shim_internal.h"

#include "chat.h"
#include "json.h"

#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>

using namespace sa;

namespace {

// common_chat_templates_init rethrows a template's error as a plain std::exception
// ("throw e;"), its message lost; building the template again throws it whole.
common_chat_templates_ptr init_templates(const llama_model * model, const std::string & tmpl) {
    try {
        return common_chat_templates_init(model, tmpl);
    } catch (const std::exception &) {
        if (!tmpl.empty()) common_chat_template again(tmpl, "", "");
        throw;
    }
}

common_json render(const llama_model * model, const common_json & req) {
    common_chat_templates_ptr tmpls = init_templates(model, req.value("template", std::string()));
    common_chat_templates_inputs inputs;
    inputs.messages = common_chat_msgs_parse_oaicompat(req.at("messages"));
    if (req.contains("tools")) inputs.tools = common_chat_tools_parse_oaicompat(req.at("tools"));
    inputs.tool_choice = common_chat_tool_choice_parse_oaicompat(req.value("tool_choice", std::string("auto")));
    inputs.parallel_tool_calls = req.value("parallel_tool_calls", false);
    inputs.add_generation_prompt = req.value("add_generation_prompt", true);
    // the template's enable_thinking (llama-server's --reasoning, a request's chat_template_kwargs)
    inputs.enable_thinking = req.value("enable_thinking", true);
    if (req.contains("chat_template_kwargs")) {
        for (const auto & item : req.at("chat_template_kwargs").items()) {
            inputs.chat_template_kwargs[item.key()] = item.value().dump();
        }
    }
    inputs.use_jinja = true;
    inputs.reasoning_format = COMMON_REASONING_FORMAT_NONE;
    const common_chat_params params = common_chat_templates_apply(tmpls.get(), inputs);

    common_json out = common_json::object();
    out["prompt"] = params.prompt;
    out["grammar"] = params.grammar;
    out["grammar_lazy"] = params.grammar_lazy;
    out["format"] = (int64_t) params.format;
    out["format_name"] = std::string(common_chat_format_name(params.format));
    out["generation_prompt"] = params.generation_prompt;
    out["parser"] = params.parser;
    common_json stops = common_json::array();
    for (const std::string & stop : params.additional_stops) stops.push_back(stop);
    out["additional_stops"] = stops;
    common_json triggers = common_json::array();
    for (const common_grammar_trigger & t : params.grammar_triggers) {
        triggers.push_back({{"type", (int64_t) t.type}, {"value", t.value}, {"token", (int64_t) t.token}});
    }
    out["grammar_triggers"] = triggers;
    return out;
}

constexpr size_t MAX_TRIGGERS = 64;
constexpr size_t MAX_TRIGGER_CHARS = 4096;

// A lazy grammar's triggers (render's "grammar_triggers"), checked so that
// common_sampler_init cannot assert (an unknown type, a token outside the
// vocabulary) and a pattern that is not a regex is refused here, by name.
std::vector<common_grammar_trigger> parse_triggers(const llama_model * model, const common_json & list) {
    if (!list.is_array() || list.size() > MAX_TRIGGERS) {
        throw std::invalid_argument("grammar triggers must be an array of at most " + std::to_string(MAX_TRIGGERS));
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<common_grammar_trigger> out;
    for (const common_json & item : list) {
        common_grammar_trigger t;
        const int64_t type = item.at("type").get<int64_t>();
        if (type < COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN || type > COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL) {
            throw std::invalid_argument("grammar trigger type " + std::to_string(type) + " is unknown");
        }
        t.type = (common_grammar_trigger_type) type;
        t.value = item.value("value", std::string());
        if (t.value.size() > MAX_TRIGGER_CHARS) throw std::invalid_argument("grammar trigger is too long");
        if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN) {
            const int64_t token = item.at("token").get<int64_t>();
            if (token < 0 || token >= n_vocab) {
                throw std::invalid_argument("grammar trigger token " + std::to_string(token) +
                                            " is not in the vocabulary");
            }
            t.token = (llama_token) token;
        } else if (t.type != COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
            try {
                std::regex check(t.value);
            } catch (const std::regex_error & e) {
                throw std::invalid_argument("grammar trigger pattern '" + t.value + "' is not a regex: " + e.what());
            }
        }
        out.push_back(std::move(t));
    }
    return out;
}

std::shared_ptr<const common_chat_parser_params> load_parser(const common_json & chat) {
    auto pp = std::make_shared<common_chat_parser_params>();
    pp->format = (common_chat_format) chat.at("format").get<int64_t>();
    if (pp->format < 0 || pp->format >= COMMON_CHAT_FORMAT_COUNT) throw std::invalid_argument("unknown chat format");
    pp->generation_prompt = chat.value("generation_prompt", std::string());
    pp->reasoning_format = COMMON_REASONING_FORMAT_NONE;
    pp->parse_tool_calls = chat.value("parse_tool_calls", true);
    const std::string parser = chat.value("parser", std::string());
    if (!parser.empty()) pp->parser.load(parser);
    return pp;
}

// The parsers loaded last, by their JSON text: a streamed reply is parsed
// again after every token, and loading its parser costs far more than
// parsing (milliseconds for a 12 KB parser). Parsing only reads them.
class ParserCache {
  public:
    std::shared_ptr<const common_chat_parser_params> get(const std::string & chat_text) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (const auto & [text, pp] : entries_) {
                if (text == chat_text) return pp;
            }
        }
        auto pp = load_parser(common_json::parse(chat_text));  // outside the lock: it may throw or take long
        std::lock_guard<std::mutex> lock(mutex_);
        entries_.emplace_front(chat_text, pp);
        if (entries_.size() > CAPACITY) entries_.pop_back();
        return pp;
    }

  private:
    static constexpr size_t CAPACITY = 8;
    std::mutex mutex_;
    std::list<std::pair<std::string, std::shared_ptr<const common_chat_parser_params>>> entries_;
};

common_json parse(const std::string & text, bool partial, const std::string & chat_text) {
    static ParserCache cache;
    const std::shared_ptr<const common_chat_parser_params> pp = cache.get(chat_text);
    const common_chat_msg msg = common_chat_parse(text, partial, *pp);
    common_json out = common_json::object();
    out["content"] = msg.content;
    out["reasoning_content"] = msg.reasoning_content;
    common_json calls = common_json::array();
    for (const common_chat_tool_call & call : msg.tool_calls) {
        common_json c = common_json::object();
        c["name"] = call.name;
        c["arguments"] = call.arguments;
        c["id"] = call.id;
        calls.push_back(c);
    }
    out["tool_calls"] = calls;
    return out;
}

}  // namespace

std::vector<common_grammar_trigger> sa::grammar_triggers_from_json(const llama_model * model, const char * json) {
    return parse_triggers(model, common_json::parse(json));
}

std::string sa::jinja_render(const llama_model * model, const char * request) {
    return render(model, common_json::parse(request)).dump_safe();
}

std::string sa::jinja_parse(const char * text, bool is_partial, const char * chat) {
    return parse(text, is_partial, chat).dump_safe();
}
