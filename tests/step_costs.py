"""Step costs that tests fix on auto sessions (`spec_actor.nif.testing.fix_step_cost_table`).

Auto measures what a step costs and drafts where drafting pays. A test that
counts what it drafted fixes the cost instead, so that its outcome follows
from what the drafters propose and the target accepts, not from the
machine's load while the cost is measured.
"""

# Drafting pays when the drafts are right: a drafted token adds a tenth of a
# plain step. Whether a model arm earns its processing time then follows
# from what the target accepts.
CHEAP_DRAFTS_US = [10_000.0] + [10_000.0 + 1_000.0 * n for n in range(1, 33)]

# The float32 tiny models' own shape: a drafted token costs about as much as
# a plain step. (A run beside a compiler once measured drafts cheaper than
# this, and auto verified more of them on text that hardly repeats.)
TINY_STEP_COST_US = [200.0 * (1 + n) for n in range(33)]
