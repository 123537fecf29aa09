// One generation on a session: prefill, then draft -> verify -> accept until a
// terminal event, a cancel, or the consumer stops it.
#pragma once

#include "session.h"

#include "sampling.h"

namespace sa {

// Runs one generation with validated parameters; takes ownership of smpl.
// Returns SA_OK once a terminal event (Done, Eog or Error) was delivered,
// SA_CANCELLED or SA_STOPPED otherwise.
sa_status run_generation(sa_session & s, const sa_run_params & p, common_sampler * smpl, sa_event_cb cb, void * user);

}  // namespace sa
