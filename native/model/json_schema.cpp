// JSON schema -> GBNF through llama.cpp's own converter (common/json-schema-to-grammar),
// with every failure turned into SA_ERR_GRAMMAR and a message naming the part.
#include "model/text.h"
#include "support/shim_internal.h"

#include "json-schema-to-grammar.h"
#include "json.h"

#include <stdexcept>
#include <string>

using namespace sa;

namespace {

// The converter's messages start with its own prefix; keep the part after it.
std::string reason(const std::exception & e) {
    std::string msg = e.what();
    const std::string prefix = "JSON schema conversion failed:\n";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg.erase(0, prefix.size());
    for (char & c : msg) if (c == '\n') c = ';';
    return msg;
}

}  // namespace

sa_status sa::json_schema_grammar(const char * schema, std::string & grammar) {
    try {
        common_json parsed = common_json::parse(schema);
        if (!parsed.is_object() && !parsed.is_boolean()) {
            return fail(SA_ERR_GRAMMAR, "invalid JSON schema: the schema must be a JSON object");
        }
        grammar = json_schema_to_grammar(parsed, /* force_gbnf */ true);
    } catch (const std::bad_alloc &) {
        throw;
    } catch (const std::exception & e) {
        return fail(SA_ERR_GRAMMAR, "invalid JSON schema: " + reason(e));
    }
    if (grammar.size() > (size_t) INT32_MAX - 1) {
        return fail(SA_ERR_GRAMMAR, "invalid JSON schema: its grammar is too large");
    }
    return SA_OK;
}
