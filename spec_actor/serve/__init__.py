"""``spec-actor serve``: an OpenAI-compatible HTTP server over an actor pool, on trio.

`open_server` serves a loaded model with ``POST /v1/completions``,
``POST /v1/chat/completions`` (streamed as server-sent events or whole),
``GET /v1/models``, ``GET /health`` and ``GET /metrics`` (Prometheus), and
llama-server's own routes (``/completion``, ``/tokenize``, ``/props``,
``/slots``, ...: docs/server-compatibility.md), and Anthropic's
``POST /v1/messages`` on the chat completions' path. It runs Starlette's router
on hypercorn's trio worker; a client that hangs up cancels its
generation, prompt prefill included; `ServeLimits` bounds what one client
may take (docs/serving.md, "Serving safely"). Needs the ``serve`` extra
(``pip install 'spec_actor[serve]'``).
"""

from ._defaults import RequestDefaults
from ._errors import ApiError
from ._limits import BodyLimits, GrammarLimits, ServeLimits
from ._server import DEFAULT_MAX_BODY, Server, open_server
from ._state import Cancellation, ServerState
from ._vertex import VertexRoutes

__all__ = ["DEFAULT_MAX_BODY", "ApiError", "BodyLimits", "Cancellation", "GrammarLimits", "RequestDefaults",
           "ServeLimits", "Server", "ServerState", "VertexRoutes", "open_server"]
