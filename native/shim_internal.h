// Definitions shared by the shim's translation units (not part of the ABI).
#pragma once

#include "spec_actor.h"
#include "shim_errors.h"

#include "llama.h"

#include <functional>
#include <string>

struct sa_model {
    llama_model * model;
    std::string path;
    bool load_mtp;
    bool vocab_only;
};

namespace sa {
// Runs fn (which prints through llama.cpp/common logging) at the given level.
void print_with_log_level(int level, const std::function<void()> & fn);
}
