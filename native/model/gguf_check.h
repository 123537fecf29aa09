// Checks of a GGUF file's metadata that llama.cpp asserts on (aborting the
// process) instead of reporting: run before llama_model_load_from_file.
#pragma once

#include "abi/spec_actor.h"

namespace sa {

// SA_OK, or SA_ERR_MODEL_LOAD when path cannot be read or does not start
// with GGUF's magic (the message says which).
sa_status check_gguf_file(const char * path);

// SA_OK, or SA_ERR_MODEL_LOAD with a message naming the key, its value and
// the allowed range. Files that gguf cannot parse pass: llama.cpp reports those.
sa_status check_gguf_metadata(const char * path);

}  // namespace sa
